"""The next epoch's workers are forked only once the last epoch's index-queue feeders have ended."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import worker_forks
from trainer.signals import start_iterator


@pytest.fixture(autouse=True)
def no_tracked_queues() -> Iterator[None]:
    saved = dict(worker_forks._queues)
    worker_forks._queues.clear()
    yield
    worker_forks._queues.clear()
    worker_forks._queues.update(saved)


def ending_feeder(seconds: float) -> threading.Thread:
    thread = threading.Thread(target=time.sleep, args=(seconds,), daemon=True)
    thread.start()
    return thread


def task_exists(thread: threading.Thread) -> bool:
    return os.path.exists(f"/proc/self/task/{thread.native_id}")


def test_settle_waits_for_a_closed_queues_feeder_to_end() -> None:
    feeder = ending_feeder(0.3)
    worker_forks.track(SimpleNamespace(_index_queues=[SimpleNamespace(_closed=True, _thread=feeder)]))
    worker_forks.settle()
    assert not feeder.is_alive()
    if os.path.isdir("/proc/self/task"):  # Linux: the operating-system thread is gone too, not only its Python part
        assert not task_exists(feeder)
    assert not worker_forks._queues  # forgotten once ended


def test_settle_keeps_open_queues_and_is_bounded() -> None:
    open_queue = SimpleNamespace(_closed=False, _thread=ending_feeder(10))  # persistent workers: never waited on
    stuck = SimpleNamespace(_closed=True, _thread=ending_feeder(10))
    worker_forks.track(SimpleNamespace(_index_queues=[open_queue, stuck]))
    worker_forks.track(SimpleNamespace(_index_queues=[open_queue]))  # tracked again next epoch: kept once
    began = time.monotonic()
    worker_forks.settle(timeout=0.2)
    assert time.monotonic() - began < 2.0
    assert list(worker_forks._queues.values()) == [open_queue]


def test_an_epochs_workers_are_settled_before_the_next_fork() -> None:
    """Through the loader path the Trainer uses: an epoch stopped at its limit (no StopIteration), the next started."""
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=16, num_workers=1)
    first = start_iterator(loader)
    assert len(list(itertools.islice(first, 2))) == 2
    (queue,) = worker_forks._queues.values()
    del first  # torch shuts the workers down and closes the queue, its feeder left to end on its own
    assert getattr(queue, "_closed", False)
    second = start_iterator(loader)
    feeder = queue._thread
    assert feeder is None or not feeder.is_alive()
    assert queue not in worker_forks._queues.values()
    assert len(list(second)) == 4
