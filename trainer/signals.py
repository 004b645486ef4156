"""Stop signals: the main process turns them into a flag; DataLoader workers leave them to it.

A job is stopped from outside by SIGTERM (SLURM, Kubernetes, ``timeout``), SIGINT (Ctrl-C) or a
requeue signal (SIGUSR1). These reach every process of the job, DataLoader workers included. The
main process records the signal, finishes its step and saves (``catch_stop_signals``). A worker
must neither die from such a signal (the main process would fail fetching its next batch instead
of saving) nor ignore its own parent, which ends it with SIGTERM at shutdown: a worker that
ignores that one hangs the parent's exit forever. So each worker blocks the stop signals and a
small thread takes them: SIGTERM from its parent ends the worker at once, anything else is left
to the main process (``worker_init``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from trainer import worker_forks

STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")


def _signal_set(names: Iterable[str]) -> set[signal.Signals]:
    return {getattr(signal, name) for name in names if hasattr(signal, name)}


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# ---- the main process --------------------------------------------------------------------------
@contextlib.contextmanager
def catch_stop_signals(names: Iterable[str], on_signal: Callable[[str], None]) -> Iterator[None]:
    """While inside, each signal in ``names`` calls ``on_signal(name)`` instead of ending the process, then the
    handler the program had installed for it, if any (as Lightning calls a user's own SIGTERM handler).

    ``on_signal`` may raise (e.g. KeyboardInterrupt on a second Ctrl-C). Outside the main thread
    Python cannot install handlers, so nothing changes there.
    """
    if not _in_main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        on_signal(signal.Signals(signum).name)
        own = previous.get(signal.Signals(signum))
        if callable(own) and own is not signal.default_int_handler:  # Python's Ctrl-C would raise: ours decides
            own(signum, frame)

    previous: dict[signal.Signals, Any] = {}
    previous.update({sig: signal.signal(sig, handler) for sig in _signal_set(names)})
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def start_iterator(loader: Iterable[Any]) -> Iterator[Any]:
    """``iter(loader)``; DataLoader workers it starts leave stop signals to the main process.

    The stop signals are blocked in this thread while the workers are forked, so one that arrives
    meanwhile is neither lost here (it is delivered when the mask is restored) nor run by a
    half-started worker (a fork starts with no pending signal and this mask, which
    ``worker_init`` takes over).
    """
    if getattr(loader, "num_workers", 0) == 0 or not hasattr(signal, "pthread_sigmask"):
        return iter(loader)
    user_init = getattr(loader, "worker_init_fn", None)
    loader.worker_init_fn = WorkerInit(user_init)  # type: ignore[attr-defined]
    worker_forks.let_communication_threads_finish()  # none taking the GIL as we fork (CPython gh-112275)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _signal_set(STOP_SIGNALS))
    try:
        return NamesDeadWorkers(iter(loader))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        loader.worker_init_fn = user_init  # type: ignore[attr-defined]


class NamesDeadWorkers:
    """A multi-process loader's iterator whose error names the worker that died handing over a batch.

    A worker killed while the main process takes a tensor from it (the tensor's file descriptor is
    passed over a socket) surfaces as a bare ``ConnectionResetError`` or ``EOFError``: torch checks
    its workers at once and, the dying one not reaped yet, finds them all alive. Here they are checked
    again for up to ``grace`` seconds; one found dead gives torch's own message, naming its pid.
    """

    def __init__(self, iterator: Iterator[Any], grace: float = 2.0) -> None:
        self._iterator = iterator
        self._grace = grace

    def __iter__(self) -> NamesDeadWorkers:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._iterator)
        except (ConnectionError, EOFError) as err:
            dead = _dead_workers(self._iterator, self._grace)
            if not dead:
                raise
            raise RuntimeError(f"DataLoader worker (pid(s) {dead}) exited unexpectedly: {err!r}") from err


def _dead_workers(iterator: Any, grace: float) -> str:
    """The pids and exit (``killed by SIGKILL``) of ``iterator``'s workers found dead within ``grace`` s."""
    deadline = time.monotonic() + grace
    workers = list(getattr(iterator, "_workers", ()))
    while True:
        dead = [w for w in workers if not w.is_alive()]
        if dead or time.monotonic() >= deadline:
            return ", ".join(f"{w.pid}, {_exit_text(w.exitcode)}" for w in dead)
        time.sleep(0.02)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


# ---- a DataLoader worker -------------------------------------------------------------------------
class WorkerInit:
    """``worker_init_fn`` that sets up a worker's stop signals, then runs the user's own init.

    A class, not a closure, so it pickles for the spawn and forkserver start methods.
    """

    def __init__(self, user_init: Callable[[int], None] | None) -> None:
        self.user_init = user_init
        self.main_pid = os.getpid()  # a forkserver worker's parent is the server, not this process

    def __call__(self, worker_id: int) -> None:
        leave_stop_signals_to_parent(self.main_pid)
        if self.user_init is not None:
            self.user_init(worker_id)


def leave_stop_signals_to_parent(main_pid: int) -> None:
    """In a worker: block the stop signals and let a thread take them as they come.

    SIGTERM sent by ``main_pid`` (multiprocessing's shutdown) ends the worker with status 0, which
    the parent's DataLoader does not report as a failure. Every other stop signal is dropped: the
    main process got it too and decides. If the parent dies, PyTorch's worker watchdog ends the
    worker.
    """
    wanted = _signal_set(STOP_SIGNALS)
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)  # this thread, and the threads it starts later

    def take() -> None:
        while True:
            info = signal.sigwaitinfo(wanted)
            if info.si_signo == signal.SIGTERM and info.si_pid in (main_pid, os.getpid()):
                os._exit(0)

    threading.Thread(target=take, name="steadytrain-worker-signals", daemon=True).start()
