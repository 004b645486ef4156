"""Logged values for display without waiting for the device.

Reading a CUDA tensor (``float(t)``) waits until every queued kernel has run: a progress bar that did
that at each refresh would stall the training step it draws. Here each refresh only *queues* a copy
into pinned host memory (``non_blocking=True``) behind an event, and shows the newest values whose
copy has completed (``Event.query()``, which never waits). On the CPU reading is free, so values are
read as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch


class _Event(Protocol):
    def query(self) -> bool: ...


def _cuda_event(device: torch.device) -> _Event:
    """An event recorded on ``device``'s current stream, after the copies queued there."""
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


class HostValues:
    """The newest host copies of logged values; ``refresh`` queues fresh copies and never synchronizes."""

    def __init__(self, make_event: Callable[[torch.device], _Event] = _cuda_event) -> None:
        self._make_event = make_event
        self._pending: list[tuple[_Event, torch.device, dict[str, torch.Tensor]]] = []  # oldest first
        self.values: dict[str, float] = {}

    def refresh(self, values: Mapping[str, Any]) -> dict[str, float]:
        """Queue copies of ``values``; return the newest ones already on the host (by name)."""
        on_device: dict[torch.device, dict[str, torch.Tensor]] = {}
        for name, value in values.items():
            if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                on_device.setdefault(value.device, {})[name] = value
            else:  # a number, or a tensor on the CPU (reading it costs nothing) or another device
                self.values[name] = float(value)
        for device, tensors in on_device.items():
            copies = {k: v.detach().to("cpu", non_blocking=True) for k, v in tensors.items()}
            self._pending.append((self._make_event(device), device, copies))
        self._take_completed()
        return {name: self.values[name] for name in values if name in self.values}

    def _take_completed(self) -> None:
        """Values of every copy that has landed, in the order they were queued; the rest stay pending.

        A stream runs its copies in order, so once a device's newest landed copy is known, its older
        ones have landed too (their events need not be asked again).
        """
        landed_upto: dict[torch.device, int] = {}
        for i in range(len(self._pending) - 1, -1, -1):
            event, device, _ = self._pending[i]
            if device not in landed_upto and event.query():
                landed_upto[device] = i
        if not landed_upto:
            return
        still = []
        for i, (event, device, copies) in enumerate(self._pending):
            if i <= landed_upto.get(device, -1):
                self.values.update({k: float(v) for k, v in copies.items()})
            else:
                still.append((event, device, copies))
        self._pending = still

    def clear(self) -> None:
        self._pending.clear()
        self.values.clear()
