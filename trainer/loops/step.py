"""The training step, whole, in one file: what a training batch does to the weights.

Automatic optimization, in Lightning's order, per batch of an accumulation window
(:class:`AccumulationWindow`): ``training_step``; at the window's first batch ``on_before_zero_grad``
and ``optimizer_zero_grad``; ``on_before_backward``, the backward, ``on_after_backward``; at the
window's last batch the unscale, ``on_before_optimizer_step``, clipping
(``configure_gradient_clipping``) and the optimizer step; then the precision's update, the one
``global_step`` increment and the step-interval schedulers. Gradients are zeroed at the start of the
next window, not after the step, so ``on_train_batch_end`` still sees them. A module that overrides
``optimizer_step`` (or an LBFGS optimizer) gets Lightning's closure, which wraps only
zero_grad/forward/backward. Manual optimization: ``training_step`` steps its optimizers through
``LightningOptimizer``, which comes to :meth:`TrainingStep.optimizer_step` and ends in the same after-step.

What is decided once per epoch (the window, which hooks are overridden, clipping, schedulers, the
non-finite mode) is resolved in :meth:`TrainingStep.start_epoch`; hooks nobody overrides are left
out, so a plain fp32 step makes the calls of a hand-written loop (zero_grad, forward, backward,
step). The step never waits on the device (``trainer.loops.nonfinite``).

The seam for capturing the step (a whole-step CUDA graph), all resolved per epoch:

- :meth:`TrainingStep.inner_step`: ``(batch, batch_idx) -> (output, loss)`` for a batch that ends its
  window: zero_grad (at a window's start), ``training_step``, backward, unscale/hooks/clip, optimizer
  step. Exactly the region a graph may capture; it touches no counter and no scheduler.
- :meth:`TrainingStep.micro_step`: the same for a batch inside a window (no optimizer step), run
  under the strategy's ``no_sync``.
- :meth:`TrainingStep.after_step`: ``() -> None``, host-side after a window's step: the precision's
  update, ``Progress.count_step``, the step-interval schedulers. Never captured.
- :meth:`TrainingStep.batch_step` composes them into what the fit loop calls per batch; batch
  start/end hooks, logging and validation stay in the fit loop, outside all of these.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.exceptions import MisconfigurationException, MisconfigurationTypeError
from trainer.loops.nonfinite import NonfiniteLosses, check_loss
from trainer.module import Module
from trainer.optim import requires_closure
from trainer.overrides import overrides
from trainer.precision import Precision

if TYPE_CHECKING:
    from trainer.loops.optimization import Optimization
    from trainer.loops.progress import Progress
    from trainer.view import TrainerView

BatchStep = Callable[[Any, int], Any]  # (batch, batch_idx) -> training_step's output
InnerStep = Callable[[Any, int], tuple[Any, torch.Tensor]]  # (batch, batch_idx) -> (output, loss)
AfterStep = Callable[[], None]


@dataclass(frozen=True)
class AccumulationWindow:
    """``size`` micro-batches per optimizer step in an epoch of ``num_batches`` (inf: a loader without a
    length). The epoch's last window may be shorter: it ends at the epoch's last batch."""

    size: int = 1
    num_batches: int | float = math.inf

    def starts(self, batch_idx: int) -> bool:
        return batch_idx % self.size == 0

    def ends(self, batch_idx: int) -> bool:
        return (batch_idx + 1) % self.size == 0 or batch_idx + 1 >= self.num_batches

    def divisor(self, batch_idx: int) -> float:
        """Micro-batches in ``batch_idx``'s window: a last partial window averages over what it has."""
        start = batch_idx - batch_idx % self.size
        total = self.num_batches
        return float(min(self.size, total - start)) if math.isfinite(total) else float(self.size)

    def is_open_after(self, batches_done: int) -> bool:
        """Whether ``batches_done`` batches leave a window with gradients and no step yet."""
        return batches_done > 0 and not self.ends(batches_done - 1)

    def steps(self) -> int | float:
        """Optimizer steps in the epoch (Lightning's ``ceil(batches / accumulate_grad_batches)``)."""
        return math.ceil(self.num_batches / self.size) if math.isfinite(self.num_batches) else math.inf


def read_window(trainer: TrainerView, num_batches: int | float) -> AccumulationWindow:
    """The accumulation schedule as set now: ``Trainer(accumulate_grad_batches=...)``, or a callback such as
    ``GradientAccumulationScheduler`` through that attribute. The step reads it once per epoch."""
    return AccumulationWindow(trainer.accumulate_grad_batches, num_batches)


