"""DDPStrategy with real processes on gloo over loopback: self-launch, torchrun, SLURM, failures.

Every job runs ``ddp_worker.py`` (copied to tmp_path, so a leftover process is easy to find);
rank 0 writes what it saw to a JSON file.
"""

from __future__ import annotations

import json
import shutil
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers import assert_no_leftovers, clean_env, finish, free_port, run_python, start
from trainer.strategies.ddp import DDPStrategy, StepWrapper, _buffer_sync_kwargs, convert_cpu_sync_batchnorm

WORKER = Path(__file__).with_name("ddp_worker.py")


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    return Path(shutil.copy(WORKER, tmp_path / "ddp_worker.py"))


def load(out: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def assert_same_math_and_collectives(out: Path, world: int, source: str) -> None:
    r = load(out)
    assert (r["world_size"], r["source"]) == (world, source)
    # same math: ranks started apart, DDP broadcast rank 0's weights, sharded SGD == full-batch SGD
    assert r["init_differed"] and r["params_equal"]
    assert r["max_diff"] < 1e-6
    total = world * (world + 1) / 2
    assert (r["sum"], r["mean"], r["max"], r["min"]) == (total, total / world, world, 1)
    assert r["input_untouched"]
    assert (r["int_sum"], r["int_sum_dtype"], r["int_mean"]) == ([int(total)], "torch.int64", [total / world])
    assert r["gather"] == [[i, 2 * i] for i in range(world)]
    assert (r["broadcast_first"], r["broadcast_last"]) == ({"from": 0}, {"from": world - 1})
    assert r["samplers"] == {"num_replicas": world, "rank": world - 1}
    assert r["global_zero"] == [1] + [0] * (world - 1)
    assert r["objects"] == [{"rank": i} for i in range(world)]
    assert (r["any_true"], r["all_false"]) == (True, False)
    assert not r["no_sync_grads_equal"] and r["synced_grads_equal"]
    assert r["state_keys"] == ["lin.bias", "lin.weight"]
    assert r["second_stage_sum"] == world  # a second stage re-joins on the same port


# ---- default run: one quick smoke test -------------------------------------------------------
def test_self_launch_two_ranks(worker: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    finished = run_python([str(worker), str(out)])
    assert finished.returncode == 0, finished.output
    assert_same_math_and_collectives(out, 2, "self")
    assert_no_leftovers(str(worker))


# ---- other ways to start the ranks -----------------------------------------------------------
@pytest.mark.slow
def test_self_launch_from_python_dash_m(tmp_path: Path) -> None:
    shutil.copy(WORKER, tmp_path / "ddp_worker_mod.py")
    out = tmp_path / "out.json"
    finished = run_python(["-m", "ddp_worker_mod", str(out)], cwd=tmp_path)
    assert finished.returncode == 0, finished.output
    assert load(out)["second_stage_sum"] == 2


@pytest.mark.slow
def test_torchrun_standalone(worker: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(worker), str(out)]
    finished = run_python(args)
    assert finished.returncode == 0, finished.output
    assert_same_math_and_collectives(out, 2, "torchrun")


@pytest.mark.slow
def test_legacy_launch_passes_local_rank_flag(worker: Path, tmp_path: Path) -> None:
    """``torch.distributed.launch`` appends --local-rank=N; the worker's strict argparse must not see it."""
    out = tmp_path / "out.json"
    launch = ["-m", "torch.distributed.launch", "--nproc_per_node", "2", "--master_port", str(free_port())]
    finished = run_python([*launch, str(worker), str(out)])
    assert finished.returncode == 0, finished.output
    assert load(out)["params_equal"]


@pytest.mark.slow
def test_two_node_torchrun_on_loopback(worker: Path, tmp_path: Path) -> None:
    out, port = tmp_path / "out.json", free_port()
    agents = [
        start(
            [
                *("-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1"),
                *("--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", str(port)),
                *(str(worker), str(out), "--devices", "1", "--num-nodes", "2"),
            ]
        )
        for node in (0, 1)
    ]
    for agent in agents:
        finished = finish(agent)
        assert finished.returncode == 0, finished.output
    assert_same_math_and_collectives(out, 2, "torchrun")


@pytest.mark.slow
def test_simulated_slurm_job(worker: Path, tmp_path: Path) -> None:
    out, port = tmp_path / "out.json", free_port()
    tasks = []
    for rank in (0, 1):
        env = clean_env(
            SLURM_NTASKS="2",
            SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(rank),
            SLURM_NODEID="0",
            SLURM_NODELIST="127.0.0.1",
            SLURM_JOB_ID="4242",
            SLURM_JOB_NAME="steadytrain-test",
            MASTER_PORT=str(port),
        )
        tasks.append(start([str(worker), str(out)], env=env))
    for task in tasks:
        finished = finish(task)
        assert finished.returncode == 0, finished.output
    assert_same_math_and_collectives(out, 2, "slurm")


# ---- failures: every rank ends fast, one traceback, no orphans -------------------------------
FAILURES = {  # mode: (failing rank, exit code of the job)
    "raise1": (1, 1),  # rank 0 waits in a collective
    "raise1_busy": (1, 1),  # rank 0 is busy outside any collective: only the watchdog can stop it
    "kill1": (1, 137),
    "raise0": (0, 1),  # rank 1 waits in a collective
    "kill0": (0, -9),  # the children die with rank 0 (PR_SET_PDEATHSIG)
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(FAILURES))
def test_a_failing_rank_ends_the_job_fast(worker: Path, tmp_path: Path, mode: str) -> None:
    victim, code = FAILURES[mode]
    finished = run_python([str(worker), str(tmp_path / "out.json"), "--mode", mode], timeout=90)
    seconds = finished.ended_at - finished.marker_time("RAISE_AT")
    print(f"{mode}: job ended {seconds:.2f}s after the failure")
    assert finished.returncode == code, finished.output
    assert seconds < 5, finished.output
    assert_no_leftovers(str(worker))
    output = finished.output
    if mode.startswith("raise"):
        # once in its traceback; rank 1's also on the job's last line (rank 0's traceback is already last)
        assert output.count(f"ValueError: boom from rank {victim}") == 1 + (victim == 1), output
        if victim == 1:
            assert output.rstrip().splitlines()[-1] == "steadytrain: rank 1 failed: ValueError: boom from rank 1"
        assert f"[rank{victim}]: Traceback" in output
        assert f"[rank{1 - victim}]: Traceback" not in output, output  # no echo from the survivor
    if victim == 1:
        assert "steadytrain: rank 1 " in output and "stopping all ranks" in output
    if mode == "kill1":
        assert "killed by SIGKILL" in output


@pytest.mark.slow
def test_a_clean_system_exit_lets_the_other_ranks_finish(worker: Path, tmp_path: Path) -> None:
    finished = run_python([str(worker), str(tmp_path / "out.json"), "--mode", "exit0"], timeout=90)
    assert finished.returncode == 0, finished.output
    assert "rank 1 clean exit" in finished.output
    assert_no_leftovers(str(worker))


@pytest.mark.slow
def test_master_port_in_use_is_named(worker: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = run_python([str(worker), str(tmp_path / "out.json")], env=clean_env(MASTER_PORT=str(port)))
    assert finished.returncode != 0
    assert f"cannot listen on MASTER_PORT={port}" in finished.output, finished.output
    assert_no_leftovers(str(worker))


@pytest.mark.slow
def test_missing_rank_fails_with_world_size_and_address(worker: Path, tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    args = [str(worker), str(tmp_path / "out.json"), "--rendezvous-timeout", "2"]
    finished = run_python(args, env=env, timeout=60)
    assert finished.returncode != 0
    assert f"not all 2 ranks (WORLD_SIZE) joined at 127.0.0.1:{port} within 2s" in finished.output, finished.output


@pytest.mark.slow
@pytest.mark.parametrize(
    ("accelerator", "synced_class"),
    [
        ("cpu", "CPUSyncBatchNorm"),
        pytest.param(
            "cuda",
            "SyncBatchNorm",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs"),
            ],
        ),
    ],
)
def test_sync_batchnorm_2x4_matches_batchnorm_1x8(
    worker: Path, tmp_path: Path, accelerator: str, synced_class: str
) -> None:
    out = tmp_path / "out.json"
    finished = run_python([str(worker), str(out), "--mode", "syncbn", "--accelerator", accelerator])
    assert finished.returncode == 0, finished.output
    r = load(out)
    assert r["is_sync"] == synced_class
    assert r["params_diff"] < 1e-5 and r["buffers_diff"] < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_every_rank_validates_with_rank_zeros_batchnorm_statistics(tmp_path: Path, strategy: str) -> None:
    """Each rank's training forwards update its BatchNorm statistics with its own batches; validation
    must use rank 0's (what DDP's forward broadcasts, and what the checkpoint holds), as in Lightning."""
    out = tmp_path / "out.json"
    script = Path(__file__).parents[1] / "scripts" / "eval_buffers.py"
    finished = run_python([str(script), str(out), strategy])
    assert finished.returncode == 0, finished.output
    r = load(out)
    assert len(r["seen"]) == 2  # one validation per epoch
    for per_rank in r["seen"]:
        assert per_rank[1] == per_rank[0], "rank 1 validated with its own BatchNorm statistics"
    assert r["seen"][-1][0] == r["saved"]
    assert r["seen"][0][0] != r["seen"][1][0]  # the statistics moved: the check is not vacuous


# ---- in-process: one rank, a real gloo group -------------------------------------------------
class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.lin(batch).pow(2).mean()

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> str:
        return f"validation {batch_idx}"


def test_one_rank_group_runs_a_step_and_outlives_the_stage_until_destroyed() -> None:
    strategy = DDPStrategy(timeout=timedelta(seconds=60))
    strategy.configure("cpu", [0])
    strategy.setup_environment()
    try:
        model = strategy.setup_module(Tiny())
        assert isinstance(model, nn.parallel.DistributedDataParallel)
        strategy.step_function("training")(torch.ones(4, 2), 0).backward()
        assert strategy.step_function("validation")(torch.ones(1, 2), 3) == "validation 3"
        assert strategy.all_reduce(torch.tensor([2, 4]), "mean").tolist() == [2.0, 4.0]
        assert strategy.all_gather(torch.tensor([1.0])).shape == (1, 1)
        assert strategy.broadcast({"a": 1}) == {"a": 1}
        assert list(strategy.module_state_dict()) == ["lin.weight", "lin.bias"]
        assert strategy.gather_objects("x") == ["x"]
        assert strategy.reduce_boolean_decision(True) and not strategy.reduce_boolean_decision(False)
        assert strategy.start_boolean_decision(True)() and not strategy.start_boolean_decision(False)()
        counter = torch.tensor([2**40 + 1])
        strategy._broadcast([counter, torch.ones(2)])  # one flat tensor of both would be float32: rounded
        assert counter.item() == 2**40 + 1
    finally:
        strategy.teardown()
    assert torch.distributed.is_initialized() and strategy.model is None  # a later stage still needs the group
    strategy.destroy_process_group()
    assert not torch.distributed.is_initialized()


# ---- no processes --------------------------------------------------------------------------
def test_backend_follows_accelerator() -> None:
    cpu, cuda, forced = DDPStrategy(), DDPStrategy(), DDPStrategy(process_group_backend="gloo")
    cpu.configure("cpu", [0, 1])
    cuda.configure("cuda", [0, 1])
    forced.configure("cuda", [0, 1])
    assert (cpu.backend, cuda.backend, forced.backend) == ("gloo", "nccl", "gloo")
    assert cuda.root_device == torch.device("cuda", 0)
    assert (cpu.world_size, cpu.global_rank) == (2, 0)  # before the ranks start: the planned world


def test_ddp_runs_on_cpu_or_cuda_only() -> None:
    with pytest.raises(ValueError, match="accelerator='cpu' \\(gloo\\) or 'cuda'"):
        DDPStrategy().configure("mps", [0, 1])


def test_cpu_sync_batchnorm_swaps_every_batchnorm_and_keeps_its_tensors() -> None:
    inner = nn.Sequential(nn.BatchNorm2d(2, momentum=None))
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), inner)
    weight, running_mean = net[1].weight, net[1].running_mean
    converted = convert_cpu_sync_batchnorm(net)
    assert converted is net
    assert [type(m).__name__ for m in net.modules()].count("CPUSyncBatchNorm") == 2
    assert net[1].weight is weight and net[1].running_mean is running_mean
    assert inner[0].momentum is None
    x = torch.randn(8, 3)
    reference = nn.BatchNorm1d(4)
    assert torch.allclose(net[1](x @ torch.ones(3, 4)), reference(x @ torch.ones(3, 4)))  # one process


def test_start_method_is_popen_spawn_or_fork() -> None:
    with pytest.raises(ValueError, match=r"start_method=.forkserver.*popen, spawn, fork"):
        DDPStrategy(start_method="forkserver")
    assert DDPStrategy(start_method="spawn").launcher.start_method == "spawn"


def test_step_wrapper_dispatches_to_the_stage() -> None:
    wrapper = StepWrapper(Tiny())
    assert wrapper(torch.ones(1, 2), 5, "validation") == "validation 5"
    assert wrapper(torch.ones(1, 2), 0).ndim == 0


def test_broadcast_buffers_false_skips_only_the_per_forward_sync() -> None:
    assert _buffer_sync_kwargs(True) == {}
    assert set(_buffer_sync_kwargs(False).values()) == {False}
