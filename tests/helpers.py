"""Helpers for tests that start real processes: free ports, clean environments, timed runs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# Variables a launcher (torchrun, SLURM, our self-launch) sets; a test job must not inherit them.
_LAUNCHER_PREFIXES = ("SLURM_", "TORCHELASTIC_", "STEADYTRAIN_SELF")
_LAUNCHER_VARS = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
}


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(**extra: str) -> dict[str, str]:
    """This environment minus launcher variables, with the repo importable and 1 thread per rank."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _LAUNCHER_VARS and not key.startswith(_LAUNCHER_PREFIXES)
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a job past its deadline prints every thread's stack (see ``finish``)
    env.update(extra)
    return env


@dataclass
class Finished:
    """A finished job: exit code, stdout+stderr interleaved, wall time, and when it ended."""

    returncode: int
    output: str
    seconds: float
    ended_at: float

    def marker_time(self, name: str) -> float:
        """The ``NAME=<time.time()>`` value a script printed (e.g. just before it raised)."""
        for line in self.output.splitlines():
            if line.startswith(f"{name}="):
                return float(line.split("=", 1)[1])
        raise AssertionError(f"{name}= not in output:\n{self.output}")


def start(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen[str]:
    """Start ``python *args`` in its own session, so a timeout can kill everything it started."""
    return subprocess.Popen(
        [sys.executable, *args],
        env=clean_env() if env is None else env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120.0) -> Finished:
    """Wait for the job (and every process holding its output pipe) to end, or kill it and fail."""
    began = time.time()
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = stacks_then_kill(proc)
        raise AssertionError(f"job still running after {timeout}s; output, then its stacks:\n{stacks}") from None
    ended = time.time()
    return Finished(proc.returncode, output, ended - began, ended)


def stacks_then_kill(proc: subprocess.Popen[str]) -> str:
    """A hung job's output, then each thread's stack of every process in its session: SIGABRT, which
    ``PYTHONFAULTHANDLER`` answers with the stacks; whatever is left is SIGKILLed."""
    os.killpg(proc.pid, signal.SIGABRT)
    try:
        output, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return output


def run_python(
    args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120.0
) -> Finished:
    """Run ``python *args`` to the end with a timeout; the output pipe closes only when all ranks are gone."""
    return finish(start(args, env, cwd), timeout)


def processes_running(needle: str) -> list[int]:
    """PIDs whose command line contains ``needle`` (a /proc scan; no psutil needed)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def assert_no_leftovers(needle: str, within: float = 2.0) -> None:
    """Every process running ``needle`` is gone within ``within`` seconds."""
    deadline = time.monotonic() + within
    while (pids := processes_running(needle)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pids, f"processes still running {needle}: {pids}"
