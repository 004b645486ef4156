"""The CUDA backend: PyTorch's whole-network capture, as its CUDA graphs guide writes it.

Warm-up steps run on a side stream (lazy initialisations then bind to the stream the capture uses);
every graph is captured on that stream into one private memory pool, in ``thread_local`` error mode
so a DataLoader's pin-memory thread allocating host memory does not invalidate the capture. One
pool for every graph is safe here because the graphs hand each other nothing but the gradients, which
the window-start graph allocates and which stay alive, and because ``CapturedStep`` clones a graph's
outputs right after its replay, before any other graph runs. The user's own CUDA generators are
registered with each graph (torch registers its default one itself), so a replay draws afresh.

A host read is found with CUDA's sync debug mode in "warn" mode: the step still runs to its end
(nothing is half done), and the warning's stack names the line. The warning is taken from the
watching thread and from the threads torch starts itself: autograd runs the backward pass of CUDA
tensors, backward hooks included, on a device thread of its own.

A capture that fails (``capture_end`` raising at ``cudaStreamEndCapture``, or the step raising while
captured) leaves torch's caching allocator allocating to the graph's pool, which no ``reset()``
undoes: the next ``torch.cuda.empty_cache()``, or an allocation retried under memory pressure, then
fails torch's internal assert on captures underway. And torch before 2.13 leaves the default
generator (and any registered one) in capture mode, so the next eager dropout raises "Offset
increment outside graph capture". ``end_failed_capture`` ends the allocator's capture with torch's
own ``_cuda_endAllocateToPool`` and gives back the pool's use with ``_cuda_releasePool`` (what
``torch.cuda.use_mem_pool`` and Inductor's cudagraph trees call), resets the graph, and puts each
generator's pre-capture state back with ``graphsafe_set_state``. Where the running torch lacks one
of those calls, it raises ``CaptureLeftUnsafe``: the fit ends there with a clear error.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

from trainer.graphs.lines import CaptureLeftUnsafe, Watch, frames_here, user_line
from trainer.graphs.optimizers import DeviceLearningRates, LearningRates, make_capturable

T = TypeVar("T")
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's words in sync debug mode
END_ALLOCATING = "_cuda_endAllocateToPool"  # torch._C: the allocator's capture to a pool ends
RELEASE_POOL = "_cuda_releasePool"  # torch._C: one use of a pool given back (as CUDAGraph::reset does)
_TORCH_THREAD = getattr(threading, "_DummyThread", ())  # a thread Python did not start: one of torch's own


class CudaGraphs:
    """Warm-up on a side stream, capture into a shared private pool, replay on the current stream."""

    replays_python = False

    def __init__(self, device: torch.device) -> None:
        self.device = device
        with torch.cuda.device(device):  # a pool and a capture belong to the current device
            self.index = torch.cuda.current_device()
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

    def watch_host_reads(self) -> contextlib.AbstractContextManager[Watch]:
        return watch_syncs()

    def capture(
        self, fn: Callable[[], T], params: Sequence[torch.Tensor], generators: Sequence[torch.Generator] = ()
    ) -> tuple[Any, T]:
        graph = torch.cuda.CUDAGraph()
        default = torch.cuda.default_generators[self.index]
        generators = [generator for generator in generators if generator is not default]
        drawn = [default, *generators]
        saved = [(generator, _cloned(generator)) for generator in drawn]
        with torch.cuda.device(self.device):
            for generator in generators:
                with warnings.catch_warnings():  # a no-op that warns where torch registers generators itself
                    warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning))
                    graph.register_generator_state(generator)
            torch.cuda.synchronize(self.device)  # as torch.cuda.graph: the pool gets what the cache held
            torch.cuda.empty_cache()
            before = torch.cuda.current_stream(self.device)
            torch.cuda.set_stream(self.stream)
            began = False
            try:
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                began = True
                result = fn()
                torch.cuda.set_stream(self.stream)  # a capture ends on the stream it began on
                graph.capture_end()
            except BaseException as error:
                torch.cuda.set_stream(self.stream)  # where the capture began (the step may have left another)
                problems = end_failed_capture(graph, self.index, self.pool, began) + put_back(saved)
                if problems:
                    raise CaptureLeftUnsafe("; ".join(problems)) from error
                raise
            finally:
                torch.cuda.set_stream(before)
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


def end_failed_capture(graph: Any, device: int, pool: Any, began: bool) -> list[str]:
    """Undo what a capture that raised left in torch (the current stream being the capture's); returns what
    the running torch cannot undo. ``began``: ``capture_begin`` returned (it began allocating to ``pool``)."""
    if torch.cuda.is_current_stream_capturing():  # the step raised: its capture is still open
        with contextlib.suppress(Exception):  # ends it; its error is the step's, raised already
            graph.capture_end()
    end, release = getattr(torch._C, END_ALLOCATING, None), getattr(torch._C, RELEASE_POOL, None)
    if end is None or release is None:
        missing = f"torch._C.{END_ALLOCATING}/{RELEASE_POOL}"
        return [f"torch {torch.__version__} has no {missing} to end the caching allocator's capture"]
    try:
        end(device, pool)  # still allocating to the pool: capture_end raised before it got there
        still_allocating = True
    except RuntimeError:  # "endAllocatePool: not currently recording to mempool_id": capture_end ended it
        still_allocating = False
    try:
        graph.pool()  # raises unless capture_end marked the capture ended: then reset() gives the pool back
        ended = True
    except RuntimeError:
        ended = False
    if still_allocating or (began and not ended):
        release(device, pool)  # the use capture_begin took, which reset() gives back only after a capture ended
    graph.reset()
    return []


def put_back(saved: list[tuple[torch.Generator, torch.Generator | None]]) -> list[str]:
    """Each generator's state as it was before the capture (torch before 2.13 leaves it in capture mode);
    returns what the running torch cannot put back."""
    problems = []
    for generator, state in saved:
        if state is None:
            problems.append(
                f"torch {torch.__version__} has no Generator.graphsafe_set_state to take the generator of "
                f"{generator.device} out of capture mode"
            )
        else:
            generator.graphsafe_set_state(state)
    return problems


def _cloned(generator: torch.Generator) -> torch.Generator | None:
    """A copy of ``generator``'s state (its seed and offset; never in capture mode), or None before torch 2.3."""
    if not hasattr(generator, "clone_state") or not hasattr(generator, "graphsafe_set_state"):
        return None
    return generator.clone_state()


@contextlib.contextmanager
def watch_syncs() -> Iterator[Watch]:
    """While open: the first line that made the host wait for the device, on the watching thread or on one of
    torch's own (a backward hook); in sync debug mode "warn", so the step still runs to its end."""
    watch = Watch()
    watching = threading.get_ident()
    show = warnings.showwarning

    def note(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        in_step = threading.get_ident() == watching or isinstance(threading.current_thread(), _TORCH_THREAD)
        if SYNC_WARNING not in str(message) or not in_step:
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
