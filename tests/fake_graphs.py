"""A CPU stand-in for ``trainer.graphs.cuda.CudaGraphs``, so the captured step's bookkeeping runs in tests.

Its "capture" runs the step once (its Python runs, as at a real capture, and so does its arithmetic,
which a real capture then replays once); its "replay" runs the step again with the tape refilling
the captured run's static tensors instead of logging, and puts the new gradients into the captured
gradient tensors, which is what a CUDA replay leaves behind. Its host-read watch flags ``.item()``,
``bool()``, ``float()``, ``print`` and the like on a tensor from the user's code (a CPU tensor does
not wait, but a CUDA one would); the trainer's own CPU-only reads (the immediate non-finite check)
are left alone, as on a GPU they do not happen.

``use_fake_graphs(monkeypatch)`` makes ``Trainer(cuda_graph=True)`` accept the CPU and capture with it.
A step can tell it is being captured by ``capturing`` (to raise as a CUDA op that is illegal in a capture
would); ``device_lr=True`` gives the optimizer its learning rates as tensors, as on a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

import trainer.graphs.backend as backend
from trainer.graphs.lines import Watch, frames_here, user_line
from trainer.graphs.optimizers import DeviceLearningRates, HostLearningRates, LearningRates

T = TypeVar("T")
HOST_READS = {"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "__repr__", "__format__", "numpy"}
_TORCH = os.path.dirname(torch.__file__) + os.sep
_TRAINER = os.path.dirname(os.path.dirname(os.path.abspath(backend.__file__))) + os.sep


@dataclass
class FakeGraph:
    fn: Callable[[], Any]
    result: Any
    grads: list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class FakeGraphs:
    """Counts what it was asked to do (``calls``), so tests can check the order of warm-ups and captures."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    calls: list[str] = field(default_factory=list)
    device_lr: bool = False
    capturing: bool = False  # True while a capture runs the step
    replays_python = True

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> LearningRates:
        self.calls.append("prepare")
        return DeviceLearningRates(optimizer, self.device) if self.device_lr else HostLearningRates()

    def warm_up(self, fn: Callable[[], T]) -> T:
        self.calls.append("warm_up")
        return fn()

    @contextmanager
    def watch_host_reads(self) -> Iterator[Watch]:
        watch = Watch()
        with _HostReads(watch):
            yield watch

    def capture(self, fn: Callable[[], T], params: Sequence[torch.Tensor]) -> tuple[Any, T]:
        self.calls.append("capture")
        self.capturing = True
        try:
            result = fn()
        finally:
            self.capturing = False
        return FakeGraph(fn, result, [(p, p.grad) for p in params if p.grad is not None]), result

    def replay(self, graph: Any) -> None:
        self.calls.append("replay")
        result = graph.fn()
        for static, new in zip(_tensors(graph.result), _tensors(result)):
            if static is not new:
                static.detach().copy_(new.detach())
        for param, grad in graph.grads:
            if param.grad is not None and param.grad is not grad:
                grad.copy_(param.grad)
                param.grad = grad

    def release(self) -> None:
        self.calls.append("release")


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


class _HostReads(TorchFunctionMode):
    """Notes the first host read of a tensor made from outside torch and the trainer."""

    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in HOST_READS and self.watch.found is None:
            stack = frames_here()[:-1]  # without this frame
            outside = [f for f in stack if not os.path.abspath(f.filename).startswith(_TORCH)]
            if outside and not os.path.abspath(outside[-1].filename).startswith(_TRAINER):
                self.watch.found = user_line(stack)
        return func(*args, **(kwargs or {}))


def use_fake_graphs(monkeypatch: pytest.MonkeyPatch, device_lr: bool = False) -> list[FakeGraphs]:
    """``cuda_graph=True`` on the CPU, with a fake backend; returns the backends made (one per fit)."""
    made: list[FakeGraphs] = []

    def fake_backend(device: torch.device) -> FakeGraphs:
        made.append(FakeGraphs(device, device_lr=device_lr))
        return made[-1]

    monkeypatch.setattr(backend, "check_device", lambda device: None)
    monkeypatch.setattr(backend, "backend_for", fake_backend)
    return made
