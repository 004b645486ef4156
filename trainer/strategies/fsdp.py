"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``): one process per device.

Each rank keeps only its shard of every parameter, gradient and optimizer state (DTensors); a
sharded submodule gathers its full parameters for its forward and backward, and gradients are
reduce-scattered in backward. Processes, the process group and the collectives are
``ParallelStrategy``'s, exactly as for DDP. Checkpoints, clipping and accumulation are
``DTensorStrategy``'s: ``torch.distributed.checkpoint`` directories where every rank writes its own
shards (``trainer/checkpoint/sharded.py``), or one gathered file with ``state_dict_type="full"``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    CPUOffload,
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments import ClusterEnvironment
from trainer.plugins.io import CheckpointIO, TorchCheckpointIO
from trainer.precision import Precision
from trainer.strategies import fsdp_policies as policies
from trainer.strategies.dtensor import DTensorStrategy, plain_tensors, register_steps
from trainer.strategies.meta_init import has_meta_tensors, materialize

_MIXED = ("16-mixed", "bf16-mixed")


class FSDPStrategy(DTensorStrategy):
    """Shards parameters, gradients and optimizer states across ranks (gloo on CPU, NCCL on CUDA)."""

    name = "fsdp"
    step_collectives = "a collective inside the step (FSDP's all-gather in forward, reduce-scatter in backward)"

    def __init__(
        self,
        *,
        min_params_to_shard: int | None = None,
        reshard_after_forward: bool | None = None,
        cpu_offload: bool | CPUOffloadPolicy | CPUOffload | None = False,
        activation_checkpointing: Any = None,
        sharding: Literal["full", "hybrid"] = "full",
        auto_wrap_policy: Any = None,
        activation_checkpointing_policy: Any = None,
        sharding_strategy: Any = None,
        device_mesh: tuple[int, int] | DeviceMesh | None = None,
        mixed_precision: MixedPrecisionPolicy | None = None,
        state_dict_type: Literal["sharded", "full"] = "sharded",
        async_save: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        rendezvous_timeout: timedelta = timedelta(minutes=3),
        start_method: str = "popen",
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        parallel_devices: list[torch.device] | None = None,
    ) -> None:
        """``min_params_to_shard`` (default 100,000): a submodule with at least this many parameters (not already
        in a sharded descendant) is sharded on its own, so only it is gathered during its forward; the root takes
        the rest. Lightning's ``auto_wrap_policy`` picks those submodules instead, ``activation_checkpointing_policy``
        the blocks recomputed in backward, ``sharding_strategy``/``device_mesh`` the layout
        (``trainer/strategies/fsdp_policies.py``). ``sharding="hybrid"`` is ``sharding_strategy="HYBRID_SHARD"``:
        shard within a node, replicate across nodes. ``mixed_precision`` defaults to the Trainer's precision:
        "bf16-mixed"/"16-mixed" compute in that dtype, reduce gradients in fp32."""
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            rendezvous_timeout=rendezvous_timeout,
            start_method=start_method,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            parallel_devices=parallel_devices,
        )
        if state_dict_type not in ("sharded", "full"):
            raise MisconfigurationException(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}): choose 'sharded' or 'full'."
            )
        self.layout = policies.layout(sharding_strategy, sharding, reshard_after_forward, device_mesh)
        self.auto_wrap_policy = policies.checked_policy("auto_wrap_policy", auto_wrap_policy)
        if self.auto_wrap_policy is not None and min_params_to_shard is not None:
            raise MisconfigurationException(
                f"FSDPStrategy(min_params_to_shard={min_params_to_shard}, auto_wrap_policy=...): both pick the "
                "submodules sharded on their own; set one of them."
            )
        self.min_params_to_shard = 100_000 if min_params_to_shard is None else min_params_to_shard
        self.offload_policy = _offload_policy(cpu_offload)
        self.checkpointing_policy = policies.activation_checkpointing(
            activation_checkpointing, activation_checkpointing_policy
        )
        self.mixed_precision = mixed_precision
        self.state_dict_type = state_dict_type
        self.async_save = async_save
        self.mesh: DeviceMesh | None = None

    @property
    def full_state(self) -> bool:
        return self.state_dict_type == "full"

    def connect_precision(self, precision: Precision) -> None:
        """Mixed precision becomes FSDP's policy: parameters gathered in the low dtype, fp32 master weights."""
        if self.mixed_precision is None and getattr(precision, "name", None) in _MIXED:
            dtype = torch.float16 if precision.name == "16-mixed" else torch.bfloat16  # type: ignore[attr-defined]
            self.mixed_precision = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)

    # ---- the module ----------------------------------------------------------------------
    def setup_module(self, module: nn.Module) -> nn.Module:
        """Shard each large submodule (unless ``configure_model`` sharded some itself), then the root.

        A module sharded by an earlier stage (``validate`` after ``fit``) is used as it is.
        """
        self._check_checkpoint_io()
        if not isinstance(module, FSDPModule):
            on_meta = has_meta_tensors(module)  # built by init_module(empty_init=True): memory after sharding
            if not on_meta:
                module = module.to(self.root_device)
                self._broadcast(plain_tensors(module))  # every rank starts from rank 0's weights
            policies.checkpoint_activations(module, self.checkpointing_policy)
            self._shard(module)
            if on_meta:
                materialize(module, self.root_device)
                self._broadcast(plain_tensors(module))
        register_steps(module)
        self.module = self.model = module
        return module

    def _check_checkpoint_io(self) -> None:
        """A ``CheckpointIO`` writes one file: rank 0's gathered checkpoint (``state_dict_type="full"``). A sharded
        checkpoint is a DCP directory every rank writes, which it would never see: refused, not ignored."""
        io = self._checkpoint_io
        if self.state_dict_type == "sharded" and self._checkpoint_io_given and type(io) is not TorchCheckpointIO:
            raise MisconfigurationException(
                f"FSDPStrategy(state_dict_type='sharded') with checkpoint_io={io!r}: a sharded checkpoint is a "
                "directory every rank writes through torch.distributed.checkpoint, not through a CheckpointIO. Use "
                "FSDPStrategy(state_dict_type='full') to write one file with it (async writes of sharded "
                "checkpoints: async_save=True)."
            )

    def _shard(self, module: nn.Module) -> None:
        mesh = self.device_mesh()
        if not any(isinstance(m, FSDPModule) for m in module.modules()):
            for sub in self._shard_plan(module):
                fully_shard(sub, mesh=mesh, **self._shard_kwargs())
        elif self.auto_wrap_policy is not None:  # Lightning's rule: configure_model's own sharding is kept
            policies.warn_on_rank_zero(
                "A FSDP `auto_wrap_policy` is set, but the model is already wrapped. The policy will be ignored."
            )
        fully_shard(module, mesh=mesh, **self._shard_kwargs())

    def _shard_plan(self, module: nn.Module) -> list[nn.Module]:
        if self.auto_wrap_policy is not None:
            return policies.policy_plan(module, self.auto_wrap_policy)
        return policies.size_plan(module, self.min_params_to_shard)

    def device_mesh(self) -> DeviceMesh:
        """1-D over all ranks; (replicate, shard) for hybrid sharding (default: nodes x ranks per node); (world
        size, 1) for NO_SHARD."""
        if self.mesh is None:
            self.mesh = self.layout.build_mesh(self.root_device.type, self.world_size, self.num_nodes)
        return self.mesh

    @property
    def reshard_after_forward(self) -> bool:
        return self.layout.reshard_after_forward

    @property
    def sharding(self) -> str:
        """Our name for the layout: 'full', 'hybrid', or 'replicate' (NO_SHARD)."""
        return {"shard": "full"}.get(self.layout.mesh_kind, self.layout.mesh_kind)

    def _shard_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"reshard_after_forward": self.reshard_after_forward}
        if self.mixed_precision is not None:
            kwargs["mp_policy"] = self.mixed_precision
        if self.offload_policy is not None:
            kwargs["offload_policy"] = self.offload_policy
        return kwargs


def _offload_policy(cpu_offload: Any) -> OffloadPolicy | None:
    """Ours (a bool or FSDP2's policy) or Lightning's FSDP1 ``CPUOffload(offload_params=...)``."""
    if isinstance(cpu_offload, OffloadPolicy):
        return cpu_offload
    if isinstance(cpu_offload, CPUOffload):
        cpu_offload = cpu_offload.offload_params
    # pinned memory needs an accelerator; without one, plain CPU memory
    return CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if cpu_offload else None
