"""configure_optimizers, schedulers, clipping and the optimizers a module steps, as a Lightning project writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, params, quiet, regression_data
from trainer.exceptions import MisconfigurationException
from trainer.optim import LightningOptimizer, parse_optimizers
from trainer.utilities import GradClipAlgorithmType, LRSchedulerConfig


class Configured(Regressor):
    """``configure_optimizers`` returns what the test gives (a function of the module)."""

    def __init__(self, make: Any = None, automatic: bool = True) -> None:
        super().__init__()
        self.make = make
        self.automatic_optimization = automatic

    def configure_optimizers(self) -> Any:
        return self.make(self)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return None


def fit(tmp_path: Path, module: trainer.Module, **flags: Any) -> trainer.Trainer:
    run = quiet(tmp_path, max_epochs=1, limit_train_batches=2, **flags)
    run.fit(module, loader(regression_data(32)), loader(regression_data(16)))
    return run


def sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(m.parameters(), lr=0.1)


def test_a_top_level_monitor_goes_to_a_plain_reduce_on_plateau_scheduler(tmp_path: Path) -> None:
    def make(m: torch.nn.Module) -> Any:
        opt = sgd(m)
        return {
            "optimizer": opt,
            "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
            "monitor": "val_loss",
        }

    run = fit(tmp_path, Configured(make))
    config = run.lr_scheduler_configs[0]
    assert config == LRSchedulerConfig(config.scheduler, monitor="val_loss", reduce_on_plateau=True)


def test_none_from_configure_optimizers_trains_nothing_and_says_so(tmp_path: Path) -> None:
    module = Configured(lambda m: None)
    before = params(module)
    with pytest.warns(UserWarning, match="will run with no optimizer"):
        fit(tmp_path, module)
    assert all(torch.equal(a, b) for a, b in zip(before, params(module)))


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (lambda m: 1, MisconfigurationException, "Unknown configuration for model optimizers"),
        (lambda m: [{"optimizer": sgd(m)}, sgd(m)], TypeError, "Unknown configuration for model optimizers"),
        (
            lambda m: ([sgd(m)], [torch.optim.lr_scheduler.StepLR(sgd(m), 1)]),
            MisconfigurationException,
            "attached with an optimizer that wasn't returned",
        ),
        (
            lambda m: ([o := sgd(m)], [torch.optim.lr_scheduler.ReduceLROnPlateau(o)]),
            MisconfigurationException,
            "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau`",
        ),
        (
            lambda m: {"optimizer": (o := sgd(m)), "lr_scheduler": {"scheduler": _Custom(o)}},
            MisconfigurationException,
            "`_Custom` doesn't follow PyTorch's LRScheduler API",
        ),
        (
            lambda m: {"optimizer": sgd(m), "lr_scheduler": {}},
            MisconfigurationException,
            'The lr scheduler dict must have the key "scheduler"',
        ),
    ],
)
def test_configuration_mistakes_fail_with_lightnings_errors(
    tmp_path: Path, make: Any, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        fit(tmp_path, Configured(make))


class _Custom:
    """A scheduler that is not PyTorch's (steps with its own arguments)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.epochs: list[int] = []

    def step(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def test_a_custom_scheduler_steps_through_an_overridden_lr_scheduler_step(tmp_path: Path) -> None:
    class Stepped(Configured):
        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            scheduler.step(epoch=self.current_epoch)

    module = Stepped(lambda m: ([o := sgd(m)], [_Custom(o)]))
    run = fit(tmp_path, module)
    assert run.lr_scheduler_configs[0].scheduler.epochs == [0]


def test_manual_optimization_takes_any_scheduler_and_warns_of_keys_it_ignores(tmp_path: Path) -> None:
    def make(m: torch.nn.Module) -> Any:
        opt = sgd(m)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _Custom(opt), "monitor": "val_loss"}}

    with pytest.warns(RuntimeWarning, match=r"contains the key\(s\) \['monitor'\], but the keys will be ignored"):
        run = fit(tmp_path, Configured(make, automatic=False))
    assert run.lr_scheduler_configs[0].monitor is None


def test_unknown_keys_warn_and_are_dropped() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    with pytest.warns(RuntimeWarning, match=r"unsupported keys in the optimizer configuration: \{'foo'\}"):
        parse_optimizers({"optimizer": opt, "lr_scheduler": sched, "foo": 1})
    with pytest.warns(RuntimeWarning, match=r"unsupported keys in the lr scheduler dict: \{'bar'\}"):
        _, configs = parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": sched, "bar": 2}})
    assert configs == [LRSchedulerConfig(sched)]
    one_cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=4)
    with pytest.warns(RuntimeWarning, match="Are you sure you didn't mean 'interval': 'step'"):
        parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": one_cycle}})


