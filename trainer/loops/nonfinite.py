"""The non-finite loss check of ``on_nonfinite_loss="raise"`` on an accelerator, without waiting on the device.

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

import torch

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
