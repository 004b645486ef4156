"""Fully sharded data parallel (FSDP2, ``torch.distributed.fsdp.fully_shard``): one process per device.

Each rank keeps only its shard of every parameter, gradient and optimizer state (DTensors); a
sharded submodule gathers its full parameters for its forward and backward, and gradients are
reduce-scattered in backward. Processes, the process group and the collectives are
``ParallelStrategy``'s, exactly as for DDP. Checkpoints are ``torch.distributed.checkpoint``
directories where every rank writes its own shards (``trainer/checkpoint/sharded.py``), or one
gathered file with ``state_dict_type="full"``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    CPUOffload,
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor

from trainer.checkpoint import sharded
from trainer.checkpoint.io import extract_state_dict, strip_prefixes
from trainer.checkpoint.optimizer_names import name_keyed_optimizer_state
from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments import ClusterEnvironment
from trainer.plugins.io import CheckpointIO, TorchCheckpointIO
from trainer.precision import Precision
from trainer.strategies import fsdp_policies as policies
from trainer.strategies.parallel import ParallelStrategy

_STEPS = ("training_step", "validation_step", "test_step", "predict_step")
_MIXED = ("16-mixed", "bf16-mixed")
_registered: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # modules whose steps FSDP already wraps


class FSDPStrategy(ParallelStrategy):
    """Shards parameters, gradients and optimizer states across ranks (gloo on CPU, NCCL on CUDA)."""

    name = "fsdp"
    supports_inference_mode = False  # FSDP reuses its all-gather buffers in training
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
            module = module.to(self.root_device)
            self._broadcast(_plain_tensors(module))  # every rank starts from rank 0's weights
            policies.checkpoint_activations(module, self.checkpointing_policy)
            self._shard(module)
        _register_steps(module)
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

    # ---- the step ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _gradient_sync_off(self) -> Iterator[None]:
        assert isinstance(self.module, FSDPModule)
        self.module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.module.set_requires_gradient_sync(True)

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Accumulate unsharded gradients locally; the window's last micro-batch reduce-scatters them."""
        return self._gradient_sync_off()

    # manual_backward_sync stays the default: FSDP reduce-scatters in every backward (manual_backward too)

    def clip_gradients(self, parameters: list[torch.nn.Parameter], value: float, algorithm: str) -> None:
        """The norm is over every shard: the DTensor total norm made full before it scales the gradients."""
        if algorithm != "norm":
            return super().clip_gradients(parameters, value, algorithm)
        grads = [p.grad for p in parameters if p.grad is not None]
        total = torch.nn.utils.get_total_norm(grads)
        if isinstance(total, DTensor):
            total = total.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(parameters, value, total)

    # ---- checkpoints ---------------------------------------------------------------------
    def _options(self) -> StateDictOptions:
        full = self.state_dict_type == "full"
        return StateDictOptions(full_state_dict=full, cpu_offload=full)

    def module_state_dict(self) -> dict[str, torch.Tensor]:
        """This rank's shards (DTensors), or with ``state_dict_type="full"`` the gathered weights on rank 0."""
        assert self.module is not None
        return dict(get_model_state_dict(self.module, options=self._options()))  # type: ignore[arg-type]

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Keyed by parameter name, so it loads into any world size and any strategy."""
        assert self.module is not None
        return get_optimizer_state_dict(self.module, optimizer, options=self._options())

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Full states (from any strategy's checkpoint) are sharded into this rank's part."""
        assert self.module is not None
        full = name_keyed_optimizer_state(self.module, optimizer, state)
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(self.module, optimizer, full, options=options)

    def load_module_weights(self, module: nn.Module, checkpoint: Mapping[str, Any]) -> None:
        """Into a module ``configure_model`` already sharded, full weights are scattered to the shards."""
        if not any(isinstance(p, DTensor) for p in module.parameters()):
            return super().load_module_weights(module, checkpoint)
        weights = strip_prefixes(extract_state_dict(checkpoint))
        set_model_state_dict(module, weights, options=StateDictOptions(full_state_dict=True))

    def save_checkpoint(self, checkpoint: Mapping[str, Any], path: Path) -> None:
        """A DCP directory with each rank's shards (collective), or one gathered file written by rank 0."""
        if self.state_dict_type == "full":
            return super().save_checkpoint(checkpoint, path)
        sharded.save_sharded(dict(checkpoint), path, self, async_save=self.async_save)

    def teardown(self) -> None:
        sharded.wait_pending()
        super().teardown()

    def offload(self, optimizers: list[torch.optim.Optimizer]) -> None:
        """Sharded parameters stay where they are, as under Lightning's FSDP strategy (its teardown moves nothing)."""


def _offload_policy(cpu_offload: Any) -> OffloadPolicy | None:
    """Ours (a bool or FSDP2's policy) or Lightning's FSDP1 ``CPUOffload(offload_params=...)``."""
    if isinstance(cpu_offload, OffloadPolicy):
        return cpu_offload
    if isinstance(cpu_offload, CPUOffload):
        cpu_offload = cpu_offload.offload_params
    # pinned memory needs an accelerator; without one, plain CPU memory
    return CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if cpu_offload else None


def _register_steps(module: nn.Module) -> None:
    """A step is the root's forward: FSDP gathers the root's parameters around it (once per module)."""
    if module in _registered:
        return
    for step in _STEPS:
        if callable(getattr(module, step, None)):
            register_fsdp_forward_method(module, step)
    _registered.add(module)


def _plain_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers that are not DTensors yet (``configure_model`` may have sharded some)."""
    tensors = [*module.parameters(), *module.buffers()]
    return [t for t in tensors if not isinstance(t, DTensor)]
