"""A fit's optimizers and schedulers, and what the module calls on them: backward with its hooks,
clipping, toggling, scheduler steps.

``self.optimizers()`` returns ``StepOptimizer`` wrappers (Lightning's ``LightningOptimizer``): their
``step()`` is the training step's (``trainer.loops.step``: the precision's step, ``on_before_optimizer_step``,
and in manual optimization the global step). In manual optimization the gradients are the global
batch's already when ``manual_backward`` returns (the strategy's ``manual_backward_sync``), so
``clip_gradients`` in ``training_step`` clips them, as in Lightning.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.optim import SchedulerConfig
    from trainer.view import TrainerView

CLIP_ALGORITHMS = ("norm", "value")


OptimizerStep = Callable[..., Any]  # (optimizer, closure=None, **kwargs) -> the optimizer's result


class StepOptimizer:
    """A torch optimizer whose ``step``/``zero_grad`` run through the Trainer (see the module docstring).

    Everything else (``param_groups``, ``state``, ``state_dict``) is the wrapped optimizer's.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, step: OptimizerStep) -> None:
        self._optimizer = optimizer
        self._step = step

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        return self._step(self._optimizer, closure, **kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def __repr__(self) -> str:
        return f"StepOptimizer({self._optimizer!r})"


class Optimization:
    """A fit's optimizers and schedulers, and the backward/clip/step calls that go with them."""

    def __init__(
        self, trainer: TrainerView, optimizers: list[torch.optim.Optimizer], schedulers: list[SchedulerConfig]
    ) -> None:
        self.trainer = trainer
        self.optimizers = optimizers
        self.lr_scheduler_configs = schedulers
        self.wrapped: list[StepOptimizer] = []  # see wrap
        self.manual = not trainer.lightning_module.automatic_optimization
        self.frozen: dict[int, tuple[torch.Tensor, bool]] = {}  # by id: a parameter ``toggle`` froze, its flag

    def wrap(self, step: OptimizerStep) -> None:
        """The optimizers as the module sees them: their ``step`` is the training step's ``step``."""
        self.wrapped = [StepOptimizer(opt, step) for opt in self.optimizers]

    # ---- backward ----------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``on_before_backward``, the (scaled) backward through ``Module.backward``, ``on_after_backward``.

        In manual optimization the strategy makes the gradients the global batch's before ``on_after_backward``.
        """
        trainer = self.trainer
        hooks.call(trainer, "on_before_backward", loss)
        with trainer.strategy.manual_backward_sync() if self.manual else contextlib.nullcontext():
            trainer.lightning_module.backward(trainer.precision_plugin.scale_loss(loss), *args, **kwargs)
        hooks.call(trainer, "on_after_backward")

    # ---- toggling (GANs: one optimizer's parameters train, the others' are frozen) --------------------
    def toggle(self, optimizer: torch.optim.Optimizer) -> None:
        """Freeze every parameter of the other optimizers that ``optimizer`` does not also hold."""
        own = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.frozen = {}
        for other in self.optimizers:
            for group in other.param_groups:
                for param in group["params"]:
                    if id(param) not in own and id(param) not in self.frozen:
                        self.frozen[id(param)] = (param, param.requires_grad)
                        param.requires_grad = False

    def untoggle(self) -> None:
        """Give the parameters ``toggle`` froze back their ``requires_grad``."""
        for param, requires_grad in self.frozen.values():
            param.requires_grad = requires_grad
        self.frozen = {}

    # ---- clipping ------------------------------------------------------------------------------------
    def clip_gradients(self, optimizer: torch.optim.Optimizer, value: float | None, algorithm: str | None) -> None:
        """Clip this optimizer's gradients at their true scale (the precision unscales first)."""
        if value is None:
            return
        algorithm = algorithm or "norm"
        if algorithm not in CLIP_ALGORITHMS:
            raise MisconfigurationException(
                f"gradient_clip_algorithm={algorithm!r}: choose one of {', '.join(CLIP_ALGORITHMS)}."
            )
        if value <= 0:
            raise MisconfigurationException(f"gradient_clip_val={value!r} must be > 0.")
        self.trainer.precision_plugin.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.trainer.strategy.clip_gradients(params, value, algorithm)

    # ---- schedulers ----------------------------------------------------------------------------------
    def step_schedulers(self, interval: str, index: int, plateau: bool) -> None:
        """Step the schedulers of ``interval`` whose frequency divides ``index + 1`` (Lightning's rule:
        the batch index within the epoch for "step", the epoch for "epoch"); plateau ones or the others."""
        trainer = self.trainer
        module = trainer.lightning_module
        for config in self.lr_scheduler_configs:
            if config.interval != interval or config.reduce_on_plateau != plateau or (index + 1) % config.frequency:
                continue
            metric = None
            if config.reduce_on_plateau:
                metric = self._monitored(config)
                if metric is None:
                    continue
            module.lr_scheduler_step(config.scheduler, metric)

    def _monitored(self, config: SchedulerConfig) -> float | None:
        value = self.trainer.callback_metrics.get(config.monitor or "")
        if value is not None:
            return float(value)
        if not config.strict:
            return None
        raise KeyError(
            f"ReduceLROnPlateau monitors {config.monitor!r}, which was not logged; logged: "
            f"{sorted(self.trainer.callback_metrics) or 'nothing'}. Log it before the scheduler steps, or set "
            "'strict': False in the lr_scheduler dict to skip the step while it is missing."
        )
