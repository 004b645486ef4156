"""One training batch: automatic optimization in Lightning's order, or the module's own (manual).

Automatic, per micro-batch: ``training_step``; at the first micro-batch of an accumulation window
``on_before_zero_grad`` and ``optimizer_zero_grad``; ``on_before_backward``, the backward,
``on_after_backward``; at the window's end the unscale, ``on_before_optimizer_step``, clipping
(``configure_gradient_clipping``), the step, and the step-interval schedulers. Gradients are zeroed
at the start of the next window, not after the step, so ``on_train_batch_end`` still sees them.
A module that overrides ``optimizer_step`` (or an LBFGS optimizer) gets Lightning's closure instead.

There is one implementation of the step (``AutomaticStep.entry``): a closure built once per epoch
over what the epoch calls. Hooks nobody overrides are left out when it is built, so a plain
module's step makes the calls of a hand-written loop. The step never waits on the device: the
non-finite check on an accelerator is deferred (``trainer.loops.nonfinite``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.loops.hooks import overrides
from trainer.loops.nonfinite import DeferredNonfinite
from trainer.module import Module
from trainer.precision import Precision

if TYPE_CHECKING:
    from trainer.loops.optimization import Optimization
    from trainer.loops.progress import Progress
    from trainer.view import TrainerView

STOP_EPOCH = object()  # on_train_batch_start returned -1: the epoch ends here
ForwardBackward = Callable[[Any, int], tuple[Any, torch.Tensor]]


class AutomaticStep:
    """The Trainer optimizes: the step returns a loss, and the Trainer does backward and steps."""

    def __init__(self, trainer: TrainerView, progress: Progress, optimization: Optimization) -> None:
        self.trainer = trainer
        self.progress = progress
        self.optimization = optimization
        self.optimizer = optimization.optimizers[0]
        self.step_loss: torch.Tensor | None = None  # the last loss, graph head kept (see entry)
        self.nonfinite = DeferredNonfinite()  # on_nonfinite_loss="raise" on an accelerator
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
        self.optimization.resolve()
        self.closure_step = overrides(module, "optimizer_step", Module) or isinstance(self.optimizer, torch.optim.LBFGS)
        self.check_finite = trainer.on_nonfinite_loss != "off"

    # ---- one batch -----------------------------------------------------------------------------------------
    def entry(self) -> Callable[[Any, int], Any]:
        """The step for this epoch: one closure over what it calls, resolved once per epoch.

        Locals instead of attribute reads and no calls for what nobody overrides bring a plain fp32
        step to the calls of a hand-written loop; the rest (hooks, clipping, schedulers, a scaler,
        accumulation, a closure for ``optimizer_step``) are the same lines with their parts present.
        """
        forward_backward = self._forward_backward()
        if self.closure_step:
            return self._with_closure(forward_backward)
        optimization, optimizer, progress = self.optimization, self.optimizer, self.progress
        precision = self.trainer.precision
        every, window_end, no_sync = self.accumulate == 1, self._window_end, self.trainer.strategy.no_sync
        plain = not (
            optimization.prepares or optimization.finishes or overrides(precision, "optimizer_step", Precision)
        )
        prepares, before_step, finish = optimization.prepares, optimization.before_step, optimization.finish_step

        def train(batch: Any, batch_idx: int) -> Any:
            if every or window_end(batch_idx):
                output, loss = forward_backward(batch, batch_idx)
                if plain:
                    optimizer.step()
                    progress.global_step += 1
                else:
                    if prepares:  # unscale first, so the hooks and clipping see the true gradients
                        before_step(optimizer)
                    precision.optimizer_step(optimizer)
                    finish(batch_idx)
            else:
                with no_sync():  # DDP: no gradient all-reduce until the window closes
                    output, loss = forward_backward(batch, batch_idx)
            # The last loss keeps its graph head until the next step, as a hand-written loop's ``loss``
            # does: autograd then reuses each parameter's gradient accumulator instead of rebuilding it.
            self.step_loss = loss
            return output

        return train

    def _forward_backward(self) -> ForwardBackward:
        """The step, zero_grad at a window's start, and the backward of its loss, resolved for the epoch.

        The output is only validated when something fails: ``check_loss`` then names the problem
        (a checked-up-front loss would cost every step a few attribute reads).
        """
        forward, progress, accumulate = self.forward, self.progress, self.accumulate
        every = accumulate == 1
        zero_grad = self.optimizer.zero_grad if self.plain_zero_grad else None
        precision = self.trainer.precision
        backward: Callable[[torch.Tensor], Any] | None = None  # None: the plain loss.backward()
        if self.hooked_backward:
            backward = self.optimization.backward
        elif overrides(precision, "backward", Precision):
            backward = precision.backward
        check_finite, finite, isfinite = self.check_finite, self._finite, math.isfinite

        def forward_backward(batch: Any, batch_idx: int) -> tuple[Any, torch.Tensor]:
            output = forward(batch, batch_idx)
            if every or batch_idx % accumulate == 0:
                if zero_grad is not None:
                    zero_grad()
                else:
                    self._zero_grad(batch_idx)
            try:
                loss = output["loss"] if isinstance(output, dict) else output
                # on CPU .item() costs nothing and the check is immediate; elsewhere _finite defers it
                if check_finite and not (loss.is_cpu and isfinite(loss.item())) and not finite(loss):
                    return output, loss.detach()  # skipped: drop the graph at once
                if not every:
                    loss = loss / self._divisor(batch_idx)
                if backward is None:
                    loss.backward()
                else:
                    backward(loss)
            except Exception:
                check_loss(output, progress.global_step)
                raise
            return output, loss

        return forward_backward

    def _zero_grad(self, batch_idx: int) -> None:
        for hook in self.before_zero_grad:
            hook(self.optimizer)
        if self.custom_zero_grad:
            self.trainer.lightning_module.optimizer_zero_grad(self.progress.epoch, batch_idx, self.optimizer)
        else:
            self.optimizer.zero_grad()

    def _with_closure(self, forward_backward: ForwardBackward) -> Callable[[Any, int], Any]:
        """Lightning's closure: ``optimizer_step`` (the module's) runs it, so LBFGS can re-evaluate the loss."""
        every, window_end, no_sync = self.accumulate == 1, self._window_end, self.trainer.strategy.no_sync
        module, wrapped, finish = (
            self.trainer.lightning_module,
            self.optimization.wrapped[0],
            self.optimization.finish_step,
        )

        def train(batch: Any, batch_idx: int) -> Any:
            found: dict[str, Any] = {}

            def closure() -> torch.Tensor:
                found["output"], found["loss"] = forward_backward(batch, batch_idx)
                return found["loss"]  # type: ignore[no-any-return]

            if not (every or window_end(batch_idx)):
                with no_sync():
                    closure()
            else:
                module.optimizer_step(self.progress.epoch, batch_idx, wrapped, closure)
                if "loss" not in found:
                    raise RuntimeError(
                        f"{type(module).__name__}.optimizer_step() did not call the optimizer_closure it was given, "
                        "so training_step never ran: call optimizer.step(closure=optimizer_closure), or "
                        "optimizer_closure() when skipping the step."
                    )
                finish(batch_idx)
            self.step_loss = found["loss"]
            return found["output"]

        return train

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
        ``.item()`` would stall the device, so "raise" records the loss on the device and the host
        reads the first bad step at the next allowed point (``check_nonfinite``). "skip" has to know
        now whether to skip the backward, so it reads the loss every step (a synchronization).
        """
        mode = self.trainer.on_nonfinite_loss
        step = self.progress.global_step
        if mode == "raise" and not loss.is_cpu:
            self.nonfinite.record(loss, step)
            return True
        value = loss.item()
        if math.isfinite(value):
            return True
        if mode == "raise":
            raise_nonfinite(self.progress.epoch, step, value)
        self.skipped += 1
        return False

    def check_nonfinite(self) -> None:
        """Read the deferred device-side record (one synchronization) and raise if a loss was not finite."""
        found = self.nonfinite.read()
        if found is not None:
            raise_nonfinite(self.progress.epoch, *found)


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
