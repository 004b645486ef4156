"""Where the ranks come from: torchrun, SLURM, or this process starting them itself.

``detect_cluster`` reads who launched us and checks it against ``devices x num_nodes``;
``start_processes`` then, for a plain ``python train.py`` with several devices, turns this
process into rank 0 and re-runs the same command line for ranks 1..N-1.

Failure rule for a self-launch: any rank failing ends every rank within seconds with a
non-zero exit code, the failing rank's traceback printed once. Rank 0 polls its children
from a watchdog thread; children get ``PR_SET_PDEATHSIG`` so they die with rank 0, even
when it is SIGKILLed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import NoReturn

SELF_LAUNCH_VAR = "STEADYTRAIN_SELF_LAUNCHED"
_POLL_S = 0.1  # how often rank 0 looks at its children
_GRACE_S = 1.0  # SIGTERM -> SIGKILL for children being stopped
_PEER_WAIT_S = 1.0  # rank 0 hit a peer error: how long to wait for the child that caused it
_SECONDARY_WAIT_S = 2.0  # a child hit a peer error: time for rank 0 to stop it silently
_EXIT_WAIT_S = 300.0  # rank 0 finished: how long it waits for the children to finish too
_INTERACTIVE_JOB_NAMES = ("bash", "interactive")
_PEER_ERROR_HINTS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "communicator was aborted",
)


@dataclass(frozen=True)
class ClusterEnv:
    """Where this process sits in the job; ``source`` says which launcher told us."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    source: str  # "torchrun" | "slurm" | "self" | "local"


# ---- detection ---------------------------------------------------------------------------
def detect_cluster(
    num_devices: int,
    num_nodes: int = 1,
    environ: Mapping[str, str] | None = None,
    argv: list[str] | None = None,
) -> ClusterEnv:
    """Read the launcher's variables (torchrun, then SLURM) or plan a self-launch."""
    environ = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    legacy_local_rank = pop_legacy_local_rank(argv, environ)
    if "RANK" in environ and "WORLD_SIZE" in environ:
        env = _from_torchrun(environ, num_devices, legacy_local_rank)
    elif _slurm_managed(environ):
        env = _from_slurm(environ, num_devices)
    elif num_devices * num_nodes > 1:
        env = _plan_self_launch(environ, num_devices, num_nodes)
    else:
        env = ClusterEnv(0, 0, 1, 0, 1, "127.0.0.1", _port(environ) or find_free_port(), "local")
    _check_world_size(env, num_devices, num_nodes)
    return env


def pop_legacy_local_rank(argv: list[str], environ: Mapping[str, str]) -> int | None:
    """Remove ``--local-rank=N`` (``python -m torch.distributed.launch``) from argv; return N.

    Only under a launcher (``RANK`` set), so a script's own flag of that name survives plain runs.
    """
    if "RANK" not in environ:
        return None
    for i, arg in enumerate(argv[1:], start=1):
        for flag in ("--local-rank", "--local_rank"):
            if arg.startswith(flag + "="):
                del argv[i]
                return int(arg.split("=", 1)[1])
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
                del argv[i : i + 2]
                return int(value)
    return None


def _port(environ: Mapping[str, str]) -> int | None:
    return int(environ["MASTER_PORT"]) if environ.get("MASTER_PORT") else None


