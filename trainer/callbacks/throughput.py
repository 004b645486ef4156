"""``Throughput``: rolling rates over the last ``window_size`` updates, and ``measure_flops``; Lightning's metric
names (``device/samples_per_sec``, ``device/mfu``, ...). ``ThroughputMonitor`` feeds it from the loops."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode


class _Rising(deque):  # type: ignore[type-arg]
    """A window of running totals that must rise: a counter that goes back is the caller's bug, said at once."""

    def append(self, value: float) -> None:
        if self and value < self[-1]:
            raise ValueError(f"Expected the value to increase, last: {self[-1]}, current: {value}")
        super().append(value)


class Throughput:
    """Totals (``time``, ``batches``, ``samples``, ``lengths``) and, once ``window_size`` updates are in, rates per
    device (``device<sep>batches_per_sec``, ...) and, with ``world_size`` above 1, for all devices. FLOPs (each
    update's ``flops``, per device) give ``device<sep>flops_per_sec``; with ``available_flops``, ``device<sep>mfu``."""

    def __init__(
        self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100, separator: str = "/"
    ) -> None:
        if world_size < 1:
            raise ValueError(f"Throughput(world_size={world_size!r}): needs at least 1 device.")
        if window_size < 2:
            raise ValueError(f"Throughput(window_size={window_size!r}): a rate needs a window of at least 2 updates.")
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self._time = _Rising(maxlen=window_size)
        self._batches = _Rising(maxlen=window_size)
        self._samples = _Rising(maxlen=window_size)
        self._lengths = _Rising(maxlen=window_size)
        self._flops: deque[float] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: float | None = None
    ) -> None:
        """Record the running totals (``time`` in seconds since the start); ``flops`` is this update's own."""
        if samples < batches:
            raise ValueError(f"Expected samples ({samples}) to be greater or equal than batches ({batches})")
        self._time.append(time)
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"Expected lengths ({lengths}) to be greater or equal than samples ({samples})")
            self._lengths.append(lengths)
        if flops is not None:
            self._flops.append(flops * self.world_size)

    def compute(self) -> dict[str, int | float]:
        sep, everyone = self.separator, self.world_size > 1
        metrics: dict[str, int | float] = {"time": self._time[-1], "batches": self._batches[-1]}
        metrics["samples"] = self._samples[-1]
        if self._lengths:
            metrics["lengths"] = self._lengths[-1]
        elapsed = self._time[-1] - self._time[0]
        if len(self._time) == self._time.maxlen:  # rates once the window is full
            windows = [("batches", self._batches), ("samples", self._samples)]
            if len(self._lengths) == self._lengths.maxlen:
                windows.append(("items", self._lengths))
            for name, window in windows:
                per_device = (window[-1] - window[0]) / elapsed
                metrics[f"device{sep}{name}_per_sec"] = per_device
                if everyone:
                    metrics[f"{name}_per_sec"] = per_device * self.world_size
        if len(self._flops) == self._flops.maxlen:
            flops_per_sec = (sum(self._flops) - self._flops[0]) / elapsed
            if everyone:
                metrics["flops_per_sec"] = flops_per_sec
            metrics[f"device{sep}flops_per_sec"] = flops_per_sec / self.world_size
            if self.available_flops:
                metrics[f"device{sep}mfu"] = flops_per_sec / self.world_size / self.available_flops
        return metrics

    def reset(self) -> None:
        for window in (self._time, self._batches, self._samples, self._lengths, self._flops):
            window.clear()


def measure_flops(
    model: torch.nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """FLOPs of ``forward_fn()`` (and, with ``loss_fn``, of the loss and its backward), counted by
    ``torch.utils.flop_counter``; build the model on the "meta" device to count without computing."""
    counter = FlopCounterMode(display=False)
    with counter:
        out = forward_fn()
        if loss_fn is not None:
            loss_fn(out).backward()
    return int(counter.get_total_flops())
