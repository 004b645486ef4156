"""Where the ranks come from: torchrun, SLURM, or this process starting them itself.

``detect_cluster`` reads who launched us and checks it against ``devices x num_nodes``;
``launch_command`` and ``rank_environment`` say how a self-launch re-runs this command line
for ranks 1..N-1. Starting and supervising those processes lives in ``trainer.supervise``.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

SELF_LAUNCH_VAR = "STEADYTRAIN_SELF_LAUNCHED"
_INTERACTIVE_JOB_NAMES = ("bash", "interactive")


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
    source: str  # "torchrun" | "slurm" | "self" | "spawn" | "local", or the class of the user's ClusterEnvironment


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
    elif slurm_managed(environ):
        env = _from_slurm(environ, num_devices)
    elif num_devices * num_nodes > 1:
        env = _plan_self_launch(environ, num_devices, num_nodes, argv)
    else:
        env = ClusterEnv(0, 0, 1, 0, 1, "127.0.0.1", _port(environ) or find_free_port(), "local")
    check_world_size(env, num_devices, num_nodes)
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
    source = {"1": "self", "spawn": "spawn"}.get(environ.get(SELF_LAUNCH_VAR, ""), "torchrun")
    addr = environ.get("MASTER_ADDR", "127.0.0.1")
    port = _port(environ)
    if port is None:
        raise RuntimeError("RANK and WORLD_SIZE are set but MASTER_PORT is not; set MASTER_ADDR and MASTER_PORT.")
    return ClusterEnv(rank, local_rank, world_size, node_rank, local_world_size, addr, port, source)


def slurm_managed(environ: Mapping[str, str]) -> bool:
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


def _plan_self_launch(environ: Mapping[str, str], num_devices: int, num_nodes: int, argv: list[str]) -> ClusterEnv:
    if num_nodes > 1:
        raise RuntimeError(
            f"num_nodes={num_nodes}: steadytrain only starts processes on this machine. Start one "
            "launcher per node instead, e.g. `torchrun --nnodes N --node_rank i --nproc_per_node D ...` "
            "or `srun`."
        )
    launch_command(argv)  # refuse interactive sessions before anything starts
    port = _port(environ) or find_free_port()
    return ClusterEnv(0, 0, num_devices, 0, num_devices, "127.0.0.1", port, "self")


def check_world_size(env: ClusterEnv, num_devices: int, num_nodes: int) -> None:
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


# ---- the rank rank_zero_only reads ---------------------------------------------------------
# Lightning's order: LOCAL_RANK before SLURM_PROCID, which SLURM sets even when it does not start the ranks.
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def rank_from_environment() -> int:
    """This process's rank as the launcher's variables give it (0 where none is set), as Lightning reads it."""
    for name in _RANK_VARIABLES:
        if (value := os.environ.get(name)) is not None:
            return int(value)
    return 0


def set_global_rank(rank: int) -> None:
    """Tell lightning-utilities' ``rank_zero_only`` (and the ``rank_zero_*`` helpers that read it) which rank
    this process is; a strategy calls it when its processes are up, as Lightning's do."""
    # Imported here: lightning_utilities parses version specifiers at import (~40 ms); `import trainer` must not.
    from lightning_utilities.core.rank_zero import rank_zero_only

    rank_zero_only.rank = rank  # type: ignore[attr-defined]


# ---- elastic restarts --------------------------------------------------------------------
@dataclass(frozen=True)
class ElasticRestart:
    """torchrun restarted the whole group (``--max-restarts``) after a rank died: attempt ``count``.

    ``started_at`` is when torchrun's agent (this process's parent) started, so the newest checkpoint
    written since then belongs to this run; None where that cannot be read (not Linux).
    """

    count: int
    run_id: str
    started_at: float | None


def elastic_restart(environ: Mapping[str, str] | None = None) -> ElasticRestart | None:
    """The restart this process is part of, from torchelastic's variables; None on a first attempt."""
    environ = os.environ if environ is None else environ
    count = int(environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    if count <= 0 or "TORCHELASTIC_RUN_ID" not in environ:
        return None
    return ElasticRestart(count, environ["TORCHELASTIC_RUN_ID"], process_start_time(os.getppid()))


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started, as a ``time.time()``, from Linux's /proc (None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name in parentheses
    return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")


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
            "In a notebook use strategy='ddp_notebook' (forks this kernel); else put the code in a file and run it, "
            "launch it with `torchrun --nproc_per_node N train.py`, or use devices=1."
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
