"""ModelParallelStrategy: tensor parallelism with FSDP2 on a 2-D DeviceMesh.

Unit tests run in one process (arguments, Lightning's errors, how loaders are split); the slow ones self-launch CPU
ranks on gloo through ``tests/scripts/model_parallel_job.py`` and compare with one device.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import trainer
from tests.helpers import clean_env, finish, free_port, start
from trainer.checkpoint.sharded import is_complete_checkpoint_dir
from trainer.strategies import ModelParallelStrategy
from trainer.strategies.model_parallel import _warn_unsynced

SCRIPT = Path(__file__).parents[1] / "scripts" / "model_parallel_job.py"
AFTER_STEP_3 = 6  # the job accumulates 2 batches per step: a resume from step 3 runs batches 6 to 11


def cpu(strategy: ModelParallelStrategy, devices: int, num_nodes: int = 1) -> ModelParallelStrategy:
    strategy.configure("cpu", list(range(devices)), num_nodes)
    return strategy


# ---- one process ---------------------------------------------------------------------------------------
def test_auto_sizes_are_nodes_by_devices_per_node() -> None:
    assert cpu(ModelParallelStrategy(), 2).mesh_shape == (1, 2)
    assert cpu(ModelParallelStrategy(), 2, num_nodes=3).mesh_shape == (3, 2)
    assert cpu(ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), 2).mesh_shape == (2, 1)


@pytest.mark.parametrize(("devices", "num_nodes", "dp", "tp"), [(2, 1, 1, 1), (2, 1, 2, 2), (2, 2, 1, 2), (2, 2, 4, 2)])
def test_sizes_must_multiply_to_the_world_size(devices: int, num_nodes: int, dp: int, tp: int) -> None:
    strategy = ModelParallelStrategy(data_parallel_size=dp, tensor_parallel_size=tp)
    expected = rf"`data_parallel_size={dp}` and `tensor_parallel_size={tp}` multiplied should equal the world size "
    with pytest.raises(RuntimeError, match=expected + rf"\({devices * num_nodes}\)"):
        cpu(strategy, devices, num_nodes)


@pytest.mark.parametrize("bad", [0, -2, "two", 1.5, True, None])
def test_sizes_are_positive_integers_or_auto(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"tensor_parallel_size={bad!r}\): give a positive integer or 'auto'"):
        ModelParallelStrategy(tensor_parallel_size=bad)


def test_trainer_takes_it_and_refuses_a_wrong_product_before_starting_processes() -> None:
    fit = trainer.Trainer(strategy=ModelParallelStrategy(), accelerator="cpu", devices=2, logger=False)
    assert isinstance(fit.strategy, ModelParallelStrategy) and fit.strategy.mesh_shape == (1, 2)
    assert fit.strategy.distributed_sampler_kwargs == {"num_replicas": 1, "rank": 0}  # one replica: same batches
    with pytest.raises(RuntimeError, match="multiplied should equal the world size"):
        trainer.Trainer(strategy=ModelParallelStrategy(tensor_parallel_size=3), accelerator="cpu", devices=2)


def test_precisions_lightning_supports_and_the_rest_refused() -> None:
    for ok in ("32-true", "bf16-mixed", "bf16-true"):
        trainer.Trainer(strategy=ModelParallelStrategy(), accelerator="cpu", devices=1, precision=ok, logger=False)
    with pytest.raises(ValueError, match=r"does not support `Trainer\(..., precision='64-true'\)`.*32-true, bf16"):
        trainer.Trainer(strategy=ModelParallelStrategy(), accelerator="cpu", devices=1, precision="64-true")


def test_device_mesh_before_processes_and_without_a_trainer() -> None:
    with pytest.raises(RuntimeError, match="Accessing the device mesh before processes have initialized"):
        _ = ModelParallelStrategy().device_mesh
    assert trainer.Module().device_mesh is None


def test_configure_model_is_required_and_fsdp1_refused() -> None:
    class Plain(trainer.Module):
        pass

    strategy = cpu(ModelParallelStrategy(), 1)
    with pytest.raises(TypeError, match="you are required to override the `configure_model\\(\\)` hook"):
        strategy.setup_module(Plain())

    from torch.distributed.fsdp import FullyShardedDataParallel

    class Legacy(trainer.Module):
        def configure_model(self) -> None:
            pass

    legacy = Legacy()
    fsdp1 = FullyShardedDataParallel.__new__(FullyShardedDataParallel)  # only its type is looked at
    nn.Module.__init__(fsdp1)
    legacy.add_module("wrapped", fsdp1)
    with pytest.raises(TypeError, match="only supports the new FSDP2 APIs"):
        strategy.setup_module(legacy)


def test_parameters_left_off_the_data_parallel_mesh_warn() -> None:
    with pytest.warns(UserWarning, match=r"data_parallel_size=2\): Linear has parameters .* drift apart"):
        _warn_unsynced(nn.Linear(2, 2), 2)


# ---- several ranks (gloo) ------------------------------------------------------------------------------
def run(out: Path, tag: str, *args: str) -> subprocess.Popen[str]:
    return start([str(SCRIPT), str(out), tag, *args], env=clean_env(PYTHONUNBUFFERED="1"), cwd=out)


def results(out: Path, tag: str, *jobs: subprocess.Popen[str]) -> dict[int, dict[str, Any]]:
    for job in jobs:
        finished = finish(job, timeout=240)
        assert finished.returncode == 0, finished.output[-5000:]
    files = sorted(out.glob(f"{tag}-rank*.pt"))
    return {int(f.stem.rsplit("rank", 1)[1]): torch.load(f, weights_only=True) for f in files}


def max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a["params"].keys() == b["params"].keys()
    return max((a["params"][k] - b["params"][k]).abs().max().item() for k in a["params"])


def close_losses(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) < 1e-6 for x, y in zip(a, b))


@pytest.mark.slow
def test_tensor_parallel_matches_one_device_and_resumes_from_its_sharded_checkpoint(tmp_path: Path) -> None:
    """tp=2 (dp=1) on 2 ranks: the losses and weights of one device (AdamW, accumulation, norm clipping over every
    shard); its DCP directory resumes bitwise on the same mesh, and on one device (another mesh) within float
    tolerance."""
    single_job, tp_job = run(tmp_path, "single", "--single"), run(tmp_path, "tp", "--save-at", "3")
    single, tp = results(tmp_path, "single", single_job), results(tmp_path, "tp", tp_job)
    assert sorted(tp) == [0, 1] and tp[0]["mesh"] == [["data_parallel", "tensor_parallel"], [1, 2]]
    assert tp[0]["global_step"] == single[0]["global_step"] == 6 and len(tp[0]["losses"]) == 12
    assert close_losses(tp[0]["losses"], single[0]["losses"]) and tp[0]["losses"] == tp[1]["losses"]
    assert max_diff(tp[0], single[0]) < 1e-6 and max_diff(tp[0], tp[1]) == 0
    checkpoint = tmp_path / "tp-step3.ckpt"
    assert is_complete_checkpoint_dir(checkpoint)
    assert {"__0_0.distcp", "__1_0.distcp"} <= {p.name for p in checkpoint.iterdir()}  # each rank its shards

    same_job = run(tmp_path, "resumed", "--resume", checkpoint.name)
    one_job = run(tmp_path, "one", "--single", "--resume", checkpoint.name)
    resumed, one = results(tmp_path, "resumed", same_job), results(tmp_path, "one", one_job)
    assert resumed[0]["global_step"] == 6 and resumed[0]["losses"] == tp[0]["losses"][AFTER_STEP_3:]
    assert max_diff(resumed[0], tp[0]) == 0 and max_diff(resumed[1], tp[1]) == 0
    assert close_losses(one[0]["losses"], single[0]["losses"][AFTER_STEP_3:]) and max_diff(one[0], single[0]) < 1e-6


@pytest.mark.slow
def test_full_checkpoint_resumes_exactly_and_on_another_mesh(tmp_path: Path) -> None:
    """save_distributed_checkpoint=False: one file of full tensors, which resumes bitwise on the same mesh, and on a
    2 x 1 mesh (FSDP2 over the data-parallel dimension, each replica half of every batch) within float tolerance."""
    full = results(tmp_path, "full", run(tmp_path, "full", "--full-state", "--save-at", "3"))
    assert (tmp_path / "full-step3.ckpt").is_file()  # one file, gathered on rank 0
    weights = torch.load(tmp_path / "full-step3.ckpt", weights_only=True)["state_dict"]
    assert weights["model.w1.weight"].shape == (32, 16)  # the full tensor, not a shard
    resumed = results(tmp_path, "resumed", run(tmp_path, "resumed", "--full-state", "--resume", "full-step3.ckpt"))
    assert resumed[0]["losses"] == full[0]["losses"][AFTER_STEP_3:] and max_diff(resumed[0], full[0]) == 0
    other = results(tmp_path, "dp2", run(tmp_path, "dp2", "--dp", "2", "--tp", "1", "--resume", "full-step3.ckpt"))
    assert other[0]["mesh"] == [["data_parallel", "tensor_parallel"], [2, 1]] and other[0]["global_step"] == 6
    assert max_diff(other[0], full[0]) < 1e-6 and max_diff(other[1], full[0]) < 1e-6


@pytest.mark.slow
def test_two_by_two_on_four_ranks_matches_one_device(tmp_path: Path) -> None:
    """dp=2 ("auto": the nodes) x tp=2 ("auto": the devices of a node) on two simulated nodes of 2 ranks (torchrun on
    loopback): FSDP2 over tensor parallel, each replica half of every batch, the weights of one device."""
    port = free_port()
    nodes = [
        start(
            [
                *("-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2", "--node_rank", str(node)),
                *("--master_addr", "127.0.0.1", "--master_port", str(port)),
                *(str(SCRIPT), str(tmp_path), "grid", "--devices", "2", "--num-nodes", "2"),
            ],
            cwd=tmp_path,
        )
        for node in (0, 1)
    ]
    single_job = run(tmp_path, "single", "--single")
    grid, single = results(tmp_path, "grid", *nodes), results(tmp_path, "single", single_job)
    assert sorted(grid) == [0, 1, 2, 3] and grid[0]["mesh"] == [["data_parallel", "tensor_parallel"], [2, 2]]
    assert grid[0]["losses"] == grid[1]["losses"] != grid[2]["losses"]  # a replica's two ranks read one batch
    assert all(max_diff(grid[r], single[0]) < 1e-6 for r in grid)


@pytest.mark.slow
def test_a_model_built_on_the_meta_device_gets_its_shards_and_resumes_exactly(tmp_path: Path) -> None:
    """trainer.init_module(empty_init=True): the module is built on the meta device (no memory), each rank gets
    memory for its shards only once configure_model parallelized it, reset_parameters() initialises them, and a
    checkpoint's weights load after that (a resume continues bitwise, its weights not re-initialised)."""
    meta = results(tmp_path, "meta", run(tmp_path, "meta", "--empty-init", "--save-at", "3"))
    assert meta[0]["built_on_meta"] and meta[0]["meta_left"] == [] and meta[1]["meta_left"] == []
    assert meta[0]["local_numel"]["model.w1.weight"] == 32 * 16 // 2  # this rank's half of the column split
    losses = meta[0]["losses"]
    assert losses == meta[1]["losses"] and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0] < 10
    resumed = results(tmp_path, "resumed", run(tmp_path, "resumed", "--empty-init", "--resume", "meta-step3.ckpt"))
    assert resumed[0]["built_on_meta"] and resumed[0]["losses"] == losses[AFTER_STEP_3:]
    assert max_diff(resumed[0], meta[0]) == 0 and max_diff(resumed[1], meta[1]) == 0
