"""Launcher detection (torchrun, legacy launch, SLURM) and the self-launch command line."""

from __future__ import annotations

import os
import sys
import types

import pytest

from tests.helpers import run_python
from trainer.launch import (
    SELF_LAUNCH_VAR,
    ClusterEnv,
    detect_cluster,
    expand_hostlist,
    find_free_port,
    launch_command,
    pop_legacy_local_rank,
    rank_environment,
    slurm_port,
)
from trainer.supervise import _exit_status, describe_exit

TORCHRUN = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


def slurm(**overrides: str) -> dict[str, str]:
    env = {
        "SLURM_NTASKS": "4",
        "SLURM_PROCID": "2",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "1",
        "SLURM_NODELIST": "gpu[3-4]",
        "SLURM_JOB_ID": "123456",
        "SLURM_JOB_NAME": "train",
    }
    return env | overrides


# ---- torchrun ------------------------------------------------------------------------------
def test_torchrun_variables_are_read() -> None:
    env = detect_cluster(2, 2, environ=TORCHRUN, argv=["train.py"])
    assert env == ClusterEnv(3, 1, 4, 1, 2, "10.0.0.1", 29500, "torchrun")


def test_torchrun_world_size_must_match_devices_times_nodes() -> None:
    with pytest.raises(RuntimeError, match=r"WORLD_SIZE=4.*devices=1 x num_nodes=1 = 1"):
        detect_cluster(1, 1, environ=TORCHRUN, argv=["train.py"])


def test_self_launched_child_is_recognised() -> None:
    env = detect_cluster(2, 1, environ={**rank_environment(_self_env(), 1)}, argv=["train.py"])
    assert (env.rank, env.local_rank, env.world_size, env.source) == (1, 1, 2, "self")


@pytest.mark.parametrize("flag", [["--local-rank=1"], ["--local_rank=1"], ["--local-rank", "1"]])
def test_legacy_launch_flag_is_removed_and_used(flag: list[str]) -> None:
    argv = ["train.py", *flag, "--lr", "0.1"]
    environ = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    env = detect_cluster(2, 1, environ=environ, argv=argv)
    assert argv == ["train.py", "--lr", "0.1"]
    assert (env.rank, env.local_rank, env.world_size) == (1, 1, 2)


def test_local_rank_flag_of_a_plain_run_is_left_alone() -> None:
    argv = ["train.py", "--local_rank=3"]
    assert pop_legacy_local_rank(argv, {}) is None
    assert argv == ["train.py", "--local_rank=3"]


# ---- SLURM ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("host", ["host"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("a1,b[2-3]", ["a1", "b2", "b3"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("rack[1-2]-gpu[1,3]", ["rack1-gpu1", "rack1-gpu3", "rack2-gpu1", "rack2-gpu3"]),
    ],
)
def test_expand_hostlist(nodelist: str, hosts: list[str]) -> None:
    assert expand_hostlist(nodelist) == hosts


def test_slurm_variables_are_read_with_first_host_as_master() -> None:
    env = detect_cluster(2, 2, environ=slurm(), argv=["train.py"])
    assert env == ClusterEnv(2, 0, 4, 1, 2, "gpu3", 15000 + 123456 % 20000, "slurm")


def test_slurm_port_is_deterministic_and_overridable() -> None:
    assert slurm_port("123456") == slurm_port("123456") == 18456
    assert slurm_port(None) == 12910
    assert detect_cluster(2, 2, environ=slurm(MASTER_PORT="23456"), argv=["t.py"]).master_port == 23456


def test_slurm_task_count_must_match_devices_times_nodes() -> None:
    with pytest.raises(RuntimeError, match=r"SLURM_NTASKS=4 .*devices=2 x num_nodes=1 = 2"):
        detect_cluster(2, 1, environ=slurm(), argv=["train.py"])


@pytest.mark.parametrize("name", ["bash", "interactive"])
def test_interactive_slurm_shell_is_not_a_launcher(name: str) -> None:
    env = detect_cluster(1, 1, environ=slurm(SLURM_JOB_NAME=name), argv=["train.py"])
    assert env.source == "local"


# ---- no launcher ---------------------------------------------------------------------------
def test_one_device_without_launcher_is_local() -> None:
    env = detect_cluster(1, 1, environ={}, argv=["train.py"])
    assert (env.world_size, env.source, env.master_addr) == (1, "local", "127.0.0.1")


def test_several_devices_without_launcher_plan_a_self_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    # The re-run command comes from __main__: a script here, whatever runs the tests (pytest-xdist's
    # workers run under `python -c`, which a self-launch refuses as an interactive session).
    script = types.ModuleType("__main__")
    script.__file__ = "train.py"
    monkeypatch.setitem(sys.modules, "__main__", script)
    env = detect_cluster(3, 1, environ={"MASTER_PORT": "23456"}, argv=["train.py"])
    assert env == ClusterEnv(0, 0, 3, 0, 3, "127.0.0.1", 23456, "self")


def test_self_launch_is_single_node_only() -> None:
    with pytest.raises(RuntimeError, match="torchrun"):
        detect_cluster(2, 2, environ={}, argv=["train.py"])


def test_rank_environment_names_torchrun_variables_and_marker() -> None:
    env = rank_environment(_self_env(), 1)
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "1",
        "NODE_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        SELF_LAUNCH_VAR: "1",
    }


# ---- the command line a child runs ---------------------------------------------------------
def _main(file: str | None, spec_name: str | None) -> types.ModuleType:
    main = types.ModuleType("__main__")
    if file is not None:
        main.__file__ = file
    main.__spec__ = types.SimpleNamespace(name=spec_name) if spec_name else None  # type: ignore[assignment]
    return main


def test_script_is_rerun_by_path() -> None:
    command = launch_command(["train.py", "--lr", "1"], _main("train.py", None))
    assert command == [sys.executable, os.path.abspath("train.py"), "--lr", "1"]


def test_module_is_rerun_with_dash_m() -> None:
    command = launch_command(["/x/pkg/train.py", "--lr", "1"], _main("/x/pkg/train.py", "pkg.train"))
    assert command == [sys.executable, "-m", "pkg.train", "--lr", "1"]


@pytest.mark.parametrize("argv", [["-c"], [""], ["-"]])
def test_interactive_session_cannot_self_launch(argv: list[str]) -> None:
    with pytest.raises(RuntimeError, match=r"interactive.*torchrun.*devices=1"):
        launch_command(argv, _main(None, None))


@pytest.mark.slow
def test_python_dash_c_refuses_with_advice() -> None:
    code = (
        "from trainer.strategies.ddp import DDPStrategy as S; s = S(); s.configure('cpu', [0, 1]); "
        "s.setup_environment()"
    )
    finished = run_python(["-c", code], timeout=60)
    assert finished.returncode != 0
    assert "interactive session" in finished.output and "torchrun" in finished.output


# ---- small pieces --------------------------------------------------------------------------
def test_exit_codes_and_messages() -> None:
    assert (_exit_status(1), _exit_status(-9)) == (1, 137)
    assert describe_exit(1, 3) == "rank 1 exited with code 3 (see its traceback above)"
    assert describe_exit(2, -9) == "rank 2 was killed by SIGKILL"


def test_free_port_can_be_bound() -> None:
    import socket

    port = find_free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _self_env() -> ClusterEnv:
    return ClusterEnv(0, 0, 2, 0, 2, "127.0.0.1", 23456, "self")
