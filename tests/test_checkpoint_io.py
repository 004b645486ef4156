"""Checkpoint I/O: atomic save, crash leftovers, safe load, and portable weights."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from trainer.checkpoint import (
    CheckpointError,
    clean_stale_temporaries,
    extract_state_dict,
    find_last_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    strip_prefixes,
    to_safe,
)
from trainer.checkpoint import io as ckpt
from trainer.checkpoint.leftovers import HOST

REPO = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this opens (creates) ``marker``: stands in for any code a malicious file runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.marker, "w"))


class Trusted:
    def __init__(self, value: int) -> None:
        self.value = value


class Net(nn.Module):
    def __init__(self, hidden: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, hidden)
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


class CompiledLike(nn.Module):
    """Stands in for torch.compile's OptimizedModule: the real module sits at ``_orig_mod``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self._orig_mod = inner


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    """Same values wherever they live: on a GPU machine nn.DataParallel moves its module to cuda:0."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key].cpu(), sb[key].cpu()), key


# ----------------------------------------------------------------------------- atomic save


def test_save_creates_parents_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "x.ckpt"
    save_checkpoint({"w": torch.arange(3), "epoch": 2}, path)
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["w"], torch.arange(3)) and loaded["epoch"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.ckpt"]


def test_failed_save_keeps_previous_file_and_leaves_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.ckpt"
    save_checkpoint({"epoch": 1}, path)

    def torn_save(obj: object, f: Any, *args: object, **kwargs: object) -> None:
        f.write(b"PK\x03\x04half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", torn_save)
    with pytest.raises(CheckpointError, match=rf"could not write checkpoint {path} .*free.*OSError: disk full"):
        save_checkpoint({"epoch": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_killed_save_leaves_old_file_and_its_tmp_is_cleaned(tmp_path: Path) -> None:
    """A real process dies (os._exit) halfway through torch.save: no cleanup code gets to run."""
    path = tmp_path / "last.ckpt"
    save_checkpoint({"epoch": 1}, path)
    script = textwrap.dedent(
        f"""
        import os, torch
        from trainer import checkpoint
        def dying_save(obj, f, *a, **k):
            f.write(b"PK\\x03\\x04partial"); f.flush(); os._exit(9)
        torch.save = dying_save
        checkpoint.save_checkpoint({{"epoch": 2}}, {str(path)!r})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 9
    leftovers = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".last.ckpt.tmp-")
    assert find_last_checkpoint(tmp_path) == path
    assert load_checkpoint(path)["epoch"] == 1
    assert not leftovers[0].exists()


