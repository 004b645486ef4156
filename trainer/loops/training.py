"""One training batch: automatic optimization in Lightning's order, or the module's own (manual).

Automatic, per micro-batch: ``training_step``; at the first micro-batch of an accumulation window
``on_before_zero_grad`` and ``optimizer_zero_grad``; ``on_before_backward``, the backward,
``on_after_backward``; at the window's end the unscale, ``on_before_optimizer_step``, clipping
(``configure_gradient_clipping``), the step, and the step-interval schedulers. Gradients are zeroed
at the start of the next window, not after the step, so ``on_train_batch_end`` still sees them.
Hooks nobody overrides are left out, so a plain module's step makes the calls of a hand-written loop.
A module that overrides ``optimizer_step`` (or an LBFGS optimizer) gets Lightning's closure instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.loops.hooks import overrides
from trainer.module import Module
from trainer.precision import Precision

if TYPE_CHECKING:
    from trainer.loops.optimization import Optimization
    from trainer.loops.progress import Progress
    from trainer.view import TrainerView

STOP_EPOCH = object()  # on_train_batch_start returned -1: the epoch ends here


class AutomaticStep:
    """The Trainer optimizes: the step returns a loss, and the Trainer does backward and steps."""

    def __init__(self, trainer: TrainerView, progress: Progress, optimization: Optimization) -> None:
        self.trainer = trainer
        self.progress = progress
        self.optimization = optimization
        self.optimizer = optimization.optimizers[0]
        self.step_loss: torch.Tensor | None = None  # the last loss, graph head kept (see run)
        self.first_nonfinite_step: torch.Tensor | None = None  # device-side, read at log intervals
        self.skipped = 0  # batches skipped this epoch for a non-finite loss (on_nonfinite_loss="skip")
        self.num_batches: int | float = math.inf

    def start_epoch(self, num_batches: int | float) -> None:
        """Resolve what a batch calls once per epoch; hooks nobody overrides are not called at all."""
        trainer = self.trainer
        module = trainer.lightning_module
        precision = trainer.precision
        self.num_batches = num_batches
        self.skipped = 0
        self.accumulate = trainer.accumulate_grad_batches
        self.forward = precision.autocast(trainer.strategy.step_function("training"))
        self.before_zero_grad = hooks.resolved(trainer, "on_before_zero_grad")
        self.custom_zero_grad = overrides(module, "optimizer_zero_grad", Module)
        self.hooked_backward = bool(
            hooks.resolved(trainer, "on_before_backward")
            or hooks.resolved(trainer, "on_after_backward")
            or overrides(module, "backward", Module)
        )
        self.plain_zero_grad = not self.before_zero_grad and not self.custom_zero_grad
        self.before_step = hooks.resolved(trainer, "on_before_optimizer_step")
        self.unscale = overrides(precision, "unscale_", Precision)
        self.updates_precision = overrides(precision, "update", Precision)
        self.custom_clipping = overrides(module, "configure_gradient_clipping", Module)
        self.clips = self.custom_clipping or trainer.gradient_clip_val is not None
        self.schedules = bool(self.optimization.lr_scheduler_configs)
        self.closure_step = overrides(module, "optimizer_step", Module) or isinstance(self.optimizer, torch.optim.LBFGS)
        self.check_finite = trainer.on_nonfinite_loss != "off"

    # ---- one batch -----------------------------------------------------------------------------------------
    def entry(self) -> Callable[[Any, int], Any]:
        """What trains a batch this epoch: the flat common case (every batch steps, no closure), or ``run``."""
        return self._every_batch() if self.accumulate == 1 and not self.closure_step else self.run

    def _every_batch(self) -> Callable[[Any, int], Any]:
        """``run`` for the common case as one closure over what it calls, resolved for the epoch.

        This is every step of most runs: locals instead of attribute reads and no nested calls bring a
        plain fp32 step to the calls of a hand-written loop. Anything not plain (hooks, clipping,
        schedulers, a scaler) goes through the same methods ``run`` uses.
        """
        forward, optimizer, progress = self.forward, self.optimizer, self.progress
        precision = self.trainer.precision
        zero_grad = optimizer.zero_grad if self.plain_zero_grad else None
        backward: Callable[[torch.Tensor], Any] | None = None  # None: the plain loss.backward()
        if self.hooked_backward:
            backward = self.optimization.backward
        elif overrides(precision, "backward", Precision):
            backward = precision.backward
        plain_step = not (
            self.unscale
            or self.before_step
            or self.clips
            or self.updates_precision
            or self.schedules
            or overrides(precision, "optimizer_step", Precision)
        )
        check_finite, isfinite = self.check_finite, math.isfinite

        def every_batch(batch: Any, batch_idx: int) -> Any:
            output = forward(batch, batch_idx)
            if zero_grad is not None:
                zero_grad()
            else:
                self._zero_grad(batch_idx)
            try:
                loss = output["loss"] if isinstance(output, dict) else output
                if check_finite and not (loss.is_cpu and isfinite(loss.item())) and not self._finite(loss):
                    loss = loss.detach()  # skipped: drop the graph at once
                elif backward is None:
                    loss.backward()
                else:
                    backward(loss)
            except Exception:
                check_loss(output, progress.global_step)
                raise
            if plain_step:
                optimizer.step()
                progress.global_step += 1
            else:
                self._optimizer_step(batch_idx)
            self.step_loss = loss  # the graph head is kept until the next step (see ``run``)
            return output

        return every_batch

    def run(self, batch: Any, batch_idx: int) -> Any:
        """Train on one micro-batch; returns the step's output."""
        accumulate = self.accumulate
        should_step = accumulate == 1 or self._window_end(batch_idx)
        if self.closure_step:
            return self._run_with_closure(batch, batch_idx, should_step)
        if should_step:
            output, loss = self._forward_backward(batch, batch_idx)
            self._optimizer_step(batch_idx)
        else:
            with self.trainer.strategy.no_sync():  # DDP: no gradient all-reduce until the window closes
                output, loss = self._forward_backward(batch, batch_idx)
        # The last loss keeps its graph head until the next step, as a hand-written loop's ``loss``
        # does: autograd then reuses each parameter's gradient accumulator instead of rebuilding it.
        self.step_loss = loss
        return output

    def _forward_backward(self, batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor]:
        """The step, zero_grad at a window's start, and the backward of its loss.

        The output is only validated when something fails: ``check_loss`` then names the problem
        (a checked-up-front loss would cost every step a few attribute reads).
        """
        output = self.forward(batch, batch_idx)
        if self.accumulate == 1 or batch_idx % self.accumulate == 0:
            if self.plain_zero_grad:
                self.optimizer.zero_grad()
            else:
                self._zero_grad(batch_idx)
        try:
            loss = output["loss"] if isinstance(output, dict) else output
            if self.check_finite and not self._finite(loss):
                return output, loss.detach()  # skipped: drop the graph at once
            if self.accumulate != 1:
                loss = loss / self._divisor(batch_idx)
            if self.hooked_backward:
                self.optimization.backward(loss)
            else:
                self.trainer.precision.backward(loss)
        except Exception:
            check_loss(output, self.progress.global_step)
            raise
        return output, loss

    def _zero_grad(self, batch_idx: int) -> None:
        for hook in self.before_zero_grad:
            hook(self.optimizer)
        if self.custom_zero_grad:
            self.trainer.lightning_module.optimizer_zero_grad(self.progress.epoch, batch_idx, self.optimizer)
        else:
            self.optimizer.zero_grad()

    def _optimizer_step(self, batch_idx: int) -> None:
        trainer = self.trainer
        optimizer = self.optimizer
        precision = trainer.precision
        if self.unscale:  # first, so the hooks and clipping see the true gradients
            precision.unscale_(optimizer)
        for hook in self.before_step:
            hook(optimizer)
        if self.clips:
            self._clip(optimizer)
        precision.optimizer_step(optimizer)
        # _after_step's lines, inline: this is the path every plain step takes
        stepped = precision.update() if self.updates_precision else True
        self.progress.global_step += 1
        if stepped and self.schedules:
            self.optimization.step_schedulers("step", batch_idx, plateau=False)

    def _clip(self, optimizer: torch.optim.Optimizer) -> None:
        trainer = self.trainer
        if self.custom_clipping:
            trainer.lightning_module.configure_gradient_clipping(
                optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm
            )
        elif trainer.gradient_clip_val is not None:
            self.optimization.clip_gradients(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)

    def _after_step(self, batch_idx: int) -> None:
        stepped = self.trainer.precision.update() if self.updates_precision else True
        self.progress.global_step += 1
        if stepped and self.schedules:  # an fp16 overflow skipped the step: hold the LR
            self.optimization.step_schedulers("step", batch_idx, plateau=False)

    def _run_with_closure(self, batch: Any, batch_idx: int, should_step: bool) -> Any:
        """Lightning's closure: ``optimizer_step`` (the module's) runs it, so LBFGS can re-evaluate the loss."""
        found: dict[str, Any] = {}

        def closure() -> torch.Tensor:
            found["output"], found["loss"] = self._forward_backward(batch, batch_idx)
            return found["loss"]

        if not should_step:
            with self.trainer.strategy.no_sync():
                closure()
        else:
            module = self.trainer.lightning_module
            wrapped = self.optimization.wrapped[0]
            module.optimizer_step(self.progress.epoch, batch_idx, wrapped, closure)
            if "loss" not in found:
                raise RuntimeError(
                    f"{type(module).__name__}.optimizer_step() did not call the optimizer_closure it was given, so "
                    "training_step never ran: call optimizer.step(closure=optimizer_closure), or optimizer_closure() "
                    "when skipping the step."
                )
            self._after_step(batch_idx)
        self.step_loss = found["loss"]
        return found["output"]

    # ---- accumulation windows ----------------------------------------------------------------------------
    def _window_end(self, batch_idx: int) -> bool:
        return (batch_idx + 1) % self.accumulate == 0 or batch_idx + 1 >= self.num_batches

    def _divisor(self, batch_idx: int) -> float:
        """Micro-batches in this window: a last partial window averages over what it has."""
        start = batch_idx - batch_idx % self.accumulate
        total = self.num_batches
        return float(min(self.accumulate, total - start)) if math.isfinite(total) else float(self.accumulate)

    # ---- non-finite losses ---------------------------------------------------------------------------
    def _finite(self, loss: torch.Tensor) -> bool:
        """False when the batch must be skipped; raises under on_nonfinite_loss="raise".

        On CPU ``.item()`` is nearly free, so the check is immediate. On an accelerator a per-step
        ``.item()`` would stall the device, so "raise" keeps a device-side record of the first bad
        step and reads it at each logging interval and at the epoch end (``check_nonfinite``).
        """
        if loss.is_cpu and math.isfinite(loss.item()):
            return True
        mode = self.trainer.on_nonfinite_loss
        step = self.progress.global_step
        if not loss.is_cpu and mode == "raise":
            at = torch.tensor(step, device=loss.device)
            first = self.first_nonfinite_step
            bad = ~torch.isfinite(loss.detach())
            if first is None:
                self.first_nonfinite_step = torch.where(bad, at, torch.full_like(at, -1))
            else:
                self.first_nonfinite_step = torch.where(bad & (first < 0), at, first)
            return True
        value = loss.item()
        if math.isfinite(value):
            return True
        if mode == "raise":
            raise_nonfinite(self.progress.epoch, step, value)
        self.skipped += 1
        return False

    def check_nonfinite(self) -> None:
        """Read the deferred device-side record (one sync) and raise if a loss was not finite."""
        first = self.first_nonfinite_step
        if first is not None and (step := int(first)) >= 0:
            raise_nonfinite(self.progress.epoch, step)