def test_an_unlogged_plateau_monitor_with_strict_false_warns_and_skips(tmp_path: Path) -> None:
    def make(m: torch.nn.Module) -> Any:
        opt = sgd(m)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "nope", "strict": False}}

    with pytest.warns(RuntimeWarning, match="conditioned on metric nope which is not available but strict"):
        fit(tmp_path, Configured(make))


def test_several_optimizers_or_an_optimizer_idx_in_automatic_optimization_are_runtime_errors(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="multiple optimizers is only supported with manual optimization"):
        fit(tmp_path, Configured(lambda m: [sgd(m), sgd(m)]))

    class OldStyle(Configured):
        def training_step(self, batch: Any, batch_idx: int, optimizer_idx: int = 0) -> Any:
            return super().training_step(batch, batch_idx)

    with pytest.raises(RuntimeError, match="Remove the `optimizer_idx` argument from `training_step`"):
        fit(tmp_path, OldStyle(sgd))


def test_clip_gradients_takes_the_trainers_value_and_refuses_another() -> None:
    class Clipping(Configured):
        def configure_gradient_clipping(
            self, optimizer: Any, gradient_clip_val: Any, gradient_clip_algorithm: Any
        ) -> None:
            self.seen = (gradient_clip_val, gradient_clip_algorithm)
            self.clip_gradients(optimizer, gradient_clip_val=self.value)

    module = Clipping(sgd)
    module.value = 0.5
    quiet("unused", max_steps=1, gradient_clip_val=0.5).fit(module, loader(regression_data(16)))
    assert module.seen == (0.5, None)  # Lightning's: the algorithm stays None unless given
    module.value = 0.1
    with pytest.raises(MisconfigurationException, match=r"gradient_clip_val=0.5\)` and have passed `clip_gradients"):
        quiet("unused", max_steps=1, gradient_clip_val=0.5).fit(module, loader(regression_data(16)))
    assert GradClipAlgorithmType("norm") == "norm" and GradClipAlgorithmType.supported_types() == ["value", "norm"]


def test_toggle_optimizer_freezes_the_other_optimizers_parameters_and_untoggle_restores() -> None:
    module = Regressor()
    first, second = module.net[0], module.net[3]  # type: ignore[index]
    second.bias.requires_grad_(False)  # frozen by the user: stays frozen after untoggle
    opt_a = torch.optim.SGD(first.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(second.parameters(), lr=0.1)
    module.trainer = type("Stub", (), {"optimizers": [opt_a, opt_b]})()  # type: ignore[assignment]
    with module.toggled_optimizer(opt_a):
        assert first.weight.requires_grad and not second.weight.requires_grad
    assert second.weight.requires_grad and not second.bias.requires_grad


def test_self_optimizers_is_a_lightning_optimizer_of_the_optimizers_class(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Manual(Configured):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            opt = self.optimizers()
            seen.append((isinstance(opt, LightningOptimizer), isinstance(opt, torch.optim.SGD), str(opt)))
            with opt.toggle_model():
                loss = Regressor.training_step(self, batch, batch_idx)
                opt.zero_grad()
                self.manual_backward(loss)
                assert opt.step() is None  # what SGD.step returns
            return None

    run = fit(tmp_path, Manual(sgd, automatic=False))
    assert seen[0][:2] == (True, True) and seen[0][2] == "Lightning" + str(run.optimizers[0])
    assert run.global_step == 2

    raw = torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    wrapped = LightningOptimizer(raw)
    state = raw.state_dict()
    state["param_groups"][0]["lr"] = 1.0
    wrapped.load_state_dict(state)  # into the wrapped optimizer, which a fit steps
    assert raw.param_groups[0]["lr"] == wrapped.param_groups[0]["lr"] == 1.0


def test_manual_backward_goes_through_the_strategys_backward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[torch.Tensor] = []
    original = trainer.strategies.Strategy.backward

    def backward(self: Any, loss: torch.Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(loss)
        return original(self, loss, optimizer, *args, **kwargs)

    monkeypatch.setattr(trainer.strategies.Strategy, "backward", backward)
    fit(tmp_path, Configured(sgd, automatic=False))
    assert len(calls) == 2