def test_a_process_ended_mid_save_by_another_rank_leaves_nothing(tmp_path: Path) -> None:
    """Rank 0's watchdog ends the process (``os._exit``) while its main thread writes: ``abandon`` removes the
    temporary and, for a name's first save, the empty placeholder and its claim marker; a finished file stays."""
    script = textwrap.dedent(
        f"""
        import os, threading, time, torch
        from pathlib import Path
        from trainer import checkpoint, claims
        from trainer.checkpoint import leftovers
        folder = Path({str(tmp_path)!r})
        checkpoint.save_checkpoint({{"epoch": 1}}, folder / "last.ckpt")
        assert claims.claim_file(folder / "first.ckpt")
        both = threading.Barrier(3)  # both saves are writing, and the watchdog
        def stalled_save(obj, f, *a, **k):
            f.write(b"PK\x03\x04partial"); f.flush(); both.wait(); time.sleep(60)
        torch.save = stalled_save
        def watchdog():
            both.wait(); leftovers.abandon(); os._exit(7)
        threading.Thread(target=watchdog, daemon=True).start()
        threading.Thread(target=checkpoint.save_checkpoint, args=({{"epoch": 2}}, folder / "last.ckpt")).start()
        checkpoint.save_checkpoint({{"epoch": 2}}, folder / "first.ckpt")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert load_checkpoint(tmp_path / "last.ckpt")["epoch"] == 1


# ----------------------------------------------------------------------------- finding the last checkpoint


def _touch_ckpt(path: Path, mtime: float) -> Path:
    save_checkpoint({"name": path.name}, path)
    os.utime(path, (mtime, mtime))
    return path


def test_find_last_prefers_newest_over_last_ckpt(tmp_path: Path) -> None:
    now = time.time()
    _touch_ckpt(tmp_path / "last.ckpt", now - 30)
    _touch_ckpt(tmp_path / "epoch=1.ckpt", now - 60)
    interrupted = _touch_ckpt(tmp_path / "interrupted.ckpt", now - 10)
    assert find_last_checkpoint(tmp_path) == interrupted
    last = _touch_ckpt(tmp_path / "last.ckpt", now)
    assert find_last_checkpoint(tmp_path) == last


def test_find_last_takes_last_ckpt_on_a_tie(tmp_path: Path) -> None:
    now = time.time()
    _touch_ckpt(tmp_path / "epoch=9.ckpt", now)
    last = _touch_ckpt(tmp_path / "last.ckpt", now)
    assert find_last_checkpoint(tmp_path) == last


def test_find_last_skips_truncated_and_empty_files(tmp_path: Path) -> None:
    now = time.time()
    good = _touch_ckpt(tmp_path / "epoch=1.ckpt", now - 60)
    data = good.read_bytes()
    (tmp_path / "epoch=2.ckpt").write_bytes(data[: len(data) // 2])
    (tmp_path / "epoch=3.ckpt").write_bytes(b"")
    assert find_last_checkpoint(tmp_path) == good


def test_find_last_none_for_empty_or_missing_dir(tmp_path: Path) -> None:
    assert find_last_checkpoint(tmp_path) is None
    assert find_last_checkpoint(tmp_path / "nope") is None


def test_stale_tmp_with_dead_pid_is_ignored_and_removed(tmp_path: Path) -> None:
    good = _touch_ckpt(tmp_path / "epoch=1.ckpt", time.time() - 60)
    stale = tmp_path / f".last.ckpt.tmp-{_dead_pid()}"  # newer than ``good``
    stale.write_bytes(b"PK\x03\x04partial")
    assert find_last_checkpoint(tmp_path) == good
    assert not stale.exists()


def test_clean_keeps_fresh_tmp_of_live_writer_and_removes_old_ones(tmp_path: Path) -> None:
    live = tmp_path / f".last.ckpt.tmp-{os.getpid()}-{HOST}"
    other_host = tmp_path / f".last.ckpt.tmp-{_dead_pid()}-some-other-node"
    old = tmp_path / f".epoch=1.ckpt.tmp-{os.getpid()}"
    for p in (live, other_host, old):
        p.write_bytes(b"partial")
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    assert clean_stale_temporaries(tmp_path) == [old]
    assert live.exists() and other_host.exists()


def _sharded_dir(path: Path, mtime: float, complete: bool = True) -> Path:
    """A hand-made sharded checkpoint directory: shard files, ``meta.pt``, and ``.metadata`` once complete."""
    path.mkdir()
    (path / "__0_0.distcp").write_bytes(b"shard 0")
    (path / "__1_0.distcp").write_bytes(b"shard 1")
    save_checkpoint({"name": path.name}, path / "meta.pt")
    if complete:
        (path / ".metadata").write_bytes(b"metadata")
    for entry in [*path.iterdir(), path]:
        os.utime(entry, (mtime, mtime))
    return path


def test_a_complete_checkpoint_directory_counts_newest_by_the_same_rule(tmp_path: Path) -> None:
    now = time.time()
    _touch_ckpt(tmp_path / "epoch=0.ckpt", now - 60)
    sharded = _sharded_dir(tmp_path / "epoch=1.ckpt", now - 30)
    assert find_last_checkpoint(tmp_path) == sharded
    newer_file = _touch_ckpt(tmp_path / "epoch=2.ckpt", now - 10)
    assert find_last_checkpoint(tmp_path) == newer_file


def test_a_directory_without_metadata_is_skipped(tmp_path: Path) -> None:
    now = time.time()
    good = _sharded_dir(tmp_path / "epoch=1.ckpt", now - 60)
    _sharded_dir(tmp_path / "epoch=2.ckpt", now, complete=False)  # a copy that did not finish
    assert find_last_checkpoint(tmp_path) == good


def test_a_directory_is_dated_by_its_metadata_not_by_later_entries(tmp_path: Path) -> None:
    now = time.time()
    sharded = _sharded_dir(tmp_path / "epoch=1.ckpt", now - 60)
    file = _touch_ckpt(tmp_path / "epoch=2.ckpt", now - 30)
    (sharded / "notes.txt").write_text("added later")  # bumps the directory's own mtime to now
    assert find_last_checkpoint(tmp_path) == file


def test_a_stale_temporary_directory_is_ignored_and_removed(tmp_path: Path) -> None:
    good = _touch_ckpt(tmp_path / "epoch=1.ckpt", time.time() - 60)
    stale = _sharded_dir(tmp_path / f".epoch=2.ckpt.tmp-{_dead_pid()}-{HOST}", time.time())
    assert find_last_checkpoint(tmp_path) == good
    assert not stale.exists()


def test_since_skips_checkpoints_written_before_it(tmp_path: Path) -> None:
    now = time.time()
    _touch_ckpt(tmp_path / "epoch=1.ckpt", now - 60)
    assert find_last_checkpoint(tmp_path, since=now - 30) is None
    ours = _sharded_dir(tmp_path / "epoch=2.ckpt", now - 10)
    assert find_last_checkpoint(tmp_path, since=now - 30) == ours


# ----------------------------------------------------------------------------- safe loading


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_pickle_payload_is_refused_and_not_executed(tmp_path: Path, zip_format: bool) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "x": Payload(marker)}, path, _use_new_zipfile_serialization=zip_format)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert not marker.exists()
    assert str(path) in msg and "NOT executed" in msg and "io.open" in msg
    assert "trusted_classes" in msg and "add_safe_globals" in msg
    # Control: the payload is live; an unsafe load really runs it.
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_trusted_classes_allow_a_custom_class_for_that_call_only(tmp_path: Path) -> None:
    path = tmp_path / "custom.ckpt"
    torch.save({"obj": Trusted(7)}, path)
    with pytest.raises(CheckpointError, match="Trusted"):
        load_checkpoint(path)
    assert load_checkpoint(path, trusted_classes=[Trusted])["obj"].value == 7
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


@pytest.mark.parametrize("content", [b"hello, not a checkpoint\n", b""], ids=["text", "empty"])
def test_non_checkpoint_file_names_the_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="not a readable torch checkpoint") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("size", [100, 100_000], ids=["small", "large"])
@pytest.mark.parametrize("keep", [0.5, 0.99], ids=["half", "all-but-the-end"])
def test_truncated_checkpoint_names_the_path_and_the_way_out(tmp_path: Path, size: int, keep: float) -> None:
    """A cut-off zip used to surface as a bare ``OSError: [Errno 22] Invalid argument`` (large tensors)."""
    path = tmp_path / "cut.ckpt"
    torch.save({"w": torch.zeros(size)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="not a readable torch checkpoint: it looks cut off") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "ckpt_path='last'" in str(info.value)


def test_corrupt_pickle_inside_zip_is_not_called_a_payload(tmp_path: Path) -> None:
    good, path = tmp_path / "good.ckpt", tmp_path / "bad.ckpt"
    torch.save({"w": torch.ones(2)}, good)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, b"\x80\x02garbage" if name.endswith("data.pkl") else src.read(name))
    with pytest.raises(CheckpointError, match="not a readable torch checkpoint") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "weights_only=False" not in str(info.value)


def test_missing_file_raises_file_not_found_naming_path(tmp_path: Path) -> None:
    path = tmp_path / "gone.ckpt"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
        load_checkpoint(path)


def test_to_safe_numpy_rng_state_round_trips_weights_only(tmp_path: Path) -> None:
    rng = np.random.RandomState(123)
    state = {"rng": rng.get_state(), "nested": [np.float32(1.5), (np.int64(3), np.arange(2))], "k": "v"}
    path = tmp_path / "rng.ckpt"
    save_checkpoint(to_safe(state), path)
    loaded = load_checkpoint(path)
    assert loaded["nested"][0] == 1.5 and type(loaded["nested"][0]) is float
    assert loaded["nested"][1][0] == 3 and type(loaded["nested"][1][0]) is int
    assert torch.equal(loaded["nested"][1][1], torch.arange(2))
    expected = rng.rand(5)
    restored = np.random.RandomState()
    restored.set_state(tuple(loaded["rng"]))
    np.testing.assert_array_equal(restored.rand(5), expected)


def test_to_safe_keeps_untouched_containers(tmp_path: Path) -> None:
    sd = Net().state_dict()
    assert to_safe({"state_dict": sd})["state_dict"] is sd


# ----------------------------------------------------------------------------- portable weights


@pytest.mark.parametrize(
    "prefix", ["module.", "_orig_mod.", "module._orig_mod.", "_orig_mod.module.", "module.module."]
)
def test_strip_prefixes(prefix: str) -> None:
    sd = {f"{prefix}fc.weight": torch.ones(1), f"{prefix}fc.bias": torch.zeros(1)}
    assert list(strip_prefixes(sd)) == ["fc.weight", "fc.bias"]


def test_strip_prefixes_leaves_a_real_submodule_named_module() -> None:
    sd = {"module.weight": torch.ones(1), "head.weight": torch.ones(1)}
    assert list(strip_prefixes(sd)) == ["module.weight", "head.weight"]


@pytest.mark.parametrize("key", ["state_dict", "model", "model_state_dict", "net", None])
def test_extract_state_dict_layouts(key: str | None) -> None:
    sd = Net().state_dict()
    obj = sd if key is None else {key: sd, "epoch": 3}
    assert list(extract_state_dict(obj)) == list(sd)


def test_extract_state_dict_names_keys_found() -> None:
    with pytest.raises(CheckpointError, match=r"Keys found \(2\): epoch, optimizer"):
        extract_state_dict({"epoch": 1, "optimizer": {}})


def test_a_plain_weights_file_with_plain_values_beside_the_tensors_loads(tmp_path: Path) -> None:
    """A training script's ``sd["mask_values"] = [0, 1]; torch.save(sd, path)`` still holds weights."""
    source, target = Net(), Net()
    sd = source.state_dict()
    sd["mask_values"] = [0, 1]
    torch.save(sd, tmp_path / "model.pth")
    assert load_weights(target, tmp_path / "model.pth") == ([], [])
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))


