"""The seam between the captured step's bookkeeping and the device: a ``GraphBackend``.

``CapturedStep`` decides per batch whether to warm up, capture, replay or run eagerly; a backend does
those on a device. ``backend_for`` picks ``cuda.CudaGraphs`` for a CUDA device and refuses anything
else with a clear error (tests swap in a CPU fake here, whose "replay" re-runs the step). What the
backends share: the line a step waited on the device at (``HostRead``), found from a stack.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

if TYPE_CHECKING:
    from trainer.graphs.optimizers import LearningRates

T = TypeVar("T")

_TORCH = os.path.dirname(torch.__file__) + os.sep
_TRAINER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = tuple({sysconfig.get_paths()["stdlib"] + os.sep, os.path.dirname(os.__file__) + os.sep})


@dataclass(frozen=True)
class HostRead:
    """The first line where a step made the host wait for the device: it cannot be captured."""

    file: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" ({self.code})" if self.code else "")


@dataclass
class Watch:
    """Filled in while a backend watches a step: the first host read, if any."""

    found: HostRead | None = None


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

    def capture(self, fn: Callable[[], T], params: list[torch.Tensor]) -> tuple[Any, T]:
        """Record ``fn`` into a graph and run it once; returns (graph, ``fn``'s static result).

        ``params``: the parameters whose gradients the step writes (a CUDA graph has them recorded; a
        fake replay keeps them in the same tensors a real one would)."""
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


# ---- the line a step waited at ------------------------------------------------------------------------
def user_line(stack: list[traceback.FrameSummary]) -> HostRead | None:
    """The innermost frame of ``stack`` in the user's code (not torch's, this package's or the standard
    library's); else the innermost outside torch; else the innermost."""
    frames = [f for f in stack if f.filename and not f.filename.startswith("<")]
    if not frames:
        return None
    for keep in (_is_user, lambda path: not path.startswith(_TORCH), lambda path: True):
        chosen = [f for f in frames if keep(os.path.abspath(f.filename))]
        if chosen:
            frame = chosen[-1]
            code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
            return HostRead(frame.filename, frame.lineno or 0, code)
    return None  # pragma: no cover - the last filter keeps every frame


def _is_user(path: str) -> bool:
    return not path.startswith((_TORCH, _TRAINER, *_STDLIB)) and f"{os.sep}site-packages{os.sep}" not in path


def error_line(error: BaseException) -> HostRead | None:
    """The user's line an exception (or the one it interrupted, for an error raised while leaving a
    capture) was raised at."""
    seen: set[int] = set()
    found: HostRead | None = None
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        line = user_line(traceback.extract_tb(current.__traceback__))
        if line is not None and (found is None or _is_user(os.path.abspath(line.file))):
            found = line
        current = current.__context__
    return found


def first_error(error: BaseException) -> BaseException:
    """The error that started a chain (the one raised inside a capture, not the capture's end failing after it)."""
    seen = {id(error)}
    while error.__context__ is not None and id(error.__context__) not in seen:
        error = error.__context__
        seen.add(id(error))
    return error


def frames_here() -> list[traceback.FrameSummary]:
    """The caller's stack, outermost first."""
    return list(traceback.extract_stack())[:-1]


def iter_tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in a (nested) step output, in pytree order."""
    from torch.utils import _pytree as pytree

    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            yield leaf
