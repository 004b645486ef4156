"""Failures that used to surface as internal errors, hangs or silent drops now say what and how to fix it.

Each message must name the file or value at fault and the way out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.helpers import REPO_ROOT, assert_no_leftovers, run_python
from tests.models import Regressor, loader, quiet, regression_data
from trainer.checkpoint import CheckpointError, load_checkpoint
from trainer.data import prepare_eval_loader


# ---- file systems that refuse writes: a tiny tmpfs (full disk) and a read-only one ------------------
@contextlib.contextmanager
def mounted(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``folder`` (needs root, as in this project's CI); skips the test otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(path: Path, leave: int) -> None:
    """Fill the file system ``path`` is on, then free ``leave`` bytes."""
    with open(path, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    os.truncate(path, max(path.stat().st_size - leave, 0))


class Counting(Regressor):
    steps = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        Counting.steps += 1
        return super().training_step(batch, batch_idx)


def test_a_full_disk_names_the_file_and_free_space_and_keeps_earlier_checkpoints(tmp_path: Path) -> None:
    with mounted(tmp_path / "small", "size=96k") as small:
        fit = quiet(
            tmp_path,
            max_epochs=1,
            enable_checkpointing=True,
            callbacks=[trainer.ModelCheckpoint(dirpath=small, save_last=True)],
        )
        fit.fit(Regressor(), loader(regression_data(32)))
        before = (small / "last.ckpt").read_bytes()
        fill(small / "filler", leave=len(before) // 2)  # room for half a checkpoint
        again = quiet(
            tmp_path,
            max_epochs=2,
            enable_checkpointing=True,
            callbacks=[trainer.ModelCheckpoint(dirpath=small, save_last=True)],
        )
        with pytest.raises(CheckpointError) as info:
            again.fit(Regressor(), loader(regression_data(32)), ckpt_path=small / "last.ckpt")
        message = str(info.value)
        assert f"could not write checkpoint {small}" in message and "KiB free" not in message
        assert "MiB free" in message and "Earlier checkpoints are untouched" in message
        assert (small / "last.ckpt").read_bytes() == before
        assert load_checkpoint(small / "last.ckpt")["global_step"] == 4
        assert not [p for p in small.iterdir() if p.name.startswith(".")]  # no temporary left behind


@pytest.mark.parametrize("where", ["default_root_dir", "dirpath"])
def test_an_unwritable_folder_is_refused_at_fit_start_before_any_step(tmp_path: Path, where: str) -> None:
    with mounted(tmp_path / "ro", "ro,size=64k") as read_only:
        Counting.steps = 0
        if where == "default_root_dir":
            fit = trainer.Trainer(
                accelerator="cpu", max_epochs=1, enable_progress_bar=False, default_root_dir=read_only
            )
        else:
            callback = trainer.ModelCheckpoint(dirpath=read_only / "ckpts")
            fit = quiet(tmp_path, max_epochs=1, enable_checkpointing=True, callbacks=[callback])
        with pytest.raises(PermissionError, match=rf"{read_only}.* is not writable: .*Read-only file system"):
            fit.fit(Counting(), loader(regression_data(32)))
        assert Counting.steps == 0


def test_a_folder_that_is_a_file_is_refused_at_fit_start(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file")
    fit = quiet(
        tmp_path,
        max_epochs=1,
        enable_checkpointing=True,
        callbacks=[trainer.ModelCheckpoint(dirpath=tmp_path / "taken" / "ckpts")],
    )
    with pytest.raises(PermissionError, match=r"checkpoint folder .*taken.* is a file, not a folder"):
        fit.fit(Regressor(), loader(regression_data(32)))


# ---- evaluation loaders with drop_last ------------------------------------------------------------------
def test_drop_last_on_an_eval_loader_warns_and_two_ranks_evaluate_what_one_device_does() -> None:
    """12 samples in batches of 8 with drop_last: one device evaluates 8; so do 2 ranks together."""
    val = DataLoader(regression_data(12), batch_size=8, drop_last=True)
    with pytest.warns(UserWarning, match="drop_last=True: 4 of its 12 samples are left out of the metrics"):
        single = prepare_eval_loader(val, 1, 0)
    seen_single = torch.cat([x for x, _ in single])
    with pytest.warns(UserWarning, match="4 of its 12"):
        shards = [prepare_eval_loader(val, 2, rank) for rank in (0, 1)]
    seen_ranks = torch.cat([x for shard in shards for x, _ in shard])
    assert len(seen_single) == len(seen_ranks) == 8  # before: 8 of 12 on one device, fewer on two ranks
    assert sorted(seen_single[:, 0].tolist()) == sorted(seen_ranks[:, 0].tolist())


def test_an_eval_loader_without_drop_last_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_eval_loader(DataLoader(regression_data(12), batch_size=8), 2, 0)


# ---- precision ----------------------------------------------------------------------------------------
def test_fp16_mixed_on_cpu_warns_and_points_to_bf16() -> None:
    with pytest.warns(UserWarning, match=r"precision='16-mixed' on CPU.*precision='bf16-mixed'"):
        trainer.Trainer(accelerator="cpu", precision="16-mixed", logger=False)


@pytest.mark.parametrize("value", [0, -1.0, "10", True])
def test_a_bad_collective_timeout_is_refused(value: Any) -> None:
    with pytest.raises((ValueError, TypeError), match=r"collective_timeout="):
        trainer.Trainer(accelerator="cpu", collective_timeout=value, logger=False)


# ---- a rank that stops arriving --------------------------------------------------------------------
HANG = """
import sys, time, torch
from torch.utils.data import DataLoader
import trainer
from tests.models import Regressor, regression_data

class Hangs(Regressor):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and self.global_step == 2:
            time.sleep(120)  # a rank stuck in its step: the others wait in DDP's gradient all-reduce
        return super().training_step(batch, batch_idx)

torch.set_num_threads(1)
fit = trainer.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False,
                      enable_progress_bar=False, enable_checkpointing=False, collective_timeout=3)
fit.fit(Hangs(), DataLoader(regression_data(64), batch_size=8))
"""


@pytest.mark.slow
def test_a_rank_that_stops_arriving_fails_the_job_naming_the_collective_and_the_timeout(tmp_path: Path) -> None:
    script = tmp_path / "hangs.py"
    script.write_text(HANG)
    done = run_python([str(script)], cwd=REPO_ROOT, timeout=60)
    assert done.returncode != 0, done.output
    assert "CollectiveTimeoutError: rank 0: a collective inside the step" in done.output
    assert "timed out after 3s: rank 1 did not arrive" in done.output
    assert "Trainer(collective_timeout=...)" in done.output
    assert done.seconds < 30
    assert_no_leftovers(str(script))
