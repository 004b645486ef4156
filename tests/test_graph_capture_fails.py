"""A capture that fails, on the CPU: the CUDA backend (``trainer.graphs.cuda``) against a fake of what torch's C++
keeps (``tests/fake_cuda.py``): the allocator's capture to the graph's pool, the generators' capture state, the
stream. After a failed capture the eager step must run on: 50 steps with dropout, ``empty_cache()`` after each,
and an allocation that fits only once the cache is released. Where the running torch cannot be put back, the
backend says so (``CaptureLeftUnsafe``) and the fit ends with an error naming the line and ``cuda_graph=False``.
``tests/test_cuda_graph_safety.py`` runs the same on a GPU."""

from __future__ import annotations

import _thread
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.fake_cuda import FakeCuda
from trainer.graphs.cuda import SYNC_WARNING, CudaGraphs, watch_syncs
from trainer.graphs.lines import CaptureLeftUnsafe

DESIGNS = ["per-generator", "per-capture"]  # torch before 2.13, torch 2.13


def backend(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[FakeCuda, CudaGraphs]:
    fake = FakeCuda(**kwargs)
    fake.install(monkeypatch)
    return fake, CudaGraphs(torch.device("cuda", 0))


def step(fake: FakeCuda, then: Callable[[], None] = lambda: None) -> int:
    """A step's device work: a dropout draw, activations allocated and freed, then ``then``."""
    fake.dropout()
    block = fake.alloc(100)
    then()
    fake.allocator.free(block)
    return 1


def eager_steps_run_on(fake: FakeCuda, steps: int = 50) -> None:
    for _ in range(steps):
        step(fake)
        torch.cuda.empty_cache()  # trainer.utilities.memory, the batch-size finder, a user's callback
    held = fake.alloc(600)  # cached afterwards
    fake.allocator.free(held)
    fake.allocator.free(fake.alloc(700))  # fits only once the 600 cached are released


def fails_in_the_step(fake: FakeCuda) -> Callable[[], int]:
    return lambda: step(fake, fake.sync)  # e.g. .item(): raises, and spoils the capture


def fails_at_capture_end(fake: FakeCuda) -> Callable[[], int]:
    return lambda: step(fake, fake.invalidate)  # capture_end raises at cudaStreamEndCapture


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("failing", [fails_in_the_step, fails_at_capture_end])
def test_after_a_failed_capture_the_eager_step_runs_on(
    monkeypatch: pytest.MonkeyPatch, design: str, failing: Callable[[FakeCuda], Callable[[], int]]
) -> None:
    fake, graphs = backend(monkeypatch, design=design)
    graphs.capture(lambda: step(fake), [])  # another kind's graph: live, sharing the pool
    with pytest.raises(RuntimeError, match=r"operation (not permitted|failed due to a previous error)"):
        graphs.capture(failing(fake), [])
    assert fake.allocator.captures_underway == [] and fake.current is fake.default_stream
    eager_steps_run_on(fake)
    graphs.release()  # the fall-back drops every graph
    assert [pool.uses for pool in fake.allocator.pools.values()] in ([0], [])  # every use given back
    eager_steps_run_on(fake)


@pytest.mark.parametrize("design", DESIGNS)
def test_the_users_generators_are_registered_and_put_back(monkeypatch: pytest.MonkeyPatch, design: str) -> None:
    fake, graphs = backend(monkeypatch, design=design)
    own = type(fake.generator)(fake)
    graphs.capture(lambda: fake.dropout(own), [], [own])  # unregistered, drawing from it inside raises
    with pytest.raises(RuntimeError):
        graphs.capture(lambda: step(fake, lambda: (fake.dropout(own), fake.sync())), [], [own])
    fake.dropout(own)  # eager draws from it work again
    fake.dropout()


def test_a_torch_that_cannot_be_put_back_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, graphs = backend(monkeypatch, design="per-generator", graphsafe=False)
    with pytest.raises(CaptureLeftUnsafe, match=r"no Generator\.graphsafe_set_state") as caught:
        graphs.capture(fails_in_the_step(fake), [])
    assert "operation not permitted" in str(caught.value.__cause__)
    fake, graphs = backend(monkeypatch, pool_calls=False)
    with pytest.raises(CaptureLeftUnsafe, match=r"no torch\._C\._cuda_endAllocateToPool"):
        graphs.capture(fails_in_the_step(fake), [])


def test_a_capture_that_fails_before_it_began_gives_back_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, graphs = backend(monkeypatch)
    graphs.capture(lambda: step(fake), [])
    graphs.stream = fake.default_stream  # capture_begin refuses the default stream before touching the allocator
    with pytest.raises(RuntimeError, match="non-default stream"):
        graphs.capture(lambda: step(fake), [])
    assert [pool.uses for pool in fake.allocator.pools.values()] == [1]  # the first graph's use, not given back


# ---- host reads: on the watching thread, and in backward hooks (autograd's device threads) -------------
def a_hook_that_reads(done: threading.Event) -> None:
    try:
        warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)  # the hook's .item(), as torch's warning says it
    finally:
        done.set()


def test_a_host_read_in_a_backward_hook_is_found_naming_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU, autograd runs the backward pass (hooks included) on a thread torch started, not Python."""
    FakeCuda().install(monkeypatch)
    done = threading.Event()
    with watch_syncs() as watch:
        _thread.start_new_thread(a_hook_that_reads, (done,))
        assert done.wait(30)
    assert watch.found is not None and watch.found.file == __file__
    assert watch.found.code.startswith("warnings.warn(SYNC_WARNING")


def test_a_read_on_a_thread_of_pythons_own_is_not_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """E.g. the DataLoader's pin-memory thread: not part of the step."""
    FakeCuda().install(monkeypatch)
    done = threading.Event()
    with warnings.catch_warnings(record=True), watch_syncs() as watch:
        threading.Thread(target=a_hook_that_reads, args=(done,)).start()
        assert done.wait(30)
    assert watch.found is None
    assert torch.cuda.get_sync_debug_mode() == 0  # put back
