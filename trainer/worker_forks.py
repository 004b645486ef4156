"""Forking DataLoader workers only once the communication threads are done with the GIL.

A new DataLoader worker has been seen stuck inside ``fork()`` itself (gdb: the child waits in
``PyOS_AfterFork_Child`` -> ``_PyThreadState_DeleteExcept`` for the interpreter's thread-list lock),
its rank then waiting for its first batch forever and the whole job with it. That is CPython
gh-112275 (Python 3.8 to 3.11): the child takes that lock before resetting it, so a fork at the
moment another thread holds it deadlocks the child. A thread holds it without the GIL while it makes
itself a thread state, which is what gloo's worker threads do when they free a finished collective
that needs the GIL (the work DDP issues in backward: see ``strategies/parallel._destroy_group``).
An epoch's workers are forked just after the last step's collectives, so before forking, in a process
with a process group, the Trainer releases the GIL for a moment (``let_communication_threads_finish``), letting those
threads finish. Seen a few times in thousands of epoch starts of 2-rank gloo jobs on a loaded
2-core machine (Python 3.11.7); a Python with the fix does not need the pause. The same pause comes
before a process group is destroyed (``strategies/parallel._destroy_group``), for the same threads.

Only the standard library at import.
"""

from __future__ import annotations

import sys
import time

GRACE_S = 0.05  # long enough for a communication thread waiting for the GIL to take it and finish


def let_communication_threads_finish() -> None:
    """Pause ``GRACE_S`` (the GIL released) when a process group exists, so that no communication thread
    is still freeing a collective under the GIL: before a fork, and before the group is destroyed."""
    if process_group_running():
        time.sleep(GRACE_S)


def process_group_running() -> bool:
    dist = sys.modules.get("torch.distributed")  # never imported here: only a group already made counts
    return dist is not None and dist.is_available() and dist.is_initialized()
