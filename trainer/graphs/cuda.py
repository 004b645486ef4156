"""The CUDA backend: PyTorch's whole-network capture, as its CUDA graphs guide writes it.

Warm-up steps run on a side stream (lazy initialisations then bind to the stream the capture uses);
every graph is captured on that stream into one private memory pool, in ``thread_local`` error mode
so a DataLoader's pin-memory thread allocating host memory does not invalidate the capture. One
pool for every graph is safe here because the graphs hand each other nothing but the gradients, which
the window-start graph allocates and which stay alive, and because ``CapturedStep`` clones a graph's
outputs right after its replay, before any other graph runs. A host read is found with CUDA's sync
debug mode in "warn" mode: the step still runs to its end (nothing is half done), and the warning's
stack names the line.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

from trainer.graphs.lines import Watch, frames_here, user_line
from trainer.graphs.optimizers import DeviceLearningRates, LearningRates, make_capturable

T = TypeVar("T")
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's words in sync debug mode


class CudaGraphs:
    """Warm-up on a side stream, capture into a shared private pool, replay on the current stream."""

    replays_python = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        with torch.cuda.device(device):  # a pool and a capture belong to the current device
            self.stream = torch.cuda.Stream(device)
            self.pool = torch.cuda.graph_pool_handle()
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> LearningRates:
        make_capturable(optimizer)
        return DeviceLearningRates(optimizer, self.device)

    def warm_up(self, fn: Callable[[], T]) -> T:
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            result = fn()
        current.wait_stream(self.stream)
        return result

    @contextlib.contextmanager
    def watch_host_reads(self) -> Iterator[Watch]:
        watch = Watch()
        thread = threading.get_ident()
        show = warnings.showwarning

        def note(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if SYNC_WARNING not in str(message) or threading.get_ident() != thread:
                show(message, category, filename, lineno, file, line)
            elif watch.found is None:
                watch.found = user_line(frames_here()[:-1])  # without this hook's own frame

        before = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings():
            warnings.filterwarnings("always", message=SYNC_WARNING)
            warnings.showwarning = note
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield watch
            finally:
                torch.cuda.set_sync_debug_mode(before)

    def capture(self, fn: Callable[[], T], params: Sequence[torch.Tensor]) -> tuple[Any, T]:
        graph = torch.cuda.CUDAGraph()
        before = torch.cuda.current_stream(self.device)
        try:
            with (
                torch.cuda.device(self.device),
                torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"),
            ):
                result = fn()
        except BaseException:
            torch.cuda.set_stream(before)  # a failing capture_end leaves the capture stream current
            raise
        self.graphs.append(graph)
        graph.replay()  # a capture records the step; this runs it
        return graph, result

    def replay(self, graph: Any) -> None:
        graph.replay()

    def release(self) -> None:
        for graph in self.graphs:
            graph.reset()
        self.graphs = []
        with torch.cuda.device(self.device):
            self.pool = torch.cuda.graph_pool_handle()  # the next captures start a pool of their own
