"""Lightning's FSDPStrategy options on FSDP2, in one process: what each policy picks, the layout each sharding
strategy means, activation checkpointing recomputing, and the refusals. (On 2 gloo ranks, against one device:
``test_fsdp_integration.py``.)"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import CPUOffload, CPUOffloadPolicy, ShardingStrategy
from torch.distributed.fsdp.wrap import CustomPolicy, ModuleWrapPolicy, size_based_auto_wrap_policy

import trainer
from trainer.exceptions import MisconfigurationException
from trainer.plugins import CheckpointIO, TorchCheckpointIO
from trainer.plugins.environments import LightningEnvironment
from trainer.strategies.fsdp import FSDPStrategy
from trainer.strategies.fsdp_policies import Layout, checkpoint_activations, policy_plan


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = nn.Linear(width, width)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(self.inner(x))


def model() -> nn.Sequential:
    return nn.Sequential(Block(10), Block(10), nn.Linear(10, 1))  # 110, 110, 11 parameters


def test_a_set_of_classes_a_torch_policy_or_a_callable_picks_submodules_innermost_first() -> None:
    net = model()
    assert policy_plan(net, {Block}) == [net[1], net[0]]
    assert policy_plan(net, ModuleWrapPolicy({nn.Linear})) == [net[2], net[1].inner, net[0].inner]
    assert policy_plan(net, CustomPolicy(lambda m: m is net[2])) == [net[2]]
    # FSDP1's walk: each Block's Linear takes its 110 parameters; the Block has none left, the last Linear 11
    assert policy_plan(net, partial(size_based_auto_wrap_policy, min_num_params=100)) == [net[1].inner, net[0].inner]
    assert policy_plan(net, {nn.Sequential}) == []  # the root is always sharded, never by the policy


def test_the_auto_wrap_policy_replaces_the_size_rule() -> None:
    net = model()
    assert FSDPStrategy(auto_wrap_policy={Block})._shard_plan(net) == [net[1], net[0]]
    assert FSDPStrategy(min_params_to_shard=100)._shard_plan(net) == [net[1].inner, net[0].inner]


def test_activation_checkpointing_policy_recomputes_the_chosen_blocks_with_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain, checkpointed = model(), model()
    checkpointed.load_state_dict(plain.state_dict())
    checkpoint_activations(checkpointed, FSDPStrategy(activation_checkpointing_policy={Block}).checkpointing_policy)
    x = torch.randn(4, 10)
    for net in (plain, checkpointed):
        net(x).sum().backward()
    assert [b.calls for b in plain[:2]] == [1, 1]
    assert [b.calls for b in checkpointed[:2]] == [2, 2]  # forward, and again in backward
    for a, b in zip(plain.parameters(), checkpointed.parameters()):
        assert torch.equal(a.grad, b.grad)  # type: ignore[arg-type]
    assert [n for n, _ in checkpointed.named_parameters()] == [n for n, _ in plain.named_parameters()]


def test_layers_the_model_checkpoints_itself_are_left_as_they_are_with_lightnings_warning() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    net = model()
    net[0] = checkpoint_wrapper(net[0])  # type: ignore[assignment]
    with pytest.warns(UserWarning, match="already contains checkpointed layers"):
        checkpoint_activations(net, {Block})
    net(torch.randn(2, 10)).sum().backward()
    assert net[1].calls == 1  # not checkpointed by the policy


@pytest.mark.parametrize(
    ("value", "mesh_kind", "reshard"),
    [
        ("FULL_SHARD", "shard", True),
        ("shard_grad_op", "shard", False),
        (ShardingStrategy.SHARD_GRAD_OP, "shard", False),
        ("NO_SHARD", "replicate", False),
        (ShardingStrategy.HYBRID_SHARD, "hybrid", True),
        ("_HYBRID_SHARD_ZERO2", "hybrid", False),
        (None, "shard", True),
    ],
)
def test_each_sharding_strategy_is_a_mesh_and_a_reshard_rule(value: Any, mesh_kind: str, reshard: bool) -> None:
    strategy = FSDPStrategy(sharding_strategy=value)
    assert (strategy.layout.mesh_kind, strategy.reshard_after_forward) == (mesh_kind, reshard)


def test_a_device_mesh_tuple_must_cover_the_world() -> None:
    assert FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 4)).layout.mesh == (2, 4)
    with pytest.raises(MisconfigurationException, match=r"device_mesh=\(2, 2\).*world size 2.*\(1, 2\)"):
        Layout("hybrid", True, (2, 2)).build_mesh("cpu", world_size=2, num_nodes=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(sharding_strategy="RING"), r"sharding_strategy='RING'.*FULL_SHARD, SHARD_GRAD_OP, NO_SHARD"),
        (dict(sharding_strategy=3), r"sharding_strategy=3\): choose one of"),
        (dict(sharding="hybrid", sharding_strategy="FULL_SHARD"), r"sharding='hybrid'.*disagree"),
        (dict(reshard_after_forward=True, sharding_strategy="SHARD_GRAD_OP"), r"reshard_after_forward=False"),
        (dict(device_mesh=(1, 2)), r"device_mesh=\(1, 2\).*HYBRID_SHARD.*got 'FULL_SHARD'"),
        (dict(sharding_strategy="HYBRID_SHARD", device_mesh=(0, 2)), r"device_mesh=\(0, 2\).*positive ints"),
        (dict(sharding_strategy="HYBRID_SHARD", device_mesh="2x2"), r"device_mesh='2x2'"),
        (dict(auto_wrap_policy={Block}, min_params_to_shard=10), r"min_params_to_shard=10.*set one"),
        (dict(auto_wrap_policy={"Block"}), r"auto_wrap_policy=\{'Block'\}.*'Block' is not one"),
        (dict(auto_wrap_policy=3), r"auto_wrap_policy=3\): give a set of nn.Module classes"),
        (dict(activation_checkpointing=[Block], activation_checkpointing_policy={Block}), r"cannot set both"),
    ],
)
def test_contradicting_or_unknown_options_are_refused_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationException, match=message):
        FSDPStrategy(**kwargs)


class NotingIO(CheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        raise AssertionError("not reached")

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        raise AssertionError("not reached")

    def remove_checkpoint(self, path: Any) -> None:
        raise AssertionError("not reached")


def test_a_checkpoint_io_needs_full_state_checkpoints(tmp_path: Path) -> None:
    """A sharded checkpoint is written by every rank through DCP: a user's CheckpointIO would never be called."""
    with pytest.raises(MisconfigurationException, match=r"state_dict_type='sharded'.*NotingIO.*state_dict_type='full'"):
        FSDPStrategy(checkpoint_io=NotingIO()).setup_module(nn.Linear(2, 2))
    plugged = FSDPStrategy()
    plugged.checkpoint_io = NotingIO()  # Trainer(plugins=[io])
    with pytest.raises(MisconfigurationException, match="NotingIO"):
        plugged.setup_module(nn.Linear(2, 2))
    FSDPStrategy(checkpoint_io=TorchCheckpointIO())._check_checkpoint_io()  # the default writer: nothing lost
    assert isinstance(FSDPStrategy(checkpoint_io=NotingIO(), state_dict_type="full").checkpoint_io, NotingIO)


