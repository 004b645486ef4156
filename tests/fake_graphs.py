"""A CPU stand-in for ``trainer.graphs.cuda.CudaGraphs``, so the captured step's bookkeeping runs in tests.

Its "capture" runs the step once (its Python runs, as at a real capture, and so does its arithmetic,
which a real capture then replays once); its "replay" runs the step again with the tape refilling
the captured run's static tensors instead of logging, and puts the new gradients into the captured
gradient tensors, which is what a CUDA replay leaves behind. Its host-read watch flags ``.item()``,
``bool()``, ``float()``, ``print`` and the like on a tensor from the user's code (a CPU tensor does
not wait, but a CUDA one would); the trainer's own CPU-only reads (the immediate non-finite check)
are left alone, as on a GPU they do not happen.

What a real capture does that the fake reproduces: a host read in the user's code while capturing
raises (as CUDA refuses it); optimizer state that the captured step creates is created afresh, zeroed,
at every replay (its allocation and fill are in the graph); the gradients and outputs a capture
makes live in the graph's pool, which ``pool_bytes()`` counts while anything holds them.

``use_fake_graphs(monkeypatch)`` makes ``Trainer(cuda_graph=True)`` accept the CPU and capture with it.
A step can tell it is being captured by ``capturing`` (to raise as a CUDA op that is illegal in a capture
would); ``device_lr=True`` gives the optimizer its learning rates as tensors, as on a GPU; ``unsafe=True``
makes a failed capture one the backend cannot undo (``CaptureLeftUnsafe``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

import trainer.graphs.backend as backend
from trainer.graphs.lines import CaptureLeftUnsafe, Watch, frames_here, user_line
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
    made: list[dict[str, Any]]  # optimizer state the capture created: a replay creates it again


def _tensors_of(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


@dataclass
class FakeGraphs:
    """Counts what it was asked to do (``calls``), so tests can check the order of warm-ups and captures."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    calls: list[str] = field(default_factory=list)
    device_lr: bool = False
    unsafe: bool = False
    capturing: bool = False  # True while a capture runs the step
    generators: list[list[torch.Generator]] = field(default_factory=list)  # handed to each capture
    pool: list[weakref.ref[torch.Tensor]] = field(default_factory=list)  # what captures allocated
    optimizer: torch.optim.Optimizer | None = None
    replays_python = True

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> LearningRates:
        self.calls.append("prepare")
        self.optimizer = optimizer
        return DeviceLearningRates(optimizer, self.device) if self.device_lr else HostLearningRates()

    def pool_bytes(self) -> int:
        """Bytes of the tensors captures allocated that something still holds."""
        alive = [ref() for ref in self.pool]
        return sum(t.nelement() * t.element_size() for t in alive if t is not None)

    def warm_up(self, fn: Callable[[], T]) -> T:
        self.calls.append("warm_up")
        return fn()

    @contextmanager
    def watch_host_reads(self) -> Iterator[Watch]:
        watch = Watch()
        with _HostReads(watch):
            yield watch

    def capture(
        self, fn: Callable[[], T], params: Sequence[torch.Tensor], generators: Sequence[torch.Generator] = ()
    ) -> tuple[Any, T]:
        self.calls.append("capture")
        self.generators.append(list(generators))
        state = self.optimizer.state if self.optimizer is not None else {}
        before = {id(p) for p, s in state.items() if s}
        self.capturing = True
        try:
            with _HostReads(Watch(), refuse=True):
                result = fn()
        except Exception as error:
            if self.unsafe:
                raise CaptureLeftUnsafe("this torch cannot undo what the failed capture left") from error
            raise
        finally:
            self.capturing = False
        grads = [(p, p.grad) for p in params if p.grad is not None]
        self.pool += [weakref.ref(t) for t in [*(g for _, g in grads), *_tensors_of(result)]]
        made = [s for p, s in state.items() if s and id(p) not in before]
        return FakeGraph(fn, result, grads, made), result

    def replay(self, graph: Any) -> None:
        self.calls.append("replay")
        for state in graph.made:  # a replay runs the captured zeros of state made inside the capture again
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    value.zero_()
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
    """Notes the first host read of a tensor made from outside torch and the trainer (``refuse``: raises, as a
    read while capturing does on a GPU)."""

    def __init__(self, watch: Watch, refuse: bool = False) -> None:
        super().__init__()
        self.watch, self.refuse = watch, refuse

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__name__", "") in HOST_READS and self.watch.found is None:
            stack = frames_here()[:-1]  # without this frame
            outside = [f for f in stack if not os.path.abspath(f.filename).startswith(_TORCH)]
            if outside and not os.path.abspath(outside[-1].filename).startswith(_TRAINER):
                self.watch.found = user_line(stack)
                if self.refuse:
                    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return func(*args, **(kwargs or {}))


def use_fake_graphs(monkeypatch: pytest.MonkeyPatch, device_lr: bool = False, unsafe: bool = False) -> list[FakeGraphs]:
    """``cuda_graph=True`` on the CPU, with a fake backend; returns the backends made (one per fit)."""
    made: list[FakeGraphs] = []

    def fake_backend(device: torch.device) -> FakeGraphs:
        made.append(FakeGraphs(device, device_lr=device_lr, unsafe=unsafe))
        return made[-1]

    monkeypatch.setattr(backend, "check_device", lambda device: None)
    monkeypatch.setattr(backend, "backend_for", fake_backend)
    return made
