"""The training step's owner (``trainer.loops.step``): the accumulation window, and the seam a captured step
plugs into (the inner step touches no counter and no scheduler; the after-step does)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, assert_bitwise_equal, loader, params, quiet, regression_data
from trainer.loops.step import AccumulationWindow, InnerStep, TrainingStep


def windows_by_enumeration(size: int, num_batches: int) -> list[list[int]]:
    """The windows an epoch of ``num_batches`` falls into, cut by hand: consecutive runs of ``size``."""
    return [list(range(start, min(start + size, num_batches))) for start in range(0, num_batches, size)]


@pytest.mark.parametrize(("size", "num_batches"), [(1, 5), (3, 8), (3, 9), (4, 3), (5, 1)])
def test_the_window_answers_as_the_enumerated_windows(size: int, num_batches: int) -> None:
    window = AccumulationWindow(size, num_batches)
    windows = windows_by_enumeration(size, num_batches)
    owner = {i: w for w in windows for i in w}
    for i in range(num_batches):
        assert window.starts(i) == (owner[i][0] == i)
        assert window.ends(i) == (owner[i][-1] == i)
        assert window.divisor(i) == len(owner[i])
    closed = {0} | {w[-1] + 1 for w in windows}  # batches done where no window is open
    for done in range(num_batches + 1):
        assert window.is_open_after(done) == (done not in closed)
    assert window.steps() == len(windows)


def test_a_window_without_an_epoch_length_never_ends_early() -> None:
    window = AccumulationWindow(3, math.inf)
    assert [window.ends(i) for i in range(6)] == [False, False, True, False, False, True]
    assert window.divisor(4) == 3 and window.steps() == math.inf
    assert window.is_open_after(2) and not window.is_open_after(3)


class Scheduled(Regressor):
    """Clipping, a per-step scheduler and a hook before the step: every part the step owner resolves."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.8)}}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.seen_steps = getattr(self, "seen_steps", 0) + 1


def fit_scheduled(tmp_path: Path, inner_probe: Any = None) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = Scheduled()
    fit = quiet(tmp_path, max_epochs=2, accumulate_grad_batches=3, gradient_clip_val=0.5)
    if inner_probe is None:
        fit.fit(module, loader(regression_data(64), batch_size=8))
    else:
        with pytest.MonkeyPatch.context() as patch:
            real = TrainingStep.batch_step
            patch.setattr(TrainingStep, "batch_step", lambda self, inner=None: real(self, inner_probe(self)))
            fit.fit(module, loader(regression_data(64), batch_size=8))
    return params(module), fit


def test_the_inner_step_is_the_capturable_region_and_the_after_step_counts(tmp_path: Path) -> None:
    """A replacement inner step (as a captured graph would be) sees no counter or learning rate change inside
    it, runs exactly at the windows' ends (3, 3, 2 of 8 batches), and gives the uninterrupted run's weights."""
    reference, ref_fit = fit_scheduled(tmp_path / "ref")
    seen: list[tuple[int, int, int, float, float]] = []

    def probe(step: TrainingStep) -> InnerStep:
        inner = step.inner_step()

        def recorded(batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor]:
            before, lr = step.progress.global_step, step.optimization.optimizers[0].param_groups[0]["lr"]
            out = inner(batch, batch_idx)
            after_lr = step.optimization.optimizers[0].param_groups[0]["lr"]
            seen.append((batch_idx, before, step.progress.global_step, lr, after_lr))
            return out

        return recorded

    probed, fit = fit_scheduled(tmp_path / "probed", probe)
    assert_bitwise_equal(probed, reference)
    assert fit.global_step == ref_fit.global_step == 6
    assert [s[0] for s in seen] == [2, 5, 7, 2, 5, 7]
    assert all(before == after for _, before, after, _, _ in seen)  # the global step grows outside
    assert all(lr == lr_after for *_, lr, lr_after in seen)  # and the scheduler steps outside
    assert [s[1] for s in seen] == list(range(6))  # each window's after-step counted the one before
    assert fit.lightning_module.seen_steps == 6  # type: ignore[attr-defined]


def test_the_fit_loop_asks_the_step_which_path_it_is_on(tmp_path: Path) -> None:
    class Manual(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()  # type: ignore[union-attr]
            x, y = batch
            self.manual_backward(torch.nn.functional.mse_loss(self.net(x), y))
            opt.step()  # type: ignore[union-attr]

    for module, automatic in ((Regressor(), True), (Manual(), False)):
        fit = quiet(tmp_path, max_epochs=1)
        fit.fit(module, loader(regression_data(32), batch_size=8))
        step = fit.fit_loop.step
        assert step is not None and step.automatic is automatic
        assert fit.global_step == 4  # the manual optimizer's steps count through the same after-step


def test_accumulation_set_during_an_epoch_applies_from_the_next(tmp_path: Path) -> None:
    """The step reads ``accumulate_grad_batches`` once per epoch, where GradientAccumulationScheduler sets it."""

    class Changes(trainer.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == 2:
                trainer.accumulate_grad_batches = 2

    fit = quiet(tmp_path, max_epochs=2, callbacks=[Changes()])
    fit.fit(Regressor(), loader(regression_data(48), batch_size=8))
    assert fit.global_step == 6 + 3  # epoch 0: 6 steps of 1 batch; epoch 1: 3 windows of 2


def test_lr_find_records_the_partial_last_window_too(tmp_path: Path) -> None:
    """3 batches per epoch in windows of 2: the epoch's last batch steps alone, and that step gets its point."""
    from tests.test_tuner import Tunable
    from trainer.tuner import Tuner

    torch.manual_seed(0)
    tuner = Tuner(quiet(tmp_path, max_epochs=10, accumulate_grad_batches=2))
    finder = tuner.lr_find(
        Tunable(batch_size=96), min_lr=0.01, max_lr=1.0, num_training=6, early_stop_threshold=None, update_attr=False
    )
    assert finder is not None
    assert finder.results["lr"] == pytest.approx([0.01 * finder.factor(k) for k in range(6)])
    assert len(finder.results["loss"]) == 6
