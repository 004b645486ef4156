"""The seam between the captured step's bookkeeping and the device: a ``GraphBackend``.

``CapturedStep`` decides per batch whether to warm up, capture, replay or run eagerly; a backend does
those on a device. ``backend_for`` picks ``cuda.CudaGraphs`` for a CUDA device and refuses anything
else with a clear error (tests swap in a CPU fake here, whose "replay" re-runs the step).

A capture that fails raises, and the backend has then put the process back as it was before the
capture (the step runs eagerly next); where it cannot (the running torch lacks the calls that undo
what a failed capture leaves behind), it raises ``CaptureLeftUnsafe`` instead, and the fit ends with
a clear error rather than crashing later in the eager step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

if TYPE_CHECKING:
    from trainer.graphs.lines import Watch
    from trainer.graphs.optimizers import LearningRates

T = TypeVar("T")


class GraphBackend(Protocol):
    """What ``CapturedStep`` asks of a device. ``Graph`` objects are opaque to it."""

    device: torch.device
    replays_python: bool  # True for a fake whose replay re-runs the step (the tape then refills)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> LearningRates:
        """Make ``optimizer`` capturable; returns how its learning rates reach the captured step."""
        ...

    def warm_up(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` eagerly where a capture will later run it (a side stream on CUDA)."""
        ...

    def watch_host_reads(self) -> AbstractContextManager[Watch]:
        """While open, note the first line that waits on the device (``.item()``, ``print(loss)``, ``if loss:``)."""
        ...

    def capture(
        self, fn: Callable[[], T], params: Sequence[torch.Tensor], generators: Sequence[torch.Generator] = ()
    ) -> tuple[Any, T]:
        """Record ``fn`` into a graph and run it once; returns (graph, ``fn``'s static result).

        ``params``: the parameters whose gradients the step writes (a CUDA graph has them recorded; a
        fake replay keeps them in the same tensors a real one would). ``generators``: the user's own random
        generators on the device, registered with the graph so a replay draws afresh from them.
        Raises what made the capture fail with the process put back, or ``CaptureLeftUnsafe``."""
        ...

    def replay(self, graph: Any) -> None:
        """Run the captured step again, writing into the same static tensors."""
        ...

    def release(self) -> None:
        """Drop every graph (end of fit, or the training set-up changed)."""
        ...


def check_device(device: torch.device) -> None:
    """Refuse anything but a CUDA device, naming what was given (at ``Trainer(...)``, before any work)."""
    if device.type != "cuda":
        raise ValueError(
            f"cuda_graph=True captures the training step as a CUDA graph, but this Trainer runs on {device}. "
            "Train on a CUDA GPU (accelerator='cuda', devices=1), or leave cuda_graph=False."
        )


def backend_for(device: torch.device) -> GraphBackend:
    """The backend that captures steps on ``device`` (built at fit set-up)."""
    check_device(device)
    from trainer.graphs.cuda import CudaGraphs

    return CudaGraphs(device)
