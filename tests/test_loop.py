"""The fit loop does exactly what a hand-written PyTorch loop does, and stops where its limits say."""

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


class Counting(Regressor):
    """Records each training batch as (epoch, batch_idx), each validation batch as (sanity checking, batch_idx)."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__(dropout=dropout)
        self.train_batches: list[tuple[int, int]] = []
        self.val_batches: list[tuple[bool, int]] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.train_batches.append((self.current_epoch, batch_idx))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.val_batches.append((self.trainer.sanity_checking, batch_idx))
        torch.rand(3)  # validation draws from the global RNG, as random augmentation would
        super().validation_step(batch, batch_idx)


def test_sanity_check_is_isolated_and_validation_draws_as_in_a_hand_written_loop(tmp_path: Path) -> None:
    """Dropout, shuffled training and validation data, and a validation step that draws random numbers. As in
    Lightning, the sanity check leaves the default generator as it found it, and each validation draws from it
    as a hand-written loop that validates after every epoch does: iter() of its loader, then the step's draws."""
    ds = regression_data(32)
    results = []
    for sanity in (0, 2):
        torch.manual_seed(5)
        module = Counting(dropout=0.3)
        fit = quiet(tmp_path, max_epochs=2, num_sanity_val_steps=sanity)
        fit.fit(module, loader(ds, shuffle=True), loader(ds, shuffle=True))
        assert len(module.val_batches) == sanity + 2 * 4  # validation did run, so it had the chance to interfere
        results.append(params(module))
    torch.manual_seed(5)
    reference = Regressor(dropout=0.3)
    optimizer = reference.configure_optimizers()
    for _ in range(2):
        reference.train()
        for x, y in loader(ds, shuffle=True):
            torch.nn.functional.mse_loss(reference.net(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        for _batch in loader(ds, shuffle=True):
            torch.rand(3)
    assert_bitwise_equal(results[0], results[1])
    assert_bitwise_equal(results[0], params(reference))
    torch.manual_seed(5)
    unvalidated = Regressor(dropout=0.3)
    hand_written(unvalidated, loader(ds, shuffle=True), epochs=2)
    assert not torch.equal(params(unvalidated)[0], results[0][0])  # the validation's draws did count


@pytest.mark.parametrize(("max_steps", "accumulate", "epoch"), [(3, 1, 0), (6, 1, 1), (6, 2, 1)])
def test_max_steps_stops_mid_epoch(tmp_path: Path, max_steps: int, accumulate: int, epoch: int) -> None:
    """4 optimizer steps an epoch: the run ends right after step ``max_steps``, mid-epoch, though max_epochs
    allows more, and counts optimizer steps, not micro-batches."""
    module = Counting()
    per_epoch = 4 * accumulate
    fit = quiet(tmp_path, max_steps=max_steps, max_epochs=5, accumulate_grad_batches=accumulate)
    fit.fit(module, loader(regression_data(32), batch_size=32 // per_epoch))
    assert fit.global_step == max_steps
    assert module.train_batches == [divmod(b, per_epoch) for b in range(max_steps * accumulate)]
    assert fit.current_epoch == epoch


@pytest.mark.parametrize(("limit", "per_epoch"), [(3, 3), (0.5, 2), (1.0, 4), (10, 4)])
def test_limit_train_batches(tmp_path: Path, limit: int | float, per_epoch: int) -> None:
    """An int is a count of batches, a float a fraction of the loader; neither runs past the loader's end."""
    module = Counting()
    fit = quiet(tmp_path, max_epochs=2, limit_train_batches=limit)
    fit.fit(module, loader(regression_data(16), batch_size=4))
    assert module.train_batches == [(e, b) for e in range(2) for b in range(per_epoch)]
    assert fit.global_step == 2 * per_epoch


@pytest.mark.parametrize(("sanity", "expected"), [(0, []), (2, [0, 1]), (-1, [0, 1, 2, 3])])
def test_num_sanity_val_steps(tmp_path: Path, sanity: int, expected: list[int]) -> None:
    module = Counting()
    fit = quiet(tmp_path, max_epochs=1, num_sanity_val_steps=sanity)
    fit.fit(module, loader(regression_data(8), batch_size=4), loader(regression_data(16), batch_size=4))
    sanity_batches = [b for checking, b in module.val_batches if checking]
    assert sanity_batches == expected
    assert [b for checking, b in module.val_batches if not checking] == [0, 1, 2, 3]
    assert module.val_batches[: len(expected)] == [(True, b) for b in expected]  # all before training


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
