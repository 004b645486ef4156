"""The fit loop does exactly what a hand-written PyTorch loop does."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from tests.models import Regressor, assert_bitwise_equal, loader, params, quiet, regression_data


def hand_written(module: Regressor, data: torch.utils.data.DataLoader, epochs: int, accumulate: int = 1) -> None:
    """The loop a user would write: zero_grad, forward, backward, step (with accumulation)."""
    optimizer = module.configure_optimizers()
    module.train()
    total = len(data)
    for _ in range(epochs):
        for i, (x, y) in enumerate(data):
            window_start = i - i % accumulate
            window = min(accumulate, total - window_start)
            loss = torch.nn.functional.mse_loss(module.net(x), y)
            (loss if window == 1 else loss / window).backward()
            if (i + 1) % accumulate == 0 or i + 1 == total:
                optimizer.step()
                optimizer.zero_grad()


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_fp32_single_device_is_bitwise_equal_to_hand_written_loop(
    tmp_path: Path, shuffle: bool, dropout: float
) -> None:
    ds = regression_data()
    torch.manual_seed(1)
    reference = Regressor(dropout=dropout)
    torch.manual_seed(1)
    ours = Regressor(dropout=dropout)
    assert_bitwise_equal(params(reference), params(ours))

    torch.manual_seed(7)
    hand_written(reference, loader(ds, shuffle=shuffle), epochs=3)
    torch.manual_seed(7)
    quiet(tmp_path, max_epochs=3, num_sanity_val_steps=0).fit(ours, loader(ds, shuffle=shuffle))
    assert_bitwise_equal(params(reference), params(ours))


def test_sanity_check_and_validation_do_not_change_training(tmp_path: Path) -> None:
    ds = regression_data()
    results = []
    for sanity in (0, 2):
        torch.manual_seed(3)
        module = Regressor(dropout=0.3)
        quiet(tmp_path, max_epochs=2, num_sanity_val_steps=sanity).fit(
            module, loader(ds, shuffle=True), loader(ds, batch_size=16)
        )
        results.append(params(module))
    torch.manual_seed(3)
    reference = Regressor(dropout=0.3)
    hand_written(reference, loader(ds, shuffle=True), epochs=2)
    assert_bitwise_equal(results[0], results[1])
    assert_bitwise_equal(results[0], params(reference))


@pytest.mark.parametrize("accumulate", [2, 5])
def test_accumulation_averages_each_window_and_steps_the_partial_last_one(tmp_path: Path, accumulate: int) -> None:
    ds = regression_data(n=88)  # 11 batches of 8: windows of 2 -> 5x2 + 1; of 5 -> 5 + 5 + 1
    torch.manual_seed(1)
    reference = Regressor()
    torch.manual_seed(1)
    ours = Regressor()
    hand_written(reference, loader(ds), epochs=2, accumulate=accumulate)
    fit = quiet(tmp_path, max_epochs=2, accumulate_grad_batches=accumulate)
    fit.fit(ours, loader(ds))
    assert fit.global_step == 2 * -(-11 // accumulate)
    assert_bitwise_equal(params(reference), params(ours))


def test_max_steps_stops_mid_epoch(tmp_path: Path) -> None:
    fit = quiet(tmp_path, max_steps=7, max_epochs=5)
    fit.fit(Regressor(), loader(regression_data()))  # 12 batches per epoch
    assert fit.global_step == 7
    assert fit.current_epoch == 0 and fit.batches_done == 7


def test_limit_train_batches(tmp_path: Path) -> None:
    fit = quiet(tmp_path, max_epochs=2, limit_train_batches=3)
    fit.fit(Regressor(), loader(regression_data()))
    assert fit.global_step == 6
    fit = quiet(tmp_path, max_epochs=1, limit_train_batches=0.5)
    fit.fit(Regressor(), loader(regression_data()))
    assert fit.global_step == 6


def test_train_and_eval_modes_switch(tmp_path: Path) -> None:
    seen: list[tuple[str, bool, bool]] = []

    class Spy(Regressor):
        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            seen.append(("train", self.training, torch.is_grad_enabled()))
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            seen.append(("val", self.training, torch.is_grad_enabled()))
            return super().validation_step(batch, batch_idx)

    ds = regression_data(n=32)
    quiet(tmp_path, max_epochs=2, num_sanity_val_steps=1).fit(Spy(), loader(ds), loader(ds))
    assert {s for s in seen if s[0] == "train"} == {("train", True, True)}
    assert {s for s in seen if s[0] == "val"} == {("val", False, False)}
    assert [s[0] for s in seen][:2] == ["val", "train"]  # sanity check first


def test_module_on_before_optimizer_step_sees_gradients_once_per_step(tmp_path: Path) -> None:
    norms: list[float] = []

    class Hooked(Regressor):
        def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
            norms.append(float(sum(p.grad.norm() for p in self.parameters() if p.grad is not None)))

    fit = quiet(tmp_path, max_epochs=1, accumulate_grad_batches=3)
    fit.fit(Hooked(), loader(regression_data(n=88)))  # 11 batches -> windows 3, 3, 3, 2
    assert len(norms) == fit.global_step == 4
    assert all(n > 0 for n in norms)


def test_last_loss_is_detached_and_no_graph_outlives_the_fit(tmp_path: Path) -> None:
    """Between steps the loop keeps the last loss's graph head (so autograd reuses each parameter's
    gradient accumulator, as in a hand-written loop); users only ever see it detached."""
    seen: list[bool] = []

    class Peek(Regressor):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            if self.trainer.last_loss is not None:
                seen.append(self.trainer.last_loss.requires_grad)
            return super().training_step(batch, batch_idx)

    fit = quiet(tmp_path, max_epochs=1)
    fit.fit(Peek(), loader(regression_data(n=32)))
    assert seen == [False, False, False]
    assert fit.last_loss is not None and fit.last_loss.grad_fn is None
    kept = fit.fit_loop.step.step_loss  # type: ignore[union-attr]
    assert kept is not None and kept.grad_fn is None  # released at the end of fit


def test_a_custom_forward_context_wraps_every_training_and_validation_step(tmp_path: Path) -> None:
    from trainer.precision import Precision

    entered: list[bool] = []

    class Recording(Precision):
        def forward_context(self) -> contextlib.AbstractContextManager[None]:
            entered.append(torch.is_grad_enabled())
            return contextlib.nullcontext()

    data = loader(regression_data(n=8), batch_size=4)
    quiet(tmp_path, max_epochs=1, precision=Recording()).fit(Regressor(), data, data)
    assert entered == [True, True, False, False]  # two training batches, then two validation batches
