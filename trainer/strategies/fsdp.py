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
from collections.abc import Iterable, Iterator, Mapping
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
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
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
from trainer.precision import Precision
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
            self._broadcast(_plain_tensors(module))  # every rank starts from rank 0's weights
            _checkpoint_activations(module, self.activation_checkpointing)
            self._shard(module)
        _register_steps(module)
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


def _offload_policy(cpu_offload: bool | CPUOffloadPolicy) -> OffloadPolicy | None:
    if isinstance(cpu_offload, OffloadPolicy):
        return cpu_offload
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