class TrainingStep:
    """A fit's training step: automatic (the Trainer steps) or manual (``training_step`` steps)."""

    def __init__(self, trainer: TrainerView, progress: Progress, optimization: Optimization) -> None:
        self.trainer, self.progress, self.optimization = trainer, progress, optimization
        self.automatic = trainer.lightning_module.automatic_optimization
        self.optimizer = optimization.optimizers[0] if self.automatic else None
        self.window = AccumulationWindow()
        self.nonfinite = NonfiniteLosses()
        self.none_steps = 0  # batches of this epoch whose training_step returned None (skipped, as in Lightning)
        self.step_loss: torch.Tensor | None = None  # the last loss, graph head kept (see batch_step)
        self.forward: BatchStep = trainer.lightning_module.training_step
        self.before_zero_grad: tuple[hooks.Hook, ...] = ()
        self.custom_zero_grad = self.hooked_backward = self.closure_step = False
        optimization.wrap(self.optimizer_step)  # the module's self.optimizers() step through here
        self._resolve_step_hooks()

    @property
    def skipped(self) -> int:
        """Batches skipped this epoch for a non-finite loss (``on_nonfinite_loss="skip"``)."""
        return self.nonfinite.skipped

    # ---- once per epoch ----------------------------------------------------------------------------------
    def start_epoch(self, num_batches: int | float) -> None:
        """Resolve what a batch calls; hooks nobody overrides are not called at all."""
        trainer = self.trainer
        self.window = read_window(trainer, num_batches) if self.automatic else AccumulationWindow(1, num_batches)
        # detect_anomaly: autograd's anomaly mode stops the run at the op that made the NaN (Lightning's error)
        self.nonfinite.start_epoch("off" if trainer.detect_anomaly else trainer.on_nonfinite_loss)
        self.forward = trainer.precision_plugin.autocast(trainer.strategy.step_function("training"))
        self._resolve_step_hooks()
        if not self.automatic:
            return
        module = trainer.lightning_module
        self.before_zero_grad = hooks.resolved(trainer, "on_before_zero_grad")
        self.custom_zero_grad = overrides(module, "optimizer_zero_grad", Module)
        self.hooked_backward = bool(
            hooks.resolved(trainer, "on_before_backward")
            or hooks.resolved(trainer, "on_after_backward")
            or overrides(module, "backward", Module)
        )
        self.closure_step = (
            overrides(module, "optimizer_step", Module)
            or isinstance(self.optimizer, torch.optim.LBFGS)
            or requires_closure(self.optimizer)
        )

    def _resolve_step_hooks(self) -> None:
        """What happens around an optimizer step: hooks nobody overrides cost nothing per step."""
        trainer = self.trainer
        module, precision = trainer.lightning_module, trainer.precision_plugin
        self.before_step_hooks = hooks.resolved(trainer, "on_before_optimizer_step")
        self.unscales = overrides(precision, "unscale_", Precision)
        self.clips = self.automatic and (
            overrides(module, "configure_gradient_clipping", Module) or trainer.gradient_clip_val is not None
        )
        self.schedules = self.automatic and bool(self.optimization.lr_scheduler_configs)
        self.prepares = bool(self.unscales or self.before_step_hooks or self.clips)  # _before_step does something
        self.updates = overrides(precision, "update", Precision)
        self._after = self.after_step()  # the manual path's, which each LightningOptimizer.step ends in

    # ---- the step, composed per epoch ----------------------------------------------------------------------
    def batch_step(self, inner: InnerStep | None = None) -> BatchStep:
        """What the fit loop calls per training batch this epoch: the inner step and the after-step at a
        window's end, a micro-step (no gradient sync) inside it; manual optimization: ``training_step``.
        ``inner``: a replacement for ``inner_step()`` with its contract (e.g. a captured graph's replay)."""
        if not self.automatic:
            return _manual_output_checked(self.forward)
        inner, micro, after = inner or self.inner_step(), self.micro_step(), self.after_step()
        ends, no_sync, every = self.window.ends, self.trainer.strategy.no_sync, self.window.size == 1

        def train(batch: Any, batch_idx: int) -> Any:
            if every or ends(batch_idx):
                output, loss = inner(batch, batch_idx)
                after()
            else:
                with no_sync():  # DDP: no gradient all-reduce until the window closes
                    output, loss = micro(batch, batch_idx)
            # The last loss keeps its graph head until the next step, as a hand-written loop's ``loss``
            # does: autograd then reuses each parameter's gradient accumulator instead of rebuilding it.
            self.step_loss = loss
            return output

        return train

    def inner_step(self) -> InnerStep:
        """zero_grad (a window's start), forward, backward, unscale/hooks/clip and the optimizer step: the
        capturable region of a window's last batch. The closure path hands zero_grad/forward/backward
        to the module's ``optimizer_step`` as Lightning's closure."""
        if self.closure_step:
            return self._closure_step(self.micro_step())
        assert self.optimizer is not None, "automatic optimization steps one optimizer"
        return self._forward_backward(self._stepper(self.optimizer))

    def micro_step(self) -> InnerStep:
        """``training_step``, zero_grad at a window's start, and the backward of its (window-averaged) loss."""
        return self._forward_backward(None)

    def _forward_backward(self, step: Callable[[], Any] | None) -> InnerStep:
        """The micro-step, then (``step``) the before-step and the optimizer step: one body for both, one call
        per batch. The output is only validated when something fails: ``check_loss`` then names the
        problem (a checked-up-front loss would cost every step a few attribute reads)."""
        forward, progress, window, nonfinite = self.forward, self.progress, self.window, self.nonfinite
        every, optimizer = window.size == 1, self.optimizer
        assert optimizer is not None, "automatic optimization steps one optimizer"
        zero_grad = optimizer.zero_grad if not (self.before_zero_grad or self.custom_zero_grad) else None
        backward = self._backward()  # None: the plain loss.backward()
        prepare = self._before_step if step is not None and self.prepares else None
        check_finite, isfinite = nonfinite.mode != "off", math.isfinite
        on_cpu = self.trainer.strategy.root_device.type == "cpu"  # .item() is free there: check at once

        def forward_backward(batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor]:
            output = forward(batch, batch_idx)
            if every or window.starts(batch_idx):
                if zero_grad is not None:
                    zero_grad()
                else:
                    self._zero_grad(batch_idx)
            try:
                loss = output["loss"] if isinstance(output, dict) else output
                if (
                    check_finite
                    and not (on_cpu and isfinite(loss.item()))
                    and not nonfinite.finite(loss, progress.epoch, progress.global_step)
                ):
                    loss = loss.detach()  # skipped: no backward, the graph dropped at once
                else:
                    if not every:
                        loss = loss / window.divisor(batch_idx)
                    if backward is None:
                        loss.backward()
                    else:
                        backward(loss)
            except Exception:
                if output is not None or not self._skip_none():  # None: Lightning's skipped batch
                    check_loss(output, progress.global_step)
                    raise
                loss = None
            if step is not None:
                if prepare is not None:  # unscale first, so the hooks and clipping see the true gradients
                    prepare(optimizer)
                step()
            return output, loss

        return forward_backward

    def after_step(self) -> AfterStep:
        """The host-side end of a window's step: the precision's update, the global step, step-interval
        schedulers (an fp16 step the scaler skipped holds the learning rate: only a run with such
        schedulers reads that answer, which waits for the device). For a plain step, the count alone."""
        progress, schedules, step_schedulers = self.progress, self.schedules, self.optimization.step_schedulers
        update = self.trainer.precision_plugin.update if self.updates else None
        if update is None and not schedules:
            return progress.count_step

        return functools.partial(_after, update, progress, schedules, step_schedulers)  # a partial pickles

    # ---- the parts -----------------------------------------------------------------------------------------
    def _backward(self) -> Callable[[torch.Tensor], Any] | None:
        if self.hooked_backward:
            return self.optimization.backward
        precision = self.trainer.precision_plugin
        return precision.backward if overrides(precision, "backward", Precision) else None

    def _zero_grad(self, batch_idx: int) -> None:
        assert self.optimizer is not None
        for hook in self.before_zero_grad:
            hook(self.optimizer)
        if self.custom_zero_grad:
            self.trainer.lightning_module.optimizer_zero_grad(self.progress.epoch, batch_idx, self.optimizer)
        else:
            self.optimizer.zero_grad()

    def _before_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale (first, so hooks and clipping see the true gradients), ``on_before_optimizer_step``, then
        (automatic optimization) ``configure_gradient_clipping``."""
        if self.unscales:
            self.trainer.precision_plugin.unscale_(optimizer)
        for hook in self.before_step_hooks:
            hook(optimizer)
        if self.clips:
            trainer = self.trainer
            trainer.lightning_module.configure_gradient_clipping(
                optimizer,
                gradient_clip_val=trainer.gradient_clip_val,
                gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            )

    def _stepper(self, optimizer: torch.optim.Optimizer) -> Callable[..., Any]:
        """The one call that steps an optimizer (automatic, closure and manual paths): its own ``step``
        where the precision adds nothing, else the precision's (GradScaler)."""
        precision = self.trainer.precision_plugin
        if overrides(precision, "optimizer_step", Precision):
            return functools.partial(precision.optimizer_step, optimizer)
        return optimizer.step

    def _closure_step(self, forward_backward: InnerStep) -> InnerStep:
        """Lightning's closure: ``optimizer_step`` (the module's) runs it, so LBFGS can re-evaluate the loss."""
        module, wrapped = self.trainer.lightning_module, self.optimization.wrapped[0]

        def inner(batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor]:
            found: dict[str, Any] = {}

            def closure() -> torch.Tensor:
                with torch.enable_grad():  # an optimizer's step may run under no_grad (Hugging Face's AdamW)
                    found["output"], found["loss"] = forward_backward(batch, batch_idx)
                return found["loss"]  # type: ignore[no-any-return]

            module.optimizer_step(self.progress.epoch, batch_idx, wrapped, closure)
            if "loss" not in found:
                raise MisconfigurationException(
                    f"The closure hasn't been executed: {type(module).__name__}.optimizer_step() did not call the "
                    "optimizer_closure it was given, so training_step never ran. Call "
                    "optimizer.step(closure=optimizer_closure), or optimizer_closure() when skipping the step."
                )
            return found["output"], found["loss"]

        return inner

    # ---- LightningOptimizer.step: manual optimization, and the closure path's optimizer.step(closure) --------------
    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        """Run ``closure`` (if any) and the before-step, then step through the precision. In manual
        optimization every call is a global step, as in Lightning (its gradients were averaged across
        ranks in ``manual_backward``); in automatic optimization ``batch_step`` finishes the step."""

        def closure_then_prepare() -> Any:
            result = closure() if closure is not None else None
            self._before_step(optimizer)
            return result

        result = self._stepper(optimizer)(closure=closure_then_prepare, **kwargs)
        if not self.automatic:
            self._after()
        return result

    def _skip_none(self) -> bool:
        """``training_step`` returned None: Lightning skips the backward (the optimizer still steps, on what the
        window accumulated), warning once; on several ranks it refuses, as a skipped all-reduce would hang."""
        if self.trainer.world_size > 1:
            raise RuntimeError(
                "Skipping the `training_step` by returning None in distributed training is not supported. It is "
                "recommended that you rewrite your training logic to avoid having to skip the step in the first place."
            )
        if not self.none_steps:
            warnings.warn(
                "`training_step` returned `None`. If this was on purpose, ignore this warning... (the batch is "
                "skipped: no backward; did it forget to return the loss?)",
                UserWarning,
                stacklevel=5,
            )
        self.none_steps += 1
        return True

    # ---- non-finite losses -----------------------------------------------------------------------------------
    def check_nonfinite(self) -> None:
        """Raise now if a deferred check found a non-finite loss (one synchronization); the module checks
        its own losses in manual optimization."""
        self.nonfinite.check(self.progress.epoch)

    def end_epoch(self, batches: int, report: bool) -> None:
        """An epoch's end: a deferred non-finite loss raises; batches skipped for one are reported (``report``)."""
        self.check_nonfinite()
        self.none_steps = 0
        if self.skipped and report:
            warnings.warn(
                f"on_nonfinite_loss='skip' skipped {self.skipped} of the {batches} batches of epoch "
                f"{self.progress.epoch}: their loss was NaN or infinite, so they changed nothing.",
                stacklevel=3,
            )


def _manual_output_checked(forward: InnerStep) -> BatchStep:
    """Manual optimization's ``training_step``, whose output is a tensor, a dict or None (Lightning's rule)."""

    def train(batch: Any, batch_idx: int) -> Any:
        output = forward(batch, batch_idx)
        if output is not None and not isinstance(output, torch.Tensor | Mapping):
            raise MisconfigurationTypeError(
                "In manual optimization, `training_step` must either return a Tensor or have no return "
                f"(a dict of values works too); got {type(output).__name__}."
            )
        return output

    return train


def _after(
    update: Callable[[], Any] | None,
    progress: Progress,
    schedules: bool,
    step_schedulers: Callable[..., None],
) -> None:
    """``TrainingStep.after_step``'s step end: precision update, global step, step-interval schedulers."""
    stepped = update() if update is not None else True
    progress.count_step()
    if schedules and bool(stepped):  # the batch being trained: batches_done counts the ones before it
        step_schedulers("step", progress.batches_done, plateau=False)
