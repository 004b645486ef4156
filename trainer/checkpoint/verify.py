"""Checkpoint integrity: every record of a checkpoint is checked against a digest on every load.

A ``torch.save`` file is a zip whose records (``data.pkl``, one per tensor storage) are stored
uncompressed. ``save_checkpoint`` digests each record as torch writes it and appends the digests as
one more zip member (``<archive>/.steadytrain_digests``, which ``torch.load`` ignores). A load reads
each record once, digesting it in 1 MiB pieces as it lands in the tensor's memory, and compares
after ``torch.load`` returns, before anything reaches a model. Files written elsewhere (a plain
``torch.save``, Lightning) are checked against the CRC-32 their zip already stores, which costs more.

The digest (``sum64``) is Fletcher-style: per 1 MiB block the sum of its little-endian 8-byte words,
then (sum of block sums, sum of block sums times the block number), both mod 2**64. Any flipped bit,
zeroed or overwritten range, or block moved elsewhere changes it; it is not cryptographic (it guards
against damage, not against an attacker, which ``weights_only`` loading is for). It runs at memory
speed where zlib's CRC-32 runs at ~1.4 GB/s (``benchmarks/checkpoint_verify.py``).
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

BLOCK = 1 << 20
DIGESTS = ".steadytrain_digests"
_MASK = (1 << 64) - 1
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_ZIP_MAGIC = b"PK\x03\x04"


class Sum64:
    """The ``sum64`` digest of a byte stream fed in pieces of any size."""

    def __init__(self) -> None:
        self.pos = self.total = self.weighted = 0

    def update(self, data: Any) -> None:
        view = _bytes_view(data)
        while len(view):
            block = self.pos // BLOCK
            take = min(len(view), (block + 1) * BLOCK - self.pos)
            part = _word_sum(view[:take], self.pos % 8)
            self.total = (self.total + part) & _MASK
            self.weighted = (self.weighted + part * (block + 1)) & _MASK
            self.pos += take
            view = view[take:]

    def digest(self) -> list[int]:
        return [self.pos, self.total, self.weighted]


class Crc32:
    """The zip's own CRC-32, for files that carry no ``sum64`` digests."""

    def __init__(self) -> None:
        self.pos = self.crc = 0

    def update(self, data: Any) -> None:
        view = _bytes_view(data)
        self.crc = zlib.crc32(view, self.crc)
        self.pos += len(view)

    def digest(self) -> list[int]:
        return [self.pos, self.crc]


def _bytes_view(data: Any) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _word_sum(view: memoryview, shift: int) -> int:
    """Sum of the 8-byte words ``view`` covers, its first byte at offset ``shift`` of a word."""
    head = (8 - shift) % 8
    total = int.from_bytes(view[:head], "little") << (8 * shift)
    body = view[head:]
    whole = len(body) // 8 * 8
    if whole:
        total += int(np.add.reduce(np.frombuffer(body[:whole], dtype="<u8")))
    return (total + int.from_bytes(body[whole:], "little")) & _MASK


def sum64(data: Any) -> list[int]:
    digest = Sum64()
    digest.update(data)
    return digest.digest()


# ---- saving ----------------------------------------------------------------------------------------
class WriteDigests:
    """The ``sum64`` of each write torch.save makes; a record's data is one write."""

    def __init__(self) -> None:
        self.pos = 0
        self.by_range: dict[tuple[int, int], list[int]] = {}

    def add(self, data: Any) -> None:
        size = memoryview(data).nbytes
        if size:
            self.by_range[(self.pos, size)] = sum64(data)
        self.pos += size

    def append_to(self, f: IO[bytes]) -> None:
        """Add the digests member to the zip ``f`` (open for reading and writing) holds."""
        f.flush()
        with zipfile.ZipFile(f, "a") as archive:  # type: ignore[arg-type]
            infos = archive.infolist()
            digests = {}
            for info in infos:
                found = self.by_range.get((_data_start(f.fileno(), info), info.file_size))
                if found is not None:
                    digests[info.filename] = found
            prefix = infos[0].filename.split("/", 1)[0] if infos else "archive"
            payload = {"format": "sum64", "block": BLOCK, "records": digests}
            archive.writestr(f"{prefix}/{DIGESTS}", json.dumps(payload))


# ---- loading -------------------------------------------------------------------------------------------
@dataclass
class Record:
    """A zip member's data: where it is and the digest it must have."""

    name: str
    start: int
    size: int
    expected: list[int]
    kind: str  # "sum64" | "crc32"
    seen: list[int] | None = field(default=None, compare=False)

    def digester(self) -> Sum64 | Crc32:
        return Sum64() if self.kind == "sum64" else Crc32()


def _data_start(fd: int, info: zipfile.ZipInfo) -> int:
    header = os.pread(fd, _LOCAL_HEADER.size, info.header_offset)
    fields = _LOCAL_HEADER.unpack(header) if len(header) == _LOCAL_HEADER.size else (0,) * 11
    if header[:4] != _ZIP_MAGIC:
        return -1  # a damaged local header: the scan reports the record
    return info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]


