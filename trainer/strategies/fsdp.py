"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``): one process per device.

Each rank keeps only its shard of every parameter, gradient and optimizer state (DTensors); a
sharded submodule gathers its full parameters for its forward and backward, and gradients are
reduce-scattered in backward. Processes, the process group and the collectives are
``ParallelStrategy``'s, exactly as for DDP. Checkpoints, clipping and accumulation are
``DTensorStrategy``'s: ``torch.distributed.checkpoint`` directories where every rank writes its own
shards (``trainer/checkpoint/sharded.py``), or one gathered file with ``state_dict_type="full"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Literal

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from trainer.exceptions import MisconfigurationException
from trainer.precision import Precision
from trainer.strategies.dtensor import DTensorStrategy, plain_tensors, register_steps

_MIXED = ("16-mixed", "bf16-mixed")


class FSDPStrategy(DTensorStrategy):
    """Shards parameters, gradients and optimizer states across ranks (gloo on CPU, NCCL on CUDA)."""

    name = "fsdp"
    step_collectives = "a collective inside the step (FSDP's all-gather in forward, reduce-scatter in backward)"

    def __init__(
        self,
        *,
        min_params_to_shard: int = 100_000,
        reshard_after_forward: bool = True,
        cpu_offload: bool | CPUOffloadPolicy = False,
        activation_checkpointing: Iterable[type[nn.Module]] = (),
        sharding: Literal["full", "hybrid"] = "full",
        mixed_precision: MixedPrecisionPolicy | None = None,
        state_dict_type: Literal["sharded", "full"] = "sharded",
        async_save: bool = False,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        rendezvous_timeout: timedelta = timedelta(minutes=3),
        start_method: str = "popen",
    ) -> None:
        """``min_params_to_shard``: a submodule with at least this many parameters (not already in a sharded
        descendant) is sharded on its own, so only it is gathered during its forward; the root takes the rest.
        ``sharding="hybrid"`` shards within a node and replicates across nodes. ``mixed_precision`` defaults
        to the Trainer's precision: "bf16-mixed"/"16-mixed" compute in that dtype, reduce gradients in fp32."""
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            rendezvous_timeout=rendezvous_timeout,
            start_method=start_method,
        )
        if sharding not in ("full", "hybrid"):
            raise MisconfigurationException(f"FSDPStrategy(sharding={sharding!r}): choose 'full' or 'hybrid'.")
        if state_dict_type not in ("sharded", "full"):
            raise MisconfigurationException(
                f"FSDPStrategy(state_dict_type={state_dict_type!r}): choose 'sharded' or 'full'."
            )
        self.min_params_to_shard = min_params_to_shard
        self.reshard_after_forward = reshard_after_forward
        self.offload_policy = _offload_policy(cpu_offload)
        self.activation_checkpointing = tuple(activation_checkpointing)
        self.sharding = sharding
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
        if not isinstance(module, FSDPModule):
            module = module.to(self.root_device)
            self._broadcast(plain_tensors(module))  # every rank starts from rank 0's weights
            _checkpoint_activations(module, self.activation_checkpointing)
            self._shard(module)
        register_steps(module)
        self.module = self.model = module
        return module

    def _shard(self, module: nn.Module) -> None:
        mesh = self.device_mesh()
        if not any(isinstance(m, FSDPModule) for m in module.modules()):
            for sub in _shard_plan(module, self.min_params_to_shard):
                fully_shard(sub, mesh=mesh, **self._shard_kwargs())
        fully_shard(module, mesh=mesh, **self._shard_kwargs())

    def device_mesh(self) -> DeviceMesh:
        """1-D over all ranks, or (nodes, ranks per node) for hybrid sharding."""
        if self.mesh is None:
            device = self.root_device.type
            if self.sharding == "hybrid":
                shape = (self.num_nodes, self.world_size // self.num_nodes)
                self.mesh = init_device_mesh(device, shape, mesh_dim_names=("replicate", "shard"))
            else:
                self.mesh = init_device_mesh(device, (self.world_size,), mesh_dim_names=("shard",))
        return self.mesh

    def _shard_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"reshard_after_forward": self.reshard_after_forward}
        if self.mixed_precision is not None:
            kwargs["mp_policy"] = self.mixed_precision
        if self.offload_policy is not None:
            kwargs["offload_policy"] = self.offload_policy
        return kwargs


def _offload_policy(cpu_offload: bool | CPUOffloadPolicy) -> OffloadPolicy | None:
    if isinstance(cpu_offload, OffloadPolicy):
        return cpu_offload
    # pinned memory needs an accelerator; without one, plain CPU memory
    return CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if cpu_offload else None


def _shard_plan(root: nn.Module, threshold: int) -> list[nn.Module]:
    """Submodules to shard, innermost first: each with ``threshold`` parameters not taken by one inside it."""
    taken: set[int] = set()
    plan = []
    for sub in reversed(list(root.modules())):
        if sub is root:
            continue
        own = [p for p in sub.parameters() if id(p) not in taken]
        if own and sum(p.numel() for p in own) >= threshold:
            plan.append(sub)
            taken.update(id(p) for p in own)
    return plan


def _checkpoint_activations(module: nn.Module, block_classes: tuple[type[nn.Module], ...]) -> None:
    """Recompute these blocks' activations in backward; in place, so parameter names do not change."""
    if not block_classes:
        return
    from torch.distributed._composable import checkpoint

    for sub in list(module.modules()):
        if isinstance(sub, block_classes) and sub is not module:
            checkpoint(sub)
