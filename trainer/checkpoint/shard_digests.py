"""Digests of a sharded checkpoint's shard files: computed as each rank writes them, checked on load.

Each rank's DCP writer digests (``sum64``, see ``verify``) every ``.distcp`` file as it streams
it out, and writes ``__<rank>_digests.json`` beside its shards before DCP's ``.metadata`` (so a
complete directory always has them). A load reads every shard listed there and compares before
``dcp.load`` reads anything. Directories saved before digests existed are loaded unchecked.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.checkpoint.verify import BLOCK, Sum64

SUFFIX = "digests.json"


class _DigestingStream:
    """A shard file's stream that digests what passes through ``write``."""

    def __init__(self, stream: Any, digest: Sum64) -> None:
        self._stream, self._digest = stream, digest

    def write(self, data: Any) -> int:
        self._digest.update(data)
        return int(self._stream.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def digesting_writer(path: Path) -> Any:
    """A ``FileSystemWriter`` for ``path`` that writes each rank's shard digests beside its shards."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import FileSystem

    class DigestingFileSystem(FileSystem):
        def __init__(self) -> None:
            super().__init__()
            self.digests: dict[str, list[int]] = {}

        @contextlib.contextmanager
        def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
            with super().create_stream(path, mode) as stream:
                if "w" not in mode or not str(path).endswith(".distcp"):
                    yield stream
                    return
                digest = Sum64()
                yield _DigestingStream(stream, digest)
                self.digests[Path(path).name] = digest.digest()

    class DigestingWriter(FileSystemWriter):
        def __init__(self, path: Path) -> None:
            super().__init__(path)
            self.fs = self.digesting = DigestingFileSystem()

        def write_data(self, plan: Any, planner: Any) -> Any:
            future = super().write_data(plan, planner)
            future.wait()  # FileSystemWriter writes in this call: the digests are complete
            names = [r.storage_data.relative_path for r in future.value()]
            digests = {
                name: self.digesting.digests[name] for name in sorted(set(names)) if name in self.digesting.digests
            }
            target = Path(self.path) / f"{plan.storage_data.prefix}{SUFFIX}"
            target.write_text(json.dumps({"format": "sum64", "block": BLOCK, "files": digests}))
            return future

    return DigestingWriter(path)


def damaged_shards(path: Path) -> list[str]:
    """Why each damaged shard of the directory ``path`` is damaged (empty when all match)."""
    problems = []
    for listing in sorted(path.glob(f"*{SUFFIX}")):
        try:
            files = json.loads(listing.read_text())["files"]
        except (ValueError, KeyError, TypeError) as err:
            problems.append(f"{listing.name} (the shard digests) is unreadable: {err}")
            continue
        for name, expected in files.items():
            shard = path / name
            if not shard.is_file():
                problems.append(f"{name} is missing")
            elif (seen := file_digest(shard)) != expected:
                how = _how_it_differs(seen, expected)
                problems.append(f"{name} ({shard.stat().st_size} bytes) does not match its digest ({how})")
    return problems


def _how_it_differs(seen: list[int], expected: list[int]) -> str:
    return f"{seen[0]} bytes where {expected[0]} were written" if seen[0] != expected[0] else "same size, other bytes"


def file_digest(path: Path) -> list[int]:
    digest = Sum64()
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(BLOCK)
        while got := f.readinto(buffer):
            digest.update(memoryview(buffer)[:got])
    return digest.digest()


def check_shards(path: Path) -> None:
    """Raise ``CheckpointError`` naming the damaged shards of ``path``, if any."""
    from trainer.checkpoint.errors import CheckpointError

    problems = damaged_shards(path)
    if problems:
        raise CheckpointError(
            f"{path} is damaged: {'; '.join(problems[:5])}. Nothing was loaded. Its files changed after the save (a "
            "failing disk, a copy that did not finish); use another checkpoint (ckpt_path='last' skips damaged ones)."
        )