def _from_torchrun(environ: Mapping[str, str], num_devices: int, legacy_local_rank: int | None) -> ClusterEnv:
    rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    local_rank = int(environ.get("LOCAL_RANK", legacy_local_rank if legacy_local_rank is not None else 0))
    local_world_size = int(environ.get("LOCAL_WORLD_SIZE", num_devices))
    node_rank = int(environ.get("GROUP_RANK", environ.get("NODE_RANK", rank // max(local_world_size, 1))))
    source = "self" if environ.get(SELF_LAUNCH_VAR) == "1" else "torchrun"
    addr = environ.get("MASTER_ADDR", "127.0.0.1")
    port = _port(environ)
    if port is None:
        raise RuntimeError("RANK and WORLD_SIZE are set but MASTER_PORT is not; set MASTER_ADDR and MASTER_PORT.")
    return ClusterEnv(rank, local_rank, world_size, node_rank, local_world_size, addr, port, source)


def _slurm_managed(environ: Mapping[str, str]) -> bool:
    """SLURM started our tasks (srun/sbatch), not just an interactive shell on an allocation."""
    return "SLURM_NTASKS" in environ and environ.get("SLURM_JOB_NAME") not in _INTERACTIVE_JOB_NAMES


def _from_slurm(environ: Mapping[str, str], num_devices: int) -> ClusterEnv:
    nodelist = environ.get("SLURM_NODELIST") or environ.get("SLURM_JOB_NODELIST") or "127.0.0.1"
    addr = environ.get("MASTER_ADDR") or expand_hostlist(nodelist)[0]
    port = _port(environ) or slurm_port(environ.get("SLURM_JOB_ID"))
    return ClusterEnv(
        rank=int(environ["SLURM_PROCID"]),
        local_rank=int(environ.get("SLURM_LOCALID", 0)),
        world_size=int(environ["SLURM_NTASKS"]),
        node_rank=int(environ.get("SLURM_NODEID", 0)),
        local_world_size=num_devices,
        master_addr=addr,
        master_port=port,
        source="slurm",
    )


def slurm_port(job_id: str | None) -> int:
    """A port every task of a job derives alike: 15000 + job id mod 20000 (or 12910 without one)."""
    digits = re.sub(r"\D", "", job_id or "")
    return 15000 + int(digits) % 20000 if digits else 12910


def expand_hostlist(nodelist: str) -> list[str]:
    """SLURM's compressed host list, expanded: ``node[01-02,07],gpu1`` -> node01, node02, node07, gpu1."""
    return [host for part in _split_outside_brackets(nodelist) for host in _expand_host(part)]


def _split_outside_brackets(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_host(pattern: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [head + item + rest for item in _expand_ranges(match.group(1)) for rest in _expand_host(tail)]


def _expand_ranges(spec: str) -> list[str]:
    items: list[str] = []
    for piece in spec.split(","):
        low, _, high = piece.partition("-")
        if not high:
            items.append(low)
            continue
        items.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return items


def _plan_self_launch(environ: Mapping[str, str], num_devices: int, num_nodes: int) -> ClusterEnv:
    if num_nodes > 1:
        raise RuntimeError(
            f"num_nodes={num_nodes}: steadytrain only starts processes on this machine. Start one "
            "launcher per node instead, e.g. `torchrun --nnodes N --node_rank i --nproc_per_node D ...` "
            "or `srun`."
        )
    launch_command()  # refuse interactive sessions before anything starts
    port = _port(environ) or find_free_port()
    return ClusterEnv(0, 0, num_devices, 0, num_devices, "127.0.0.1", port, "self")


def _check_world_size(env: ClusterEnv, num_devices: int, num_nodes: int) -> None:
    expected = num_devices * num_nodes
    if env.world_size == expected and env.local_world_size == num_devices:
        return
    if env.source == "slurm":
        raise RuntimeError(
            f"SLURM started SLURM_NTASKS={env.world_size} tasks, but the Trainer asks for "
            f"devices={num_devices} x num_nodes={num_nodes} = {expected} processes. Submit with "
            f"--nodes={num_nodes} --ntasks-per-node={num_devices}, or change devices/num_nodes to match."
        )
    raise RuntimeError(
        f"The launcher ({env.source}) started WORLD_SIZE={env.world_size} processes "
        f"({env.local_world_size} per node), but the Trainer asks for devices={num_devices} x "
        f"num_nodes={num_nodes} = {expected}. Make --nproc_per_node x --nnodes match devices x num_nodes."
    )


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free right now (bind port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


# ---- self-launch -------------------------------------------------------------------------
def launch_command(argv: list[str] | None = None, main: ModuleType | None = None) -> list[str]:
    """The command line that re-runs this program for another rank (script or ``-m``)."""
    argv = sys.argv if argv is None else argv
    main = sys.modules["__main__"] if main is None else main
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return [sys.executable, "-m", spec.name, *argv[1:]]
    if not getattr(main, "__file__", None) or not argv or argv[0] in ("", "-c", "-"):
        raise RuntimeError(
            "strategy='ddp' with several devices starts one process per device by re-running your script, "
            "but this is an interactive session (REPL, notebook or `python -c`) with no script to re-run. "
            "Put the code in a file and run it, launch it with `torchrun --nproc_per_node N train.py`, "
            "or use devices=1."
        )
    return [sys.executable, os.path.abspath(argv[0]), *argv[1:]]


def rank_environment(env: ClusterEnv, rank: int) -> dict[str, str]:
    """The variables a self-launched rank gets (torchrun's names, plus our marker)."""
    return {
        "MASTER_ADDR": env.master_addr,
        "MASTER_PORT": str(env.master_port),
        "WORLD_SIZE": str(env.world_size),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "NODE_RANK": "0",
        "LOCAL_WORLD_SIZE": str(env.local_world_size),
        SELF_LAUNCH_VAR: "1",
    }


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
    elif os.environ.get(SELF_LAUNCH_VAR) == "1" and _is_peer_failure(exception) and not _waited_as_secondary:
        _waited_as_secondary = True
        time.sleep(_SECONDARY_WAIT_S)


def _is_peer_failure(exception: BaseException) -> bool:
    """The error looks like the echo of another rank's death (gloo/NCCL lost a peer)."""
    seen: BaseException | None = exception
    while seen is not None:
        if any(hint in str(seen).lower() for hint in _PEER_ERROR_HINTS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _install_excepthook(rank: int) -> None:
    """Uncaught errors go through ``on_rank_exception``, print with a ``[rankN]:`` prefix, then exit
    at once: the interpreter's own teardown of torch takes seconds that the other ranks would wait."""
    if getattr(sys.excepthook, "_steadytrain", False):
        return

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
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

    def __init__(self, procs: dict[int, subprocess.Popen[bytes]]) -> None:
        self.procs = procs
        self._stopping = False  # we are stopping them: their exit codes are ours, not failures
        self._aborting = False
        self._lock = threading.Lock()  # held by the one abort() that ends the process
        threading.Thread(target=self._watch, name="steadytrain-watchdog", daemon=True).start()
        atexit.register(self.wait)

    @classmethod
    def start(cls, env: ClusterEnv) -> _Children:
        command = launch_command()
        preexec = _die_with_parent()
        procs = {}
        for rank in range(1, env.world_size):
            child_env = {**os.environ, **rank_environment(env, rank)}
            procs[rank] = subprocess.Popen(command, env=child_env, preexec_fn=preexec)
        return cls(procs)

    def failure(self) -> tuple[int, int] | None:
        """(rank, exit code) of the first child that ended badly, if any."""
        if self._stopping:
            return None
        for rank, proc in self.procs.items():
            code = proc.poll()
            if code not in (None, 0):
                return rank, code
        return None

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
            os.write(2, f"steadytrain: {_describe_exit(rank, code)}; stopping all ranks.\n".encode())
            self.kill()
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
            failed = self.failure()
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


def _die_with_parent() -> Callable[[], None] | None:
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


def _describe_exit(rank: int, code: int) -> str:
    if code < 0:
        return f"rank {rank} was killed by {signal.Signals(-code).name}"
    return f"rank {rank} exited with code {code} (see its traceback above)"


def _exit_status(code: int) -> int:
    """A child's return code as a shell exit status (signal N -> 128 + N)."""
    return 128 - code if code < 0 else code


def _exit_now(code: int) -> NoReturn:
    """Run the atexit handlers (loggers, our child reaper), flush, and skip the slow interpreter teardown."""
    atexit._run_exitfuncs()
    _flush_std_streams()
    os._exit(code)


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            stream.flush()


def _strip_legacy_flag_at_import() -> None:
    """Strip the legacy launcher's flag before the user's argparse runs; keep its value as LOCAL_RANK."""
    local_rank = pop_legacy_local_rank(sys.argv, os.environ)
    if local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(local_rank))


_strip_legacy_flag_at_import()
