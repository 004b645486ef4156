"""``on_nonfinite_loss``: the check of each training loss, and on an accelerator without waiting on the device.

A per-step ``loss.item()`` (or ``torch.tensor(step, device=...)``) makes the host wait for the
device every step, which costs a launch-bound GPU step up to a third of its time. Instead each
step only keeps its detached loss (no kernel, no copy) and the host-side step number; every
``CHUNK`` losses are folded on the device into the index of the first non-finite one (a few tiny
kernels, no synchronization). The host reads that index only where a value must reach it anyway:
at ``log_every_n_steps``, before a checkpoint is written, before a validation, at the epoch end and
at the end of fit (``read``). The error then names the step where the loss first went non-finite,
and the checkpoint that would have held non-finite weights is never written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from trainer.exceptions import MisconfigurationException, MisconfigurationTypeError

CHUNK = 64  # losses kept before they are folded on the device into the first bad index
NONE = 2**62  # "no non-finite loss yet" as a device-side index


class DeferredNonfinite:
    """Device-side record of the first non-finite loss since the last ``read``."""

    def __init__(self) -> None:
        self.pending: list[torch.Tensor] = []  # detached losses not folded yet
        self.steps: list[int] = []  # the global step of every loss recorded since the last read
        self.first: torch.Tensor | None = None  # device: index (into steps) of the first bad loss, or NONE
        self.value: torch.Tensor | None = None  # device: that loss (nan, inf or -inf)
        self.index: torch.Tensor | None = None  # device constant arange(CHUNK), made once per device

    def record(self, loss: torch.Tensor, step: int) -> None:
        """Keep ``loss`` for the check: no kernel and no host-device copy."""
        self.pending.append(loss.detach())
        self.steps.append(step)
        if len(self.pending) == CHUNK:
            self._fold()

    def _fold(self) -> None:
        """Fold the pending losses into ``first`` on the device (no synchronization)."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        values = torch.stack([loss.reshape(()).float() for loss in pending])
        device = values.device
        if self.index is None or self.index.device != device:
            self.index = torch.arange(CHUNK, device=device)
            self.first = torch.full((), NONE, dtype=torch.long, device=device)
            self.value = torch.zeros((), device=device)
        assert self.first is not None and self.value is not None
        offset = len(self.steps) - len(pending)  # the index of pending[0] in steps
        where = torch.where(torch.isfinite(values), NONE, self.index[: len(pending)] + offset)
        position = where.argmin().reshape(1)  # gather, not where[position]: a tensor index would be read back
        candidate, value = where.gather(0, position).reshape(()), values.gather(0, position).reshape(())
        earlier = candidate < self.first
        self.first = torch.where(earlier, candidate, self.first)
        self.value = torch.where(earlier, value, self.value)

    def read(self) -> tuple[int, float] | None:
        """The global step and value of the first non-finite loss since the last read, or None.

        One synchronization (two when there was such a loss).
        """
        if not self.steps:
            return None
        self._fold()
        assert self.first is not None and self.value is not None
        index = int(self.first)
        steps, self.steps = self.steps, []
        if index == NONE:
            return None
        self.first.fill_(NONE)
        return steps[index], float(self.value)

    def clear(self) -> None:
        """Forget what was recorded (a new fit)."""
        self.pending, self.steps = [], []
        if self.first is not None:
            self.first.fill_(NONE)


class NonfiniteLosses:
    """What ``on_nonfinite_loss`` does with a loss that is NaN or infinite; the mode is read once per epoch.

    On CPU ``.item()`` is nearly free, so the check is immediate. On an accelerator a per-step
    ``.item()`` would stall the device, so "raise" records the loss on the device and the host
    reads the first bad step at the next allowed point (``check``). "skip" has to know now whether
    to skip the backward, so it reads the loss every step (a synchronization).
    """

    def __init__(self) -> None:
        self.deferred = DeferredNonfinite()  # "raise" on an accelerator
        self.mode = "raise"
        self.skipped = 0  # batches skipped this epoch ("skip")

    def start_epoch(self, mode: str) -> None:
        self.mode, self.skipped = mode, 0

    def finite(self, loss: torch.Tensor, epoch: int, step: int) -> bool:
        """False when the batch must be skipped; raises under "raise" (at once on CPU, later on a device)."""
        mode = self.mode
        if mode == "raise" and not loss.is_cpu:
            self.deferred.record(loss, step)
            return True
        value = loss.item()
        if math.isfinite(value):
            return True
        if mode == "raise":
            raise_nonfinite(epoch, step, value)
        self.skipped += 1
        return False

    def check(self, epoch: int) -> None:
        """Read the deferred device-side record (one synchronization) and raise if a loss was not finite."""
        found = self.deferred.read()
        if found is not None:
            raise_nonfinite(epoch, *found)


def check_loss(output: Any, step: int) -> None:
    """Raise a clear error when ``output`` is not a usable loss (called after a step failed)."""
    if isinstance(output, Mapping) and "loss" not in output:
        raise MisconfigurationTypeError(
            "In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present "
            f"(global step {step}; keys: {sorted(map(str, output))})."
        )
    if isinstance(output, Mapping) and not isinstance(output, dict):
        raise MisconfigurationTypeError(
            f"training_step returned a {type(output).__name__} at global step {step}: return a dict with 'loss' "
            "(or the loss tensor)."
        )
    loss = output.get("loss") if isinstance(output, dict) else output
    if not isinstance(loss, torch.Tensor):
        raise MisconfigurationTypeError(
            "In automatic optimization, `training_step` must return a Tensor, a dict, or None (where the step will "
            f"be skipped); got {type(output).__name__} at global step {step}."
        )
    if loss.numel() != 1:
        raise MisconfigurationException(
            f"training_step returned a loss of shape {tuple(loss.shape)}; it must be a scalar."
        )
    if not loss.requires_grad:
        raise MisconfigurationException(
            "training_step returned a loss that does not require grad (was it computed under no_grad, or detached?)."
        )


def raise_nonfinite(epoch: int, step: int, value: float | None = None) -> None:
    shown = f" ({value})" if value is not None else ""
    raise FloatingPointError(
        f"training_step returned a non-finite loss{shown} at epoch {epoch}, global step {step}; "
        "pass on_nonfinite_loss='skip' to skip such batches."
    )