class ManualStep:
    """The module optimizes: ``training_step`` calls ``manual_backward`` and steps its optimizers."""

    def entry(self) -> Callable[[Any, int], Any]:
        return self.run

    step_loss: torch.Tensor | None = None
    skipped = 0

    def __init__(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.forward: Callable[[Any, int], Any] = trainer.lightning_module.training_step

    def start_epoch(self, num_batches: int | float) -> None:
        trainer = self.trainer
        self.forward = trainer.precision.autocast(trainer.strategy.step_function("training"))

    def run(self, batch: Any, batch_idx: int) -> Any:
        return self.forward(batch, batch_idx)

    def check_nonfinite(self) -> None:
        """The module checks its own losses in manual optimization."""


def check_loss(output: Any, step: int) -> None:
    """Raise a clear error when ``output`` is not a usable loss (called after a step failed)."""
    loss = output.get("loss") if isinstance(output, dict) else output
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"training_step must return a loss tensor or a dict with 'loss'; got {type(output).__name__} "
            f"at global step {step}. (With automatic_optimization=False it may return None.)"
        )
    if loss.numel() != 1:
        raise ValueError(f"training_step returned a loss of shape {tuple(loss.shape)}; it must be a scalar.")
    if not loss.requires_grad:
        raise ValueError(
            "training_step returned a loss that does not require grad (was it computed under no_grad, or detached?)."
        )


def raise_nonfinite(epoch: int, step: int, value: float | None = None) -> None:
    shown = f" ({value})" if value is not None else ""
    raise FloatingPointError(
        f"training_step returned a non-finite loss{shown} at epoch {epoch}, global step {step}; "
        "pass on_nonfinite_loss='skip' to skip such batches."
    )
