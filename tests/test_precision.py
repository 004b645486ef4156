"""Mixed precision, the GradScaler, gradient clipping and LR schedulers."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

import trainer
from tests import models
from tests.models import Regressor, loader, params, regression_data


def quiet(tmp_path: Path, **kwargs: Any) -> trainer.Trainer:
    return models.quiet(tmp_path, **{"max_epochs": 1, **kwargs})


def small_data(n: int = 16, seed: int = 0) -> TensorDataset:
    """Small inputs and targets: fp16 gradients stay far from overflow at the initial scale."""
    g = torch.Generator().manual_seed(seed)
    x = 0.1 * torch.randn(n, 4, generator=g)
    return TensorDataset(x, 0.1 * torch.randn(n, 1, generator=g))


class Linear(trainer.Module):
    """One linear layer, plain SGD, an optional scheduler; records what the tests look at."""

    def __init__(
        self,
        lr: float = 0.1,
        scheduler: str | None = None,
        interval: str = "step",
        frequency: int = 1,
        inf_at_step: int = -1,
    ) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        with torch.no_grad():  # the same start in every test, without touching the global RNG
            self.layer.weight.copy_(torch.tensor([[0.5, -0.3, 0.2, 0.4]]))
            self.layer.bias.fill_(0.1)
        self.lr = lr
        self.scheduler = scheduler
        self.interval = interval
        self.frequency = frequency
        self.inf_at_step = inf_at_step
        self.dtypes: list[torch.dtype] = []
        self.layer.weight.register_hook(self._maybe_inf)

    def _maybe_inf(self, grad: torch.Tensor) -> torch.Tensor:
        """An overflowing gradient at one chosen optimizer step."""
        trainer_ = self.__dict__.get("_trainer")
        if trainer_ is not None and trainer_.global_step == self.inf_at_step:
            return torch.full_like(grad, math.inf)
        return grad

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.layer(x)
        self.dtypes.append(out.dtype)
        return torch.nn.functional.mse_loss(out.float(), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        out = self.layer(batch[0])
        self.dtypes.append(out.dtype)
        self.log("val_loss", 1.0)  # constant: ReduceLROnPlateau sees no improvement

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        if self.scheduler is None:
            return optimizer
        if self.scheduler == "plateau":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}
        if self.scheduler == "plateau-missing":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "nope"}}
        if self.scheduler == "plateau-no-monitor":
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            return {"optimizer": optimizer, "lr_scheduler": plateau}
        step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": step, "interval": self.interval, "frequency": self.frequency},
        }


class Probe(trainer.Callback):
    """Per batch: parameters before/after, lr and loss scale after; gradients seen before the step."""

    def __init__(self) -> None:
        self.before: list[list[torch.Tensor]] = []
        self.after: list[list[torch.Tensor]] = []
        self.lrs: list[float] = []
        self.epoch_lrs: list[float] = []
        self.scales: list[float] = []
        self.grads: list[list[torch.Tensor]] = []

    def on_train_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self.epoch_lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    def on_train_batch_start(
        self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, batch_idx: int
    ) -> None:
        self.before.append(params(module))

    def on_before_optimizer_step(self, trainer: trainer.Trainer, module: trainer.Module, optimizer: Any) -> None:
        self.grads.append([p.grad.detach().clone() for p in module.parameters()])  # type: ignore[union-attr]

    def on_train_batch_end(
        self, trainer: trainer.Trainer, module: trainer.Module, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.after.append(params(module))
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.scales.append(scaler.get_scale() if scaler is not None else 1.0)

    def changed(self, i: int) -> bool:
        return any(not torch.equal(a, b) for a, b in zip(self.before[i], self.after[i]))


# ---- mixed precision -----------------------------------------------------------------------------
def test_bf16_mixed_runs_forward_in_bfloat16_and_trains(tmp_path: Path) -> None:
    module = Linear()
    probe = Probe()
    fit = quiet(tmp_path, precision="bf16-mixed", callbacks=[probe])
    fit.fit(module, loader(small_data(), batch_size=4), loader(small_data(8), batch_size=4))
    assert module.dtypes == [torch.bfloat16] * 6  # 4 training steps, 2 validation batches
    assert all(probe.changed(i) for i in range(4))
    assert all(p.dtype == torch.float32 for p in module.parameters())
    assert fit.precision_plugin.state_dict() == {}  # no scaler for bf16


def test_16_mixed_overflow_skips_the_step_lowers_the_scale_and_holds_the_scheduler(tmp_path: Path) -> None:
    module = Linear(scheduler="steplr", interval="step", inf_at_step=2)
    probe = Probe()
    fit = quiet(tmp_path, precision="16-mixed", max_epochs=2, callbacks=[probe])
    fit.fit(module, loader(small_data(), batch_size=4))
    assert module.dtypes[0] == torch.float16
    assert [probe.changed(i) for i in range(8)] == [True, True, False, True, True, True, True, True]
    init = 65536.0
    assert probe.scales == [init, init, init / 2, *[init / 2] * 5]
    # StepLR halves the lr at every real step; the skipped step (the third) leaves it alone.
    assert probe.lrs == pytest.approx([0.1 * 0.5**k for k in (1, 2, 2, 3, 4, 5, 6, 7)])
    assert fit.global_step == 8
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_16_mixed_hooks_and_clipping_see_unscaled_gradients(tmp_path: Path) -> None:
    """The gradients in on_before_optimizer_step and the clipped update match an fp32 run."""
    runs = {}
    for precision in ("32-true", "16-mixed"):
        module, probe = Linear(), Probe()
        quiet(tmp_path, precision=precision, max_steps=1, gradient_clip_val=0.005, callbacks=[probe]).fit(
            module, loader(small_data(), batch_size=4)
        )
        runs[precision] = (probe, params(module))
    reference, mixed = runs["32-true"][0].grads[0], runs["16-mixed"][0].grads[0]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in reference]))
    assert norm > 0.005 * 5  # clipping is active
    for g32, g16 in zip(reference, mixed):
        torch.testing.assert_close(g16, g32, rtol=1e-2, atol=1e-4)
    # Manual: p - lr * g * clip / norm from the fp32 gradient.
    start = runs["32-true"][0].before[0]
    expected = [p - 0.1 * g * (0.005 / (norm + 1e-6)) for p, g in zip(start, reference)]
    for got32, got16, want in zip(runs["32-true"][1], runs["16-mixed"][1], expected):
        torch.testing.assert_close(got32, want)
        torch.testing.assert_close(got16, want, rtol=0, atol=1e-5)


def test_scaler_state_is_in_the_checkpoint(tmp_path: Path) -> None:
    fit = quiet(tmp_path, precision="16-mixed")
    fit.fit(Linear(inf_at_step=1), loader(small_data(), batch_size=4))
    path = tmp_path / "scaler.ckpt"
    fit.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)["precision"]["scaler"]
    assert saved["scale"] == 32768.0 == fit.precision_plugin.scaler.get_scale()  # type: ignore[attr-defined]
    assert saved["_growth_tracker"] == 2  # two clean steps since the overflow
    fresh = quiet(tmp_path, precision="16-mixed").precision_plugin
    fresh.load_state_dict({"scaler": saved})
    assert fresh.state_dict()["scaler"]["scale"] == 32768.0


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("bf16", "bf16-mixed"),
        ("bf16-mixed", "bf16-mixed"),
        (16, "16-mixed"),
        ("16", "16-mixed"),
        ("16-mixed", "16-mixed"),
        ("32", "32-true"),
        (32, "32-true"),
        ("32-true", "32-true"),
    ],
)
def test_precision_aliases(tmp_path: Path, given: str | int, name: str) -> None:
    assert quiet(tmp_path, precision=given).precision == name


# ---- gradient clipping ------------------------------------------------------------------------------
def _one_manual_step(
    module: Regressor, batch: tuple[torch.Tensor, torch.Tensor], clip: float, how: str
) -> list[torch.Tensor]:
    x, y = batch
    torch.nn.functional.mse_loss(module.net(x), y).backward()
    grads = [p.grad.detach().clone() for p in module.parameters()]  # type: ignore[union-attr]
    if how == "norm":
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        assert norm > clip * 2, "clipping must be active for the test to mean anything"
        grads = [g * min(1.0, clip / (norm.item() + 1e-6)) for g in grads]
    else:
        assert max(g.abs().max().item() for g in grads) > clip * 2
        grads = [g.clamp(-clip, clip) for g in grads]
    return [p.detach() - 1.0 * g for p, g in zip(module.parameters(), grads)]


@pytest.mark.parametrize(("how", "clip"), [("norm", 0.5), ("value", 0.05)])
def test_gradient_clipping_matches_a_manual_step(tmp_path: Path, how: str, clip: float) -> None:
    ds = regression_data(8)
    torch.manual_seed(0)
    module = Regressor(lr=1.0)  # SGD with momentum: its first step is p - lr * g
    expected = _one_manual_step(copy.deepcopy(module), ds.tensors, clip, how)  # type: ignore[arg-type]
    fit = quiet(tmp_path, max_steps=1, gradient_clip_val=clip, gradient_clip_algorithm=how)
    fit.fit(module, loader(ds, batch_size=8))
    for got, want in zip(module.parameters(), expected):
        torch.testing.assert_close(got.detach(), want)


# ---- LR schedulers -------------------------------------------------------------------------------------
def test_step_scheduler_with_frequency_two(tmp_path: Path) -> None:
    probe = Probe()
    quiet(tmp_path, max_steps=5, max_epochs=None, callbacks=[probe]).fit(
        Linear(scheduler="steplr", interval="step", frequency=2), loader(small_data(), batch_size=4)
    )
    assert probe.lrs == pytest.approx([0.1, 0.05, 0.05, 0.025, 0.025])


@pytest.mark.parametrize(
    ("frequency", "epoch_lrs", "final"),
    [(1, [0.1, 0.05, 0.025, 0.0125], 0.00625), (2, [0.1, 0.1, 0.05, 0.05], 0.025)],
)
def test_epoch_scheduler(tmp_path: Path, frequency: int, epoch_lrs: list[float], final: float) -> None:
    probe = Probe()
    fit = quiet(tmp_path, max_epochs=4, callbacks=[probe])
    fit.fit(Linear(scheduler="steplr", interval="epoch", frequency=frequency), loader(small_data(8), batch_size=4))
    assert probe.epoch_lrs == pytest.approx(epoch_lrs)
    # Lightning steps an epoch scheduler right after the last batch's optimizer step, before that batch's
    # on_train_batch_end: the LR seen there is already the next epoch's.
    following = [*epoch_lrs[1:], final]
    assert probe.lrs == pytest.approx([lr for pair in zip(epoch_lrs, following) for lr in pair])
    assert fit.optimizers[0].param_groups[0]["lr"] == pytest.approx(final)


def test_reduce_on_plateau_with_monitor(tmp_path: Path) -> None:
    probe = Probe()
    fit = quiet(tmp_path, max_epochs=3, callbacks=[probe], num_sanity_val_steps=1)
    fit.fit(Linear(scheduler="plateau"), loader(small_data(8), batch_size=4), loader(small_data(8), batch_size=4))
    assert probe.epoch_lrs == pytest.approx([0.1, 0.1, 0.05])
    assert fit.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.025)


def test_reduce_on_plateau_without_monitor_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"must include a monitor when a `ReduceLROnPlateau` scheduler is used"):
        quiet(tmp_path).fit(Linear(scheduler="plateau-no-monitor"), loader(small_data(8), batch_size=4))


def test_reduce_on_plateau_with_an_unlogged_monitor_names_the_logged_keys(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"conditioned on metric nope which is not available\. Available metrics are: \['val_loss'\]"
    ):
        quiet(tmp_path).fit(
            Linear(scheduler="plateau-missing"), loader(small_data(8), batch_size=4), loader(small_data(8))
        )


def _one_update(precision: Any, grad: float) -> Any:
    """One scaled backward and step through ``precision`` with a gradient of ``grad``; the update's verdict."""
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    precision.backward((weight * grad).sum())
    precision.optimizer_step(optimizer)
    return precision.update()


