"""Damage is caught on load: single files, sharded directories and weights-only exports, byte-flipped for real."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

import pytest
import torch

from trainer.checkpoint.__main__ import main as checkpoint_cli
from trainer.checkpoint.damage import damage
from trainer.checkpoint.io import CheckpointError, load_checkpoint, load_weights, save_checkpoint
from trainer.checkpoint.newest import find_last_checkpoint, newest_checkpoint
from trainer.checkpoint.sharded import load_sharded, save_sharded
from trainer.checkpoint.verify import BLOCK, Sum64, sum64
from trainer.failures import describe, note_worker_failure, record, recorded, worker_failure
from trainer.strategies.single import SingleDeviceStrategy


def _flip(path: Path, record_name: str | None = None, at: float = 0.5) -> None:
    """Flip one bit inside ``record_name``'s data (or at the fraction ``at`` of the file)."""
    data = bytearray(path.read_bytes())
    if record_name is None:
        offset = int(len(data) * at)
    else:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(record_name)
        header = data[info.header_offset : info.header_offset + 30]
        start = (
            info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")
        )
        offset = start + info.file_size // 2
    data[offset] ^= 0x10
    path.write_bytes(data)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))


def test_sum64_is_the_same_in_any_pieces_and_sees_every_change() -> None:
    data = os.urandom(2 * BLOCK + 13)
    whole = sum64(data)
    pieces = Sum64()
    for start, end in ((0, 5), (5, BLOCK + 3), (BLOCK + 3, len(data))):
        pieces.update(data[start:end])
    assert pieces.digest() == whole
    changed = bytearray(data)
    changed[BLOCK + 7] ^= 1
    assert sum64(changed) != whole
    moved = data[BLOCK : 2 * BLOCK] + data[:BLOCK] + data[2 * BLOCK :]  # two blocks swapped
    assert sum64(moved) != whole


def test_a_flipped_bit_in_a_tensor_record_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    save_checkpoint({"state_dict": _model().state_dict(), "epoch": 1}, path)
    assert load_checkpoint(path)["epoch"] == 1
    with zipfile.ZipFile(path) as archive:
        assert "archive/.steadytrain_digests" in archive.namelist()
    assert torch.load(path, weights_only=True)["epoch"] == 1  # still a plain torch.save file
    _flip(path, "archive/data/0")
    with pytest.raises(CheckpointError, match=r"last.ckpt is damaged: 1 record\(s\).*archive/data/0 \(16384 bytes"):
        load_checkpoint(path)
    assert "archive/data/0" in str(damage(path))


def test_a_damaged_pickle_record_is_named_rather_than_an_unpickling_error(tmp_path: Path) -> None:
    path = tmp_path / "a.ckpt"
    save_checkpoint({"state_dict": _model().state_dict()}, path)
    _flip(path, "archive/data.pkl")
    with pytest.raises(CheckpointError, match=r"archive/data\.pkl"):
        load_checkpoint(path)


def test_a_damaged_weights_only_export_leaves_the_model_untouched(tmp_path: Path) -> None:
    path = tmp_path / "weights.ckpt"
    save_checkpoint({"state_dict": _model().state_dict()}, path)
    _flip(path, "archive/data/2")
    target = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(CheckpointError, match="is damaged"):
        load_weights(target, path)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def test_a_file_written_elsewhere_is_checked_against_its_zip_crc(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save(_model().state_dict(), path)
    assert set(load_checkpoint(path)) == {"0.weight", "0.bias", "1.weight", "1.bias"}
    _flip(path, "plain/data/0")
    with pytest.raises(CheckpointError, match="CRC-32 its zip stores: plain/data/0"):
        load_checkpoint(path)


def test_last_skips_a_damaged_newest_checkpoint_with_a_warning(tmp_path: Path) -> None:
    older, newest = tmp_path / "epoch=0.ckpt", tmp_path / "last.ckpt"
    save_checkpoint({"state_dict": _model().state_dict(), "epoch": 0}, older)
    save_checkpoint({"state_dict": _model().state_dict(), "epoch": 1}, newest)
    os.utime(older, (time.time() - 60, time.time() - 60))
    assert find_last_checkpoint(tmp_path) == newest
    _flip(newest, "archive/data/1")
    with pytest.warns(UserWarning, match=r"skipped the damaged checkpoint .*last.ckpt \(1 record"):
        assert find_last_checkpoint(tmp_path) == older
    with pytest.warns(UserWarning, match="skipped"):  # the elastic restart's choice
        assert newest_checkpoint([tmp_path], since=time.time() - 3600) == older
    _flip(older, "archive/data/1")
    with pytest.warns(UserWarning):
        assert find_last_checkpoint(tmp_path) is None


def test_a_damaged_shard_is_named_before_anything_loads(tmp_path: Path) -> None:
    path = tmp_path / "sharded.ckpt"
    save_sharded(
        {"state_dict": _model().state_dict(), "optimizer_states": [], "epoch": 2}, path, SingleDeviceStrategy()
    )
    assert sorted(p.name for p in path.glob("*digests.json")) == ["__0_digests.json"]
    assert load_sharded(path)["epoch"] == 2
    shard = next(path.glob("*.distcp"))
    _flip(shard)
    with pytest.raises(CheckpointError, match=rf"sharded.ckpt is damaged: {shard.name} \(\d+ bytes\) does not match"):
        load_sharded(path)
    assert shard.name in str(damage(path))


def test_verify_command_checks_files_and_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.ckpt", tmp_path / "bad.ckpt"
    for path in (good, bad):
        save_checkpoint({"state_dict": _model().state_dict()}, path)
    save_sharded({"state_dict": _model().state_dict()}, tmp_path / "sharded.ckpt", SingleDeviceStrategy())
    assert checkpoint_cli(["verify", str(tmp_path)]) == 0
    assert "3 checkpoint(s) checked, 0 damaged" in capsys.readouterr().out
    _flip(bad, "archive/data/0")
    assert checkpoint_cli(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED  {bad}: 1 record(s)" in out and f"OK       {good}" in out
    assert checkpoint_cli(["verify", str(good)]) == 0
    assert checkpoint_cli(["verify", str(tmp_path / "nope.ckpt")]) == 1
    assert "no such file or folder" in capsys.readouterr().err


def _worker_error() -> ValueError:
    """What torch's DataLoader raises in the main process when a worker's __getitem__ raised."""
    return ValueError(
        "Caught ValueError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n"
        '  File "data.py", line 3, in __getitem__\nValueError: bad sample 10\n'
    )


def test_a_failure_is_described_in_one_line_with_its_worker() -> None:
    assert describe(RuntimeError("boom\nmore")) == "RuntimeError: boom"
    error = _worker_error()
    assert worker_failure(error) == (1, "ValueError: bad sample 10")
    assert describe(error) == "ValueError: bad sample 10 (in DataLoader worker 1)"
    note_worker_failure(error)
    note_worker_failure(error)
    assert error.__notes__ == ["steadytrain: DataLoader worker 1 failed: ValueError: bad sample 10"]


def test_a_rank_records_its_failure_where_the_launcher_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEADYTRAIN_FAILURE_DIR", str(tmp_path))
    assert recorded(str(tmp_path), 1) is None
    record(1, RuntimeError("boom on rank 1"))
    assert recorded(str(tmp_path), 1) == "RuntimeError: boom on rank 1"
