"""A fit's optimizers and schedulers, and what the module calls on them: backward with its hooks,
clipping, scheduler steps.

``self.optimizers()`` returns ``LightningOptimizer`` wrappers (``trainer.optim``): their
``step()`` is the training step's (``trainer.loops.step``: the precision's step, ``on_before_optimizer_step``,
and in manual optimization the global step). In manual optimization the gradients are the global
batch's already when ``manual_backward`` returns (the strategy's ``manual_backward_sync``), so
``clip_gradients`` in ``training_step`` clips them, as in Lightning.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.exceptions import MisconfigurationException
from trainer.loops.checks import check_optimizers
from trainer.optim import GradClipAlgorithmType, LightningOptimizer
from trainer.overrides import overrides

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.optim import SchedulerConfig
    from trainer.view import TrainerView

CLIP_ALGORITHMS = GradClipAlgorithmType.supported_types()


OptimizerStep = Callable[..., Any]  # (optimizer, closure=None, **kwargs) -> the optimizer's result


def configure_optimizers(module: Module) -> tuple[list[torch.optim.Optimizer], list[SchedulerConfig]]:
    """``configure_optimizers``, parsed and checked by Lightning's rules (``trainer.optim``)."""
    from trainer.module import Module
    from trainer.optim import parse_optimizers

    custom_step = overrides(module, "lr_scheduler_step", Module)
    optimizers, configs = parse_optimizers(module.configure_optimizers(), module.automatic_optimization, custom_step)
    check_optimizers(module, optimizers)
    return optimizers, configs


class Optimization:
    """A fit's optimizers and schedulers, and the backward/clip/step calls that go with them."""

    def __init__(
        self, trainer: TrainerView, optimizers: list[torch.optim.Optimizer], schedulers: list[SchedulerConfig]
    ) -> None:
        self.trainer = trainer
        self.optimizers = optimizers
        self.lr_scheduler_configs = schedulers
        self.wrapped: list[LightningOptimizer] = []  # see wrap
        self.manual = not trainer.lightning_module.automatic_optimization

    def wrap(self, step: OptimizerStep) -> None:
        """The optimizers as the module sees them: their ``step`` is the training step's ``step``."""
        module = self.trainer.lightning_module
        self.wrapped = [LightningOptimizer(opt) for opt in self.optimizers]
        for wrapped in self.wrapped:
            wrapped.attach(step, module)

    # ---- backward ----------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``on_before_backward``, the (scaled) backward through ``Module.backward``, ``on_after_backward``.

        In manual optimization the strategy makes the gradients the global batch's before ``on_after_backward``.
        """
        trainer = self.trainer
        hooks.call(trainer, "on_before_backward", loss)
        with trainer.strategy.manual_backward_sync() if self.manual else contextlib.nullcontext():
            trainer.strategy.backward(trainer.precision_plugin.scale_loss(loss), None, *args, **kwargs)
        hooks.call(trainer, "on_after_backward")

    # ---- clipping ------------------------------------------------------------------------------------
    def clip_gradients(self, optimizer: torch.optim.Optimizer, value: float | None, algorithm: str | None) -> None:
        """Clip this optimizer's gradients at their true scale (the precision unscales first). None takes the
        Trainer's ``gradient_clip_val``/``_algorithm``; a different value than the Trainer's is refused, as in
        Lightning (which of the two would win is not clear)."""
        trainer = self.trainer
        value, algorithm = _clip_settings(trainer.gradient_clip_val, trainer.gradient_clip_algorithm, value, algorithm)
        if value is None:
            return
        if value <= 0:
            raise MisconfigurationException(f"gradient_clip_val={value!r} must be > 0.")
        trainer.precision_plugin.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        trainer.strategy.clip_gradients(params, value, algorithm)

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
        available = sorted(self.trainer.callback_metrics)
        if not config.strict:
            warnings.warn(
                f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available but strict is set "
                "to `False`. Skipping learning rate update.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        raise MisconfigurationException(
            f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available. Available metrics are: "
            f"{available}. Condition can be set using `monitor` key in lr scheduler dict (log it with self.log before "
            "the scheduler steps, or set 'strict': False to skip the step while it is missing)."
        )


def _clip_settings(
    trainer_value: float | None, trainer_algorithm: str | None, value: float | None, algorithm: str | None
) -> tuple[float | None, str]:
    """``clip_gradients``'s value and algorithm: the given ones, else the Trainer's; a conflict is an error."""
    if value is None:
        value = trainer_value
    elif trainer_value is not None and trainer_value != value:
        raise MisconfigurationException(
            f"You have set `Trainer(gradient_clip_val={trainer_value!r})` and have passed "
            f"`clip_gradients(gradient_clip_val={value!r})`. Please use only one of them."
        )
    if value is not None and not isinstance(value, int | float):
        raise TypeError(f"`gradient_clip_val` should be an int or a float. Got {value!r}.")
    if algorithm is None:
        return value, str(trainer_algorithm or "norm")
    algorithm = str(algorithm).lower()
    if trainer_algorithm is not None and algorithm != str(trainer_algorithm).lower():
        raise MisconfigurationException(
            f"You have set `Trainer(gradient_clip_algorithm={str(trainer_algorithm)!r})` and have passed "
            f"`clip_gradients(gradient_clip_algorithm={algorithm!r}) Please use only one of them."
        )
    if not GradClipAlgorithmType.supported_type(algorithm):
        raise MisconfigurationException(
            f"`gradient_clip_algorithm` {algorithm} is invalid. Allowed algorithms: {CLIP_ALGORITHMS}."
        )
    return value, algorithm
