"""A CPU stand-in for what ``trainer.graphs.cuda.CudaGraphs`` calls in ``torch.cuda``, with the state torch's C++
keeps, so the CUDA backend's capture, its failure and what the eager step meets afterwards run in tests.

What it reproduces, and from where (torch 2.13's sources):

- ``CUDAGraph`` (aten/src/ATen/cuda/CUDAGraph.cpp): ``capture_begin`` begins the caching allocator's
  capture to the graph's pool (a new pool, or one more use of a shared one) and then the stream's
  capture; ``capture_end`` ends the stream's capture first, raising there when the capture was
  invalidated, and only then ends the allocator's capture and marks the capture ended; ``reset``
  gives the pool's use back only for a capture that ended; ``pool()`` raises for one that did not.
- The caching allocator (c10/cuda/CUDACachingAllocator.cpp): ``captures_underway``;
  ``empty_cache`` asserts it is empty; an allocation that does not fit releases the cached blocks and
  retries only while it is empty (otherwise: out of memory); ``endAllocateToPool`` raises "not
  currently recording" for a pool it is not capturing to; ``releasePool`` counts a pool's uses down.
- The generators (CUDAGeneratorImpl.cpp): ``design="per-generator"`` (torch before 2.13) keeps one
  capture flag per generator, set by ``capture_begin`` for the default generator and the registered
  ones and cleared only by a ``capture_end`` that gets that far, so an eager draw after a failed
  capture raises "Offset increment outside graph capture encountered unexpectedly";
  ``design="per-capture"`` (2.13) keeps a state per capture, which ``reset`` removes.
- A synchronizing call while capturing raises and invalidates the capture (``sync``); ``invalidate``
  spoils it without raising (the step's error surfaces at ``capture_end``).

``graphsafe=False`` gives generators without ``clone_state``/``graphsafe_set_state`` (torch 2.2);
``pool_calls=False`` takes ``torch._C._cuda_endAllocateToPool``/``_cuda_releasePool`` away.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

Pool = tuple[int, int]


@dataclass
class Capture:
    id: int
    invalidated: bool = False


@dataclass
class Stream:
    name: str
    capture: Capture | None = None

    def wait_stream(self, other: Stream) -> None:
        pass


@dataclass
class PrivatePool:
    uses: int = 1
    live: int = 0  # bytes of blocks in use


@dataclass
class Block:
    pool: Pool | None  # None: the default pool
    nbytes: int


class Allocator:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.captures_underway: list[tuple[Pool, Callable[[Stream], bool]]] = []
        self.pools: dict[Pool, PrivatePool] = {}
        self.in_use = self.cached = 0

    def begin(self, pool: Pool, allocates: Callable[[Stream], bool]) -> None:
        if pool in self.pools:
            assert self.pools[pool].uses > 0, "INTERNAL ASSERT FAILED: use_count > 0"
            self.pools[pool].uses += 1
        else:
            self.pools[pool] = PrivatePool()
        if any(p == pool for p, _ in self.captures_underway):
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        self.captures_underway.append((pool, allocates))

    def end(self, pool: Pool) -> None:
        for i, (p, _) in enumerate(self.captures_underway):
            if p == pool:
                del self.captures_underway[i]
                return
        raise RuntimeError("endAllocatePool: not currently recording to mempool_id")

    def release(self, pool: Pool) -> None:
        self.pools[pool].uses -= 1
        if self.pools[pool].uses < 0:
            raise RuntimeError("uc >= 0 INTERNAL ASSERT FAILED at c10/cuda/CUDACachingAllocator.cpp")

    def empty_cache(self) -> None:
        if self.captures_underway:
            raise RuntimeError("captures_underway.empty() INTERNAL ASSERT FAILED at c10/cuda/CUDACachingAllocator.cpp")
        self.cached = 0
        self.pools = {k: p for k, p in self.pools.items() if p.uses > 0 or p.live > 0}  # freeable pools go

    def malloc(self, nbytes: int, stream: Stream) -> Block:
        for pool, allocates in self.captures_underway:
            if allocates(stream):
                self.pools[pool].live += nbytes
                return Block(pool, nbytes)
        if self.cached >= nbytes:
            self.cached -= nbytes
        elif self.in_use + self.cached + nbytes > self.limit:
            if self.captures_underway or self.in_use + nbytes > self.limit:  # no release while a capture is underway
                raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes} bytes")
            self.cached = 0  # release_cached_blocks, then the retry fits
        self.in_use += nbytes
        return Block(None, nbytes)

    def free(self, block: Block) -> None:
        if block.pool is None:
            self.in_use -= block.nbytes
            self.cached += block.nbytes
        else:
            self.pools[block.pool].live -= block.nbytes


@dataclass
class GeneratorState:
    fake: FakeCuda
    offset: int = 0
    capturing: bool = False  # per-generator design
    captures: dict[int, int] = field(default_factory=dict)  # per-capture design: capture id -> offset inside it

    def increase(self, n: int) -> None:
        capture = self.fake.current.capture
        if capture is None:
            if self.capturing:
                raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")
            self.offset += n
        elif self.fake.design == "per-generator":
            if not self.capturing:
                raise RuntimeError("Attempt to increase offset for a CUDA generator not in capture mode.")
        elif capture.id in self.captures or self is self.fake.generator.state:  # the default one lazily
            self.captures[capture.id] = self.captures.get(capture.id, 0) + n
        else:
            raise RuntimeError("Attempt to increase offset for a CUDA generator not in capture mode.")


class Generator:
    """A CUDA generator of torch 2.2: no graph-safe state calls."""

    def __init__(self, fake: FakeCuda, state: GeneratorState | None = None) -> None:
        self.fake, self.device = fake, torch.device("cuda", 0)
        self.state = state if state is not None else GeneratorState(fake)


class GraphsafeGenerator(Generator):
    def clone_state(self) -> GraphsafeGenerator:
        return GraphsafeGenerator(self.fake, GeneratorState(self.fake, self.state.offset))

    def graphsafe_set_state(self, other: Generator) -> None:
        self.state = other.state


class Graph:
    """``torch.cuda.CUDAGraph``, as CUDAGraph.cpp orders its steps."""

    fake: FakeCuda

    def __init__(self, keep_graph: bool = False) -> None:
        self.stream: Stream | None = None
        self._pool: Pool = (0, 0)
        self.capture_id = 0
        self.ended = False
        self.states: dict[int, GeneratorState] = {}

    def register_generator_state(self, generator: Generator) -> None:
        self.states[id(generator.state)] = generator.state

    def capture_begin(self, pool: Pool | None = None, capture_error_mode: str = "global", **_: Any) -> None:
        fake, stream = self.fake, self.fake.current
        if stream is fake.default_stream:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream.")
        self.stream, self._pool = stream, pool or (next(fake.ids), 0)
        capture = Capture(next(fake.ids))
        fake.allocator.begin(self._pool, lambda s: s.capture is capture)
        if fake.design == "per-generator":
            self.register_generator_state(fake.generator)
            for state in self.states.values():
                state.capturing = True
        else:
            for state in self.states.values():
                state.captures[capture.id] = 0
        stream.capture, self.capture_id = capture, capture.id

    def capture_end(self) -> None:
        if self.fake.current is not self.stream or self.stream is None:
            raise RuntimeError("Capture must end on the same stream it began on.")
        capture, self.stream.capture = self.stream.capture, None
        if capture is None:
            raise RuntimeError("CUDA error: operation not permitted when stream is not capturing")
        if capture.invalidated:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        self.fake.allocator.end(self._pool)
        for state in self.states.values():
            state.capturing = False
        self.ended = True

    def replay(self) -> None:
        if not self.ended:
            raise RuntimeError("Called CUDAGraph::replay without a preceding successful capture.")

    def reset(self) -> None:
        for state in self.states.values():
            state.captures.pop(self.capture_id, None)
        self.states = {}
        if self.ended:
            self.fake.allocator.release(self._pool)
            self.ended = False

    def pool(self) -> Pool:
        if not self.ended:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self._pool


class FakeCuda:
    """One fake CUDA device: its streams, allocator and default generator; ``install`` puts it in torch.cuda."""

    def __init__(
        self, design: str = "per-capture", graphsafe: bool = True, pool_calls: bool = True, limit: int = 1000
    ) -> None:
        self.design, self.pool_calls = design, pool_calls
        self.allocator = Allocator(limit)
        self.default_stream = self.current = Stream("default")
        self.generator = (GraphsafeGenerator if graphsafe else Generator)(self)
        self.ids = itertools.count(1)
        self.sync_mode = 0

    # ---- what a step does on the device
    def alloc(self, nbytes: int) -> Block:
        return self.allocator.malloc(nbytes, self.current)

    def dropout(self, generator: Generator | None = None) -> None:
        (generator or self.generator).state.increase(4)

    def sync(self) -> None:
        if self.current.capture is not None:
            self.current.capture.invalidated = True
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    def invalidate(self) -> None:
        assert self.current.capture is not None
        self.current.capture.invalidated = True

    # ---- torch.cuda
    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fake = self
        graph = type("FakeCUDAGraph", (Graph,), {"fake": fake})

        def set_stream(stream: Stream) -> None:
            fake.current = stream

        @contextlib.contextmanager
        def on(stream: Stream) -> Iterator[None]:
            before, fake.current = fake.current, stream
            try:
                yield
            finally:
                fake.current = before

        def set_sync_debug_mode(mode: Any) -> None:
            fake.sync_mode = mode

        for name, value in {
            "CUDAGraph": graph,
            "Stream": lambda device=None: Stream("side"),
            "graph_pool_handle": lambda: (0, next(fake.ids)),
            "current_stream": lambda device=None: fake.current,
            "set_stream": set_stream,
            "stream": on,
            "device": lambda device=None: contextlib.nullcontext(),
            "current_device": lambda: 0,
            "synchronize": lambda device=None: None,
            "empty_cache": fake.allocator.empty_cache,
            "default_generators": (fake.generator,),
            "is_current_stream_capturing": lambda: fake.current.capture is not None,
            "get_sync_debug_mode": lambda: fake.sync_mode,
            "set_sync_debug_mode": set_sync_debug_mode,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value, raising=False)
        monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
        calls = {"_cuda_endAllocateToPool": fake.allocator.end, "_cuda_releasePool": fake.allocator.release}
        for name, call in calls.items():
            if fake.pool_calls:
                monkeypatch.setattr(torch._C, name, lambda device, pool, call=call: call(pool), raising=False)
            else:
                monkeypatch.delattr(torch._C, name, raising=False)