def test_cluster_environment_and_parallel_devices_reach_the_trainer() -> None:
    env = LightningEnvironment()
    strategy = FSDPStrategy(parallel_devices=[torch.device("cpu")] * 2, cluster_environment=env)
    fit = trainer.Trainer(strategy=strategy, logger=False)
    assert (fit.num_devices, fit.world_size) == (2, 2)
    assert fit.strategy.cluster_environment is env  # type: ignore[attr-defined]
    with pytest.raises(MisconfigurationException, match="not a ClusterEnvironment"):
        FSDPStrategy(cluster_environment="slurm")  # type: ignore[arg-type]


def test_lightnings_fsdp1_cpu_offload_is_fsdp2s_offload_policy() -> None:
    assert isinstance(FSDPStrategy(cpu_offload=CPUOffload(offload_params=True)).offload_policy, CPUOffloadPolicy)
    assert FSDPStrategy(cpu_offload=CPUOffload(offload_params=False)).offload_policy is None
    assert FSDPStrategy(cpu_offload=None).offload_policy is None


@pytest.fixture
def one_rank_group() -> Any:
    """A process group of one rank in this process (a DeviceMesh needs one), destroyed afterwards."""
    import torch.distributed as dist

    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_device_mesh_object_is_used_as_given_when_its_dimensions_fit(one_rank_group: Any) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    flat = init_device_mesh("cpu", (1,))
    square = init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard"))
    assert FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=square).device_mesh() is square
    assert FSDPStrategy(sharding_strategy="SHARD_GRAD_OP", device_mesh=flat).device_mesh() is flat
    for name, mesh in (("FULL_SHARD", square), ("HYBRID_SHARD", flat), ("NO_SHARD", flat)):
        with pytest.raises(MisconfigurationException, match=rf"sharding_strategy='{name}', device_mesh=<"):
            FSDPStrategy(sharding_strategy=name, device_mesh=mesh)
