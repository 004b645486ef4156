"""Forking DataLoader workers only while no thread of this process is ending.

A multi-process DataLoader iterator sends batch indices to each worker through a
``multiprocessing.Queue``, whose feeder thread lives in this process. At shutdown torch closes
those queues without joining their feeders (``cancel_join_thread``), so the feeder of the epoch
that just ended is often still exiting when the next epoch's ``iter()`` forks new workers. A new
worker has been seen stuck inside ``fork()`` itself, that feeder (frameless, ending) the one other
thread in it: a few times in thousands of epoch starts of 2-rank gloo jobs on a loaded 2-core
machine; its rank then waits for its first batch forever and the whole job with it. So before each
fork the Trainer waits (bounded) until the feeders of closed queues have ended, down to the
operating-system thread (``settle``).

Only the standard library at import.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

SETTLE_S = 2.0  # the longest a fork waits for ending feeder threads (they end in microseconds)

_queues: dict[int, Any] = {}  # the index queues of the workers this process started, until their feeders end


def track(iterator: Any) -> None:
    """Remember a multi-process iterator's index queues (``_index_queues``; none for other iterators).
    A persistent-workers iterator is tracked again each epoch: its queues are kept once."""
    _queues.update((id(queue), queue) for queue in getattr(iterator, "_index_queues", ()))


def settle(timeout: float = SETTLE_S) -> None:
    """Wait until the feeder thread of every closed tracked queue has ended, at most ``timeout`` seconds.

    ``Thread.join`` returns when the thread's Python part is done; the operating-system thread runs on
    a little (its thread state, thread-local data, stack), so on Linux this also waits until the
    thread is gone from ``/proc/self/task``. Queues still open (persistent workers, an iterator still in
    use) are kept for a later call.
    """
    deadline = time.monotonic() + timeout
    for key, queue in list(_queues.items()):
        if not getattr(queue, "_closed", False):
            continue
        thread = getattr(queue, "_thread", None)
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            _wait_until_gone(getattr(thread, "native_id", None), deadline)
        del _queues[key]


def _wait_until_gone(native_id: int | None, deadline: float) -> None:
    if native_id is None or not sys.platform.startswith("linux"):
        return
    task = f"/proc/self/task/{native_id}"
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.0005)