def test_the_scaler_keeps_its_scale_in_the_tensor_update_reads_without_waiting() -> None:
    """``MixedPrecision.update`` tells a skipped step from torch's private ``GradScaler._scale`` (reading
    ``get_scale()`` would wait for the device); this pins that the installed torch still keeps it there."""
    from trainer.precision.amp import MixedPrecision

    precision = MixedPrecision("16-mixed", "cpu")
    assert bool(_one_update(precision, 1.0)) is True
    assert isinstance(precision.scaler._scale, torch.Tensor)  # type: ignore[union-attr]
    assert bool(_one_update(precision, float("inf"))) is False


def test_a_scaler_without_its_private_scale_still_tells_a_skipped_step() -> None:
    """Were torch to rename ``_scale``, ``update`` asks ``get_scale()`` (a wait) instead of calling every step taken."""
    from trainer.precision.amp import MixedPrecision

    class Renamed:
        """A GradScaler as seen from outside, without ``_scale``."""

        def __init__(self) -> None:
            self.inner = torch.amp.GradScaler("cpu")

        def __getattr__(self, name: str) -> Any:
            if name == "_scale":
                raise AttributeError(name)
            return getattr(self.inner, name)

    precision = MixedPrecision("16-mixed", "cpu")
    precision.scaler = Renamed()  # type: ignore[assignment]
    assert getattr(precision.scaler, "_scale", None) is None
    assert bool(_one_update(precision, float("inf"))) is False
    assert bool(_one_update(precision, 1.0)) is True


@pytest.mark.parametrize(
    ("precision", "plugin"),
    [
        ("64-true", "DoublePrecision"),
        ("32-true", "Precision"),
        ("16-true", "HalfPrecision"),
        ("bf16-true", "HalfPrecision"),
        ("16-mixed", "MixedPrecision"),
        ("bf16-mixed", "MixedPrecision"),
    ],
)
def test_each_precision_gets_lightnings_plugin(tmp_path: Path, precision: str, plugin: str) -> None:
    """``trainer.precision_plugin`` is the plug-in Lightning picks for the string (a script may check its type)."""
    t = quiet(tmp_path, precision=precision)
    assert type(t.precision_plugin) is getattr(trainer.plugins, plugin)
