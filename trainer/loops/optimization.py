"""Backward, clipping and optimizer steps with their hooks, for manual optimization and overridden steps.

``self.optimizers()`` returns ``StepOptimizer`` wrappers (Lightning's ``LightningOptimizer``): their
``step()`` goes through the precision (GradScaler unscale, step, update), calls
``on_before_optimizer_step``, and counts the global step. In manual optimization the gradients are
the global batch's already when ``manual_backward`` returns (the strategy's ``manual_backward_sync``),
so ``clip_gradients`` in ``training_step`` clips them, as in Lightning. The automatic loop calls
``before_step`` and ``finish_step`` itself (``trainer.loops.training``), and nothing at all for a
plain fp32 step, to stay as short as a hand-written loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks

if TYPE_CHECKING:
    from trainer.loops.progress import Progress
    from trainer.optim import SchedulerConfig
    from trainer.view import TrainerView

CLIP_ALGORITHMS = ("norm", "value")


class StepOptimizer:
    """A torch optimizer whose ``step``/``zero_grad`` run through the Trainer (see the module docstring).

    Everything else (``param_groups``, ``state``, ``state_dict``) is the wrapped optimizer's.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, optimization: Optimization) -> None:
        self._optimizer = optimizer
        self._optimization = optimization

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        return self._optimization.step(self._optimizer, closure, **kwargs)

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
        self,
        trainer: TrainerView,
        progress: Progress,
        optimizers: list[torch.optim.Optimizer],
        schedulers: list[SchedulerConfig],
    ) -> None:
        self.trainer = trainer
        self.progress = progress
        self.optimizers = optimizers
        self.lr_scheduler_configs = schedulers
        self.wrapped = [StepOptimizer(opt, self) for opt in optimizers]
        self.manual = not trainer.lightning_module.automatic_optimization
        self.frozen: dict[int, tuple[torch.Tensor, bool]] = {}  # by id: a parameter ``toggle`` froze, its flag
        self.resolve()

    # ---- backward ----------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``on_before_backward``, the (scaled) backward through ``Module.backward``, ``on_after_backward``.

        In manual optimization the strategy makes the gradients the global batch's before ``on_after_backward``.
        """
        trainer = self.trainer
        hooks.call(trainer, "on_before_backward", loss)
        with trainer.strategy.manual_backward_sync() if self.manual else contextlib.nullcontext():
            trainer.lightning_module.backward(trainer.precision.scale_loss(loss), *args, **kwargs)
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
            raise ValueError(f"gradient_clip_algorithm={algorithm!r}: choose one of {', '.join(CLIP_ALGORITHMS)}.")
        if value <= 0:
            raise ValueError(f"gradient_clip_val={value!r} must be > 0.")
        self.trainer.precision.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.trainer.strategy.clip_gradients(params, value, algorithm)

    # ---- the step (automatic and manual optimization, and an overridden ``optimizer_step``) ------------
    def resolve(self) -> None:
        """What a step calls, looked up once per epoch: hooks nobody overrides cost nothing per step."""
        from trainer.module import Module
        from trainer.precision import Precision

        trainer = self.trainer
        module, precision = trainer.lightning_module, trainer.precision
        self.before_step_hooks = hooks.resolved(trainer, "on_before_optimizer_step")
        self.unscales = hooks.overrides(precision, "unscale_", Precision)
        self.clips = not self.manual and (
            hooks.overrides(module, "configure_gradient_clipping", Module) or trainer.gradient_clip_val is not None
        )
        self.schedules = not self.manual and bool(self.lr_scheduler_configs)
        self.prepares = bool(self.unscales or self.before_step_hooks or self.clips)  # before_step does something
        self.finishes = hooks.overrides(precision, "update", Precision) or self.schedules  # finish_step does more

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale (first, so hooks and clipping see the true gradients), ``on_before_optimizer_step``, then
        (automatic mode) ``configure_gradient_clipping``."""
        if self.unscales:
            self.trainer.precision.unscale_(optimizer)
        for hook in self.before_step_hooks:
            hook(optimizer)
        if self.clips:
            trainer = self.trainer
            trainer.lightning_module.configure_gradient_clipping(
                optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm
            )

    def finish_step(self, batch_idx: int) -> None:
        """After the optimizers stepped: the precision's update, the global step, the step-interval schedulers.

        An fp16 step the scaler skipped (overflow) holds the learning rate; telling it on the host waits
        for the device, so only a run with step-interval schedulers reads it.
        """
        stepped = self.trainer.precision.update()
        self.progress.global_step += 1
        if self.schedules and bool(stepped):
            self.step_schedulers("step", batch_idx, plateau=False)

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Run ``closure`` (if any) and ``before_step``, then step through the precision.

        In manual optimization every call is a global step, as in Lightning; its gradients were
        averaged across ranks in ``manual_backward`` already. In automatic optimization the loop
        finishes the step (``finish_step``) once ``optimizer_step`` returns.
        """

        def closure_then_hooks() -> Any:
            result = closure() if closure is not None else None
            self.before_step(optimizer)
            return result

        result = self.trainer.precision.optimizer_step(optimizer, closure_then_hooks, **kwargs)
        if self.manual:
            self.finish_step(-1)
        return result

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