def test_load_ddp_style_bare_state_dict_into_plain_model(tmp_path: Path) -> None:
    src = Net()
    path = tmp_path / "ddp.pt"
    torch.save(nn.DataParallel(src).state_dict(), path)  # keys start with "module."
    dst = Net()
    assert load_weights(dst, path) == ([], [])
    _assert_same_weights(src, dst)


def test_load_into_compiled_and_dp_wrapped_models() -> None:
    src = Net()
    full = {"state_dict": {f"module.{k}": v for k, v in src.state_dict().items()}, "epoch": 1}
    wrappers: list[Callable[[nn.Module], Any]] = [
        CompiledLike,
        torch.compile,  # lazy: nothing is compiled until a forward call
        nn.DataParallel,
        lambda m: CompiledLike(nn.DataParallel(m)),
    ]
    for wrap in wrappers:
        dst = Net()
        wrapped = wrap(dst)
        assert isinstance(wrapped, nn.Module) and wrapped is not dst
        assert load_weights(wrapped, full) == ([], [])
        _assert_same_weights(src, dst)


def test_load_into_model_whose_own_submodule_is_named_module() -> None:
    class Ema(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = Net()

    src, dst = Ema(), Ema()
    load_weights(dst, src.state_dict())
    _assert_same_weights(src, dst)


def test_strict_load_names_missing_and_unexpected_keys_and_loads_nothing() -> None:
    src = Net().state_dict()
    src["extra.weight"] = src.pop("fc2.weight")
    dst = Net()
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load_weights(dst, src)
    msg = str(info.value)
    assert 'Missing key(s) in state_dict: "fc2.weight" (1, not in the checkpoint)' in msg
    assert 'Unexpected key(s) in state_dict: "extra.weight" (1, not in the model)' in msg
    assert all(torch.equal(before[k], v) for k, v in dst.state_dict().items())


def test_non_strict_load_returns_lists_and_loads_matching() -> None:
    src = Net()
    sd = src.state_dict()
    sd["extra.weight"] = sd.pop("fc2.weight")
    dst = Net()
    missing, unexpected = load_weights(dst, sd, strict=False)
    assert (missing, unexpected) == (["fc2.weight"], ["extra.weight"])
    assert torch.equal(dst.fc1.weight, src.fc1.weight)


def test_many_missing_keys_are_truncated_with_counts() -> None:
    sd = {f"layer{i}.weight": torch.zeros(1) for i in range(25)}
    with pytest.raises(
        CheckpointError, match=r"Unexpected key\(s\) in state_dict: .*\(\+15 more\) \(25, not in the model\)"
    ):
        load_weights(Net(), sd)


def test_shape_mismatch_names_every_key_with_both_shapes(tmp_path: Path) -> None:
    path = tmp_path / "wide.ckpt"
    save_checkpoint({"state_dict": Net(hidden=8).state_dict()}, path)
    with pytest.raises(CheckpointError) as info:
        load_weights(Net(hidden=4), path, strict=False)
    msg = str(info.value)
    assert str(path) in msg
    assert "fc1.weight: checkpoint (8, 3) vs model (4, 3)" in msg
    assert "fc1.bias: checkpoint (8,) vs model (4,)" in msg
    assert "fc2.weight: checkpoint (2, 8) vs model (2, 4)" in msg
    assert "fc2.bias" not in msg