def read_records(path: Path, fd: int) -> list[Record] | None:
    """The records of the zip at ``path`` and their digests; None if it is not a zip (legacy format).

    Raises ``zipfile.BadZipFile`` where the zip's directory is unreadable.
    """
    if os.pread(fd, 4, 0) != _ZIP_MAGIC:
        return None
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        own = next((i for i in infos if i.filename.endswith("/" + DIGESTS)), None)
        digests = json.loads(archive.read(own))["records"] if own is not None else None
    records = []
    for info in infos:
        if info is own or info.compress_type != zipfile.ZIP_STORED:
            continue
        if digests is not None and info.filename in digests:
            expected, kind = list(digests[info.filename]), "sum64"
        else:
            expected, kind = [info.file_size, info.CRC], "crc32"
        records.append(Record(info.filename, _data_start(fd, info), info.file_size, expected, kind))
    if digests is None and all(r.expected[1] == 0 for r in records if r.size):
        return []  # written with torch.serialization.set_crc32_options(False): nothing to check against
    return records


def check_record(fd: int, record: Record) -> list[int]:
    """Read one record and return its digest."""
    digest = record.digester()
    if record.start < 0:
        return [-1]
    for offset in range(0, record.size, BLOCK):
        piece = os.pread(fd, min(BLOCK, record.size - offset), record.start + offset)
        digest.update(piece)
        if len(piece) < min(BLOCK, record.size - offset):
            break
    return digest.digest()


def describe(records: list[Record]) -> str:
    shown = ", ".join(f"{r.name} ({r.size} bytes, {r.kind})" for r in records[:5])
    return shown + (f" and {len(records) - 5} more" if len(records) > 5 else "")


class VerifyingReader:
    """The file as ``torch.load`` reads it, digesting each record it reads whole, in 1 MiB pieces."""

    def __init__(self, f: IO[bytes], records: list[Record]) -> None:
        self.f = f
        self.records = {r.start: r for r in records}

    def readinto(self, buffer: Any) -> int:
        view = _bytes_view(buffer)
        record = self.records.get(self.f.tell())
        if record is None or len(view) != record.size:
            return self.f.readinto(view)  # type: ignore[attr-defined,no-any-return]
        digest, done = record.digester(), 0
        while done < len(view):
            got = self.f.readinto(view[done : done + BLOCK])  # type: ignore[attr-defined]
            if not got:
                break
            digest.update(view[done : done + got])
            done += got
        record.seen = digest.digest()
        return done

    def read(self, size: int = -1) -> bytes:
        return self.f.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def tell(self) -> int:
        return self.f.tell()


def mismatches(fd: int, records: list[Record]) -> list[Record]:
    """The records whose digest differs; those ``torch.load`` did not read whole are read here."""
    bad = []
    for record in records:
        seen = record.seen if record.seen is not None else check_record(fd, record)
        if seen != record.expected:
            bad.append(record)
    return bad


def load_verified(path: Path, map_location: Any, weights_only: bool = True) -> Any:
    """``torch.load(path, weights_only=True)``, each record checked; ``CheckpointError`` names damaged ones."""
    import torch

    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        try:
            records = read_records(path, fd)
        except (zipfile.BadZipFile, ValueError, KeyError, EOFError):
            records = None  # not a readable zip: torch.load says what is wrong with it
        if not records:
            return torch.load(path, map_location=map_location, weights_only=weights_only)
        try:
            obj = torch.load(VerifyingReader(f, records), map_location=map_location, weights_only=weights_only)  # type: ignore[arg-type]
        except Exception as err:
            for record in records:
                record.seen = None  # read everything again: damage may be why it failed
            bad = mismatches(fd, records)
            if bad:
                raise damage_error(path, bad) from err
            raise
        bad = mismatches(fd, records)
    if bad:
        raise damage_error(path, bad)
    return obj


def damage_error(path: Path, bad: list[Record]) -> Exception:
    from trainer.checkpoint.errors import CheckpointError

    what = "digests written when it was saved" if bad[0].kind == "sum64" else "CRC-32 its zip stores"
    return CheckpointError(
        f"{path} is damaged: {len(bad)} record(s) do not match the {what}: {describe(bad)}. Nothing was loaded. "
        "Its bytes changed after it was written (a failing disk, bit rot, a copy by another tool); use another "
        "checkpoint (ckpt_path='last' skips damaged ones; `python -m trainer.checkpoint verify DIR` checks them)."
    )


def damaged_records(path: Path) -> tuple[list[Record] | None, str | None]:
    """Scan a whole file: (the damaged records, or None if nothing can be checked; why it is unreadable)."""
    with open(path, "rb") as f:
        try:
            records = read_records(path, f.fileno())
        except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError) as err:
            return [], f"its zip directory is unreadable ({type(err).__name__}: {err})"
        if records is None:
            return None, None
        return mismatches(f.fileno(), records), None
