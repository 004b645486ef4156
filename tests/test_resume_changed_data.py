"""A mid-epoch resume whose data changed is refused (or restarts the epoch when asked); one whose
number of ranks changed at the same global batch continues exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.helpers import REPO_ROOT, run_python
from tests.models import Regressor, assert_bitwise_equal, loader, params, quiet, regression_data

SCRIPT = REPO_ROOT / "tests" / "scripts" / "reshard_job.py"


def run(tmp_path: Path, n: int = 56, batch_size: int = 8, ckpt: Path | None = None, **flags: Any) -> Any:
    torch.manual_seed(0)
    module = Regressor()
    every = trainer.ModelCheckpoint(
        dirpath=tmp_path / "ckpts", filename="{step}", save_top_k=-1, every_n_train_steps=1, save_last=False
    )
    fit = quiet(tmp_path, max_epochs=2, enable_checkpointing=True, callbacks=[every], **flags)
    fit.fit(module, loader(regression_data(n), batch_size=batch_size, shuffle=True), ckpt_path=ckpt)
    return module, fit


@pytest.mark.parametrize(
    ("n", "batch_size", "named"),
    [(56, 16, "batch_size 8 -> 16"), (40, 8, "dataset_length 56 -> 40"), (60, 8, "dataset_length 56 -> 60")],
)
def test_a_mid_epoch_resume_with_changed_data_names_what_changed_and_the_ways_out(
    tmp_path: Path, n: int, batch_size: int, named: str
) -> None:
    run(tmp_path / "first")
    with pytest.raises(ValueError) as info:
        run(tmp_path / "again", n, batch_size, ckpt=tmp_path / "first" / "ckpts" / "step=3.ckpt")
    message = str(info.value)
    assert "step=3.ckpt was saved in the middle of epoch 0, after 3 of its batches" in message and named in message
    assert "end" in message and "on_data_change='restart_epoch'" in message


def test_restart_epoch_trains_the_interrupted_epoch_again_with_the_new_data(tmp_path: Path) -> None:
    run(tmp_path / "first")  # 7 batches of 8 per epoch
    with pytest.warns(UserWarning, match=r"batch_size 8 -> 16.*epoch 0 restarts from its first batch"):
        _, fit = run(
            tmp_path / "again",
            56,
            16,
            ckpt=tmp_path / "first" / "ckpts" / "step=3.ckpt",
            on_data_change="restart_epoch",
        )
    assert fit.global_step == 3 + 4 + 4  # the 3 steps before the checkpoint, then 2 epochs of 4


def test_a_checkpoint_after_the_epoch_s_last_batch_carries_no_position_so_data_may_change(tmp_path: Path) -> None:
    run(tmp_path / "first")  # step 7 is the last of epoch 0's 7 batches
    _, fit = run(tmp_path / "again", 56, 16, ckpt=tmp_path / "first" / "ckpts" / "step=7.ckpt")
    assert fit.global_step == 7 + 4


def test_the_same_data_resumes_exactly_as_before(tmp_path: Path) -> None:
    full, _ = run(tmp_path / "first")
    resumed, _ = run(tmp_path / "again", ckpt=tmp_path / "first" / "ckpts" / "step=3.ckpt")
    assert_bitwise_equal(params(resumed), params(full))


def job(out: Path, devices: int, *flags: str) -> list[torch.Tensor]:
    done = run_python([str(SCRIPT), str(out), "--devices", str(devices), *flags], timeout=180)
    assert done.returncode == 0, done.output
    return torch.load(out / "final-rank0.pt", weights_only=True)


def assert_close(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(x, y, atol=1e-5, rtol=0), (x - y).abs().max()


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_mid_epoch_resume_on_another_number_of_ranks_sees_the_same_samples(
    tmp_path: Path, before: int, after: int, shuffle: bool
) -> None:
    """2 x 16 -> 1 x 32 and back: the rest of the interrupted epoch is the old layout's global batches, and
    the later epochs too (two ranks split one device's shuffle)."""
    epochs = ["--epochs", "3"] + (["--shuffle"] if shuffle else [])
    full = job(tmp_path / "full", before, *epochs)
    ckpt = tmp_path / "full" / "ckpts" / "step=5.ckpt"  # epoch 1, after its first of 4 batches
    resumed = job(tmp_path / "resumed", after, "--resume", str(ckpt), *epochs)
    assert_close(resumed, full)
    if after == 2:  # both new ranks hold the same weights
        assert_bitwise_equal(torch.load(tmp_path / "resumed" / "final-rank1.pt", weights_only=True), resumed)


@pytest.mark.slow
def test_a_resume_on_another_number_of_ranks_with_another_global_batch_is_refused(tmp_path: Path) -> None:
    job(tmp_path / "full", 2, "--epochs", "2")  # 2 ranks x 16
    ckpt = tmp_path / "full" / "ckpts" / "step=5.ckpt"
    flags = ["--devices", "1", "--per-rank-batch", "16", "--resume", str(ckpt)]  # 1 x 16: half the global batch
    done = run_python([str(SCRIPT), str(tmp_path / "r"), *flags], timeout=180)
    assert done.returncode != 0
    assert "world_size 2 -> 1" in done.output and "batches_per_epoch 4 -> 8" in done.output
