"""Supervising the ranks of a self-launch: start them, and end all of them when one fails.

Failure rule: any rank failing ends every rank within seconds with a non-zero exit code, the
failing rank's traceback printed once. Rank 0 polls its children from a watchdog thread;
children get ``PR_SET_PDEATHSIG`` so they die with rank 0, even when it is SIGKILLed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, MutableMapping
from types import TracebackType
from typing import NoReturn

from trainer import failures
from trainer.checkpoint.leftovers import abandon
from trainer.launch import SELF_LAUNCH_VAR, ClusterEnv, launch_command, rank_environment

_POLL_S = 0.1  # how often rank 0 looks at its children
_GRACE_S = 1.0  # SIGTERM -> SIGKILL for children being stopped
_PEER_WAIT_S = 1.0  # rank 0 hit a peer error: how long to wait for the child that caused it
_SECONDARY_WAIT_S = 2.0  # a child hit a peer error: time for rank 0 to stop it silently
_EXIT_WAIT_S = 300.0  # rank 0 finished: how long it waits for the children to finish too
_PEER_ERROR_HINTS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "communicator was aborted",
)


def start_processes(env: ClusterEnv, environ: MutableMapping[str, str] | None = None) -> None:
    """Make this process ready to join ``env``: export its variables, label its tracebacks,
    and, as rank 0 of a self-launch, start ranks 1..N-1 (once per process)."""
    global _children
    environ = os.environ if environ is None else environ
    if env.world_size == 1 and env.source == "local":
        return
    if env.source == "self":
        environ.update(rank_environment(env, env.rank))
    else:
        environ.update({"MASTER_ADDR": env.master_addr, "MASTER_PORT": str(env.master_port)})
    if env.source == "self" and env.rank == 0 and _children is None:
        _children = _Children.start(env)
    _install_excepthook(env.rank)


def on_rank_exception(exception: BaseException) -> None:
    """This rank raised. Rank 0 of a self-launch checks whether a child failed first (then exits
    with its code, hiding its own follow-up error) or else stops the children; a child whose error
    only says a peer vanished waits briefly for rank 0 to stop it, so only the cause is printed."""
    global _waited_as_secondary
    if isinstance(exception, SystemExit) and exception.code in (0, None):
        return  # a clean exit (e.g. after a signal every rank agreed on): the children end on their own
    if _children is not None:
        _children.on_parent_exception(_is_peer_failure(exception))
    elif os.environ.get(SELF_LAUNCH_VAR) in ("1", "spawn") and _is_peer_failure(exception) and not _waited_as_secondary:
        _waited_as_secondary = True
        time.sleep(_SECONDARY_WAIT_S)


def _is_peer_failure(exception: BaseException) -> bool:
    """The error looks like the echo of another rank's death (gloo/NCCL lost a peer)."""
    seen: BaseException | None = exception
    while seen is not None:
        if is_peer_failure_text(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_peer_failure_text(text: str) -> bool:
    """An error message that only says another rank vanished."""
    return any(hint in text.lower() for hint in _PEER_ERROR_HINTS)


def _install_excepthook(rank: int) -> None:
    """Uncaught errors go through ``on_rank_exception``, print with a ``[rankN]:`` prefix, then exit
    at once: the interpreter's own teardown of torch takes seconds that the other ranks would wait."""
    if getattr(sys.excepthook, "_steadytrain", False):
        return

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        failures.record(rank, exc)  # before anything else: rank 0 reads it once this process is gone
        on_rank_exception(exc)
        lines = "".join(traceback.format_exception(exc_type, exc, tb)).splitlines()
        sys.stderr.write("".join(f"[rank{rank}]: {line}\n" for line in lines))
        if not issubclass(exc_type, KeyboardInterrupt):
            _exit_now(1)
        sys.stderr.flush()

    hook._steadytrain = True  # type: ignore[attr-defined]
    sys.excepthook = hook


_children: _Children | None = None
_waited_as_secondary = False


class _Children:
    """Rank 0's handle on the ranks it started: watch them, stop them, wait for them."""

    def __init__(self, procs: dict[int, subprocess.Popen[bytes]], failure_dir: str) -> None:
        self.procs = procs
        self.failure_dir = failure_dir  # where each child writes its cause of failure (trainer.failures)
        self._stopping = False  # we are stopping them: their exit codes are ours, not failures
        self._aborting = False
        self._lock = threading.Lock()  # held by the one abort() that ends the process
        threading.Thread(target=self._watch, name="steadytrain-watchdog", daemon=True).start()
        atexit.register(self.wait)

    @classmethod
    def start(cls, env: ClusterEnv) -> _Children:
        command = launch_command()
        preexec = die_with_parent()
        failure_dir = tempfile.mkdtemp(prefix="steadytrain-ranks-")
        atexit.register(shutil.rmtree, failure_dir, ignore_errors=True)
        procs = {}
        for rank in range(1, env.world_size):
            child_env = {**os.environ, **rank_environment(env, rank), failures.FAILURE_DIR_VAR: failure_dir}
            procs[rank] = subprocess.Popen(command, env=child_env, preexec_fn=preexec)
        return cls(procs, failure_dir)

    def failure(self) -> tuple[int, int] | None:
        """(rank, exit code) of the first child that ended badly, if any."""
        if self._stopping:
            return None
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code not in (None, 0):
                return rank, code
        return None

    def early_exit(self) -> tuple[int, int] | None:
        """(rank, 0) of a child that ended cleanly while rank 0 still needed it (a peer error says so)."""
        return next(((rank, 0) for rank, proc in self.procs.items() if proc.poll() == 0), None)

    def _watch(self) -> None:
        while not self._stopping:
            failed = self.failure()
            if failed is not None:
                self.abort(*failed)
            time.sleep(_POLL_S)

    def abort(self, rank: int, code: int) -> NoReturn:
        """A child failed: stop the others and end this process with the child's code."""
        with self._lock:  # never released: a second caller waits here until os._exit
            self._aborting = self._stopping = True
            _flush_std_streams()
            os.write(2, f"steadytrain: {describe_exit(rank, code)}; stopping all ranks.\n".encode())
            self.kill()
            cause = failures.recorded(self.failure_dir, rank)
            if cause is not None:  # the last line: what the user needs, without scrolling
                os.write(2, f"steadytrain: rank {rank} failed: {cause}\n".encode())
            shutil.rmtree(self.failure_dir, ignore_errors=True)
            abandon()  # this process's save in progress, if any: its main thread never reaches its cleanup
            os._exit(_exit_status(code))

    def kill(self) -> None:
        """Stop every child still running: SIGTERM, then SIGKILL after a short grace."""
        self._stopping = True
        alive = [proc for proc in self.procs.values() if proc.poll() is None]
        for proc in alive:
            proc.terminate()
        deadline = time.monotonic() + _GRACE_S
        for proc in alive:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def on_parent_exception(self, peer_failure: bool) -> None:
        """Rank 0 raised: if a child caused it, exit as that child did; else stop the children."""
        deadline = time.monotonic() + (_PEER_WAIT_S if peer_failure else 0.0)
        while not self._stopping:
            failed = self.failure() or (self.early_exit() if peer_failure else None)
            if failed is not None:
                self.abort(*failed)
            if time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S / 2)
        if self._aborting:  # the watchdog is ending the process with a child's code: add nothing
            self._lock.acquire()
        self.kill()

    def wait(self, timeout: float = _EXIT_WAIT_S) -> None:
        """At exit: wait for the children, and exit non-zero if one of them failed."""
        deadline = time.monotonic() + timeout
        while any(proc.poll() is None for proc in self.procs.values()) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        failed = self.failure()
        if failed is not None:
            self.abort(*failed)
        if not self._stopping and any(proc.poll() is None for proc in self.procs.values()):
            _flush_std_streams()
            message = f"steadytrain: ranks still running {timeout:.0f}s after rank 0 finished; stopping them.\n"
            os.write(2, message.encode())
            self.kill()
            os._exit(1)


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGKILL the child when rank 0 dies (None where unsupported).

    The signal fires when the *thread* that forked exits, so it is only used from the main thread.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_pdeathsig() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL))

    return set_pdeathsig


def describe_exit(rank: int, code: int) -> str:
    if code < 0:
        return f"rank {rank} was killed by {signal.Signals(-code).name}"
    if code == 0:
        return (
            f"rank {rank} exited with code 0 while the others were still training (a return or sys.exit on one "
            "rank only? every rank must run the same fit to its end)"
        )
    return f"rank {rank} exited with code {code} (see its traceback above)"


def _exit_status(code: int) -> int:
    """A child's return code as a shell exit status (signal N -> 128 + N); a rank that left early, 1."""
    return 128 - code if code < 0 else code or 1


def _exit_now(code: int) -> NoReturn:
    """Run the atexit handlers (loggers, our child reaper), flush, and skip the slow interpreter teardown."""
    atexit._run_exitfuncs()
    _flush_std_streams()
    os._exit(code)


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            stream.flush()
