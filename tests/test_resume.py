"""A run resumed from any of its checkpoints ends bitwise equal to the uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import (
    NoisyDataset,
    Regressor,
    assert_bitwise_equal,
    every_step_checkpoints,
    loader,
    params,
    quiet,
    regression_data,
)


class ScheduledRegressor(Regressor):
    """Adam + a per-step scheduler + dropout: optimizer, scheduler and RNG state all matter."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def run(
    tmp_path: Path,
    data_kwargs: dict[str, Any],
    ckpt: str | Path | None = None,
    noisy: bool = False,
    accumulate: int = 1,
    epochs: int = 3,
) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = ScheduledRegressor(dropout=0.2, lr=0.01)
    base = regression_data(n=56)
    ds = NoisyDataset(base) if noisy else base
    every_step = every_step_checkpoints(tmp_path / "ckpts")
    fit = trainer.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_progress_bar=False,
        callbacks=[every_step],
        default_root_dir=tmp_path,
    )
    fit.fit(module, loader(ds, batch_size=8, **data_kwargs), loader(base, batch_size=16), ckpt_path=ckpt)
    return params(module), fit


CASES = {
    "shuffle": ({"shuffle": True}, False, 1),
    "shuffle-workers": ({"shuffle": True, "num_workers": 2}, False, 1),
    "random-augmentation": ({"shuffle": True}, True, 1),
    # Augmentation drawn inside DataLoader workers: each sample is seeded from (data seed, epoch, index).
    "random-augmentation-1-worker": ({"shuffle": True, "num_workers": 1}, True, 1),
    "random-augmentation-2-workers": ({"shuffle": True, "num_workers": 2}, True, 1),
    "random-augmentation-persistent-workers": (
        {"shuffle": True, "num_workers": 2, "persistent_workers": True},
        True,
        1,
    ),
    "accumulation": ({"shuffle": True}, False, 3),
    "own-generator": ({"shuffle": True, "generator": torch.Generator().manual_seed(5)}, False, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_from_any_step_is_bitwise_equal(tmp_path: Path, case: str) -> None:
    data_kwargs, noisy, accumulate = CASES[case]
    if "generator" in data_kwargs:
        data_kwargs = {**data_kwargs, "generator": torch.Generator().manual_seed(5)}
    final, fit = run(tmp_path / "full", data_kwargs, noisy=noisy, accumulate=accumulate)
    steps_per_epoch = -(-7 // accumulate)
    assert fit.global_step == 3 * steps_per_epoch
    # mid-epoch (first epoch, later epoch) and an epoch boundary
    for step in (2, steps_per_epoch, steps_per_epoch + 1, 2 * steps_per_epoch + 1):
        ckpt = tmp_path / "full" / "ckpts" / f"step{step}.ckpt"
        assert ckpt.is_file(), sorted(p.name for p in ckpt.parent.iterdir())
        if "generator" in data_kwargs:
            data_kwargs = {
                **data_kwargs,
                "generator": torch.Generator().manual_seed(123),
            }  # state comes from ckpt
        resumed, resumed_fit = run(
            tmp_path / f"resume{step}", data_kwargs, ckpt=ckpt, noisy=noisy, accumulate=accumulate
        )
        assert resumed_fit.global_step == fit.global_step
        assert_bitwise_equal(resumed, final)


def test_resume_last_picks_newest_complete_checkpoint(tmp_path: Path) -> None:
    final, _ = run(tmp_path, {"shuffle": True})
    (tmp_path / "ckpts" / ".last.ckpt.tmp-999999").write_bytes(b"torn")  # a killed save's leftover
    fit = trainer.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        callbacks=[trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts")],
        default_root_dir=tmp_path,
    )
    module = ScheduledRegressor(dropout=0.2, lr=0.01)
    fit.fit(module, loader(regression_data(n=56), batch_size=8, shuffle=True), ckpt_path="last")
    assert fit.global_step == 21  # restored at the end: nothing left to train
    assert_bitwise_equal(params(module), final)


def test_resume_cost_does_not_grow_with_batches_done(tmp_path: Path) -> None:
    """Skipped batches are never loaded: the dataset sees only the remaining samples."""
    loads: list[int] = []

    class Counting(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.base = regression_data(n=56)

        def __len__(self) -> int:
            return len(self.base)

        def __getitem__(self, i: int) -> Any:
            loads.append(i)
            return self.base[i]

    _, _fit = run(tmp_path / "full", {"shuffle": True}, epochs=1)
    for step in (1, 5):
        loads.clear()
        torch.manual_seed(0)
        module = ScheduledRegressor(dropout=0.2, lr=0.01)
        resumed = quiet(tmp_path, max_epochs=1)
        resumed.fit(
            module,
            loader(Counting(), batch_size=8, shuffle=True),
            ckpt_path=tmp_path / "full" / "ckpts" / f"step{step}.ckpt",
        )
        assert len(loads) == 56 - 8 * step


class SaveInsideWindow(trainer.Callback):
    """A checkpoint after 3 batches of epoch 0: with accumulate_grad_batches=2 its window has gradients, no step."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, fit: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if fit.current_epoch == 0 and batch_idx == 2:
            fit.save_checkpoint(self.path)


def test_resume_inside_an_accumulation_window_keeps_its_gradients(tmp_path: Path) -> None:
    """The window's gradients come back from the checkpoint and the resumed run adds to them: no zero_grad as the
    resumed fit starts (the step's window is not read yet then)."""

    def fit(ckpt: Path | None, callbacks: list[trainer.Callback]) -> list[torch.Tensor]:
        torch.manual_seed(0)
        module = ScheduledRegressor(dropout=0.2, lr=0.01)
        run = quiet(tmp_path, max_epochs=2, accumulate_grad_batches=2, callbacks=callbacks)
        run.fit(module, loader(regression_data(n=56), batch_size=8, shuffle=True), ckpt_path=ckpt)
        return params(module)

    final = fit(None, [SaveInsideWindow(tmp_path / "inside.ckpt")])
    assert torch.load(tmp_path / "inside.ckpt", weights_only=False)["ranks"][0]["grads"] is not None
    assert_bitwise_equal(fit(tmp_path / "inside.ckpt", []), final)
