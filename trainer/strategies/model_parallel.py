"""Tensor parallelism with FSDP2 on a 2-D ``DeviceMesh`` ("data_parallel" x "tensor_parallel"): Lightning's
``ModelParallelStrategy``.

The strategy starts the processes and builds the mesh; the user's ``configure_model`` applies the parallelism
with ``self.device_mesh``: ``parallelize_module(..., self.device_mesh["tensor_parallel"], plan)`` splits layers
across a tensor-parallel group, ``fully_shard(..., mesh=self.device_mesh["data_parallel"])`` shards them across
data-parallel replicas. The ranks of one tensor-parallel group read the same batches; the loaders are split over
the data-parallel dimension only. Checkpoints, clipping and accumulation are ``DTensorStrategy``'s: a DCP
directory of each rank's shards, or with ``save_distributed_checkpoint=False`` one gathered file.
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any, Literal

from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from trainer.exceptions import MisconfigurationException, MisconfigurationRuntimeError
from trainer.precision import Precision
from trainer.strategies.dtensor import DTensorStrategy, plain_tensors, register_steps
from trainer.strategies.meta_init import materialize

Size = int | Literal["auto"]
PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-true")  # Lightning's list for this strategy
DIMS = ("data_parallel", "tensor_parallel")


class ModelParallelStrategy(DTensorStrategy):
    """Up to 2-D parallelism (FSDP2 x tensor parallel) applied by the module's ``configure_model``."""

    name = "model_parallel"
    step_collectives = "a collective inside the step (tensor parallel's all-reduce or FSDP's all-gather)"

    def __init__(
        self,
        data_parallel_size: Size = "auto",
        tensor_parallel_size: Size = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
    ) -> None:
        """``data_parallel_size``: replicas the data is split over ("auto": the number of nodes).
        ``tensor_parallel_size``: devices one layer is split over ("auto": the devices of one node); their product
        is the world size. ``save_distributed_checkpoint``: each rank writes its shards into a checkpoint
        directory; False gathers the full weights and optimizer states into one file on rank 0. ``timeout``
        bounds each collective (default: ``Trainer(collective_timeout=...)``)."""
        super().__init__(process_group_backend=process_group_backend, timeout=timeout)
        self._data_parallel_size = _check_size("data_parallel_size", data_parallel_size)
        self._tensor_parallel_size = _check_size("tensor_parallel_size", tensor_parallel_size)
        self.save_distributed_checkpoint = save_distributed_checkpoint
        self._device_mesh: DeviceMesh | None = None

    @property
    def full_state(self) -> bool:
        return not self.save_distributed_checkpoint

    def configure(
        self,
        accelerator: str,
        device_indices: list[int],
        num_nodes: int = 1,
        collective_timeout: timedelta | None = None,
    ) -> None:
        """The sizes must multiply to the world size: checked here, before any process starts."""
        super().configure(accelerator, device_indices, num_nodes, collective_timeout)
        _check_product(*self.mesh_shape, self.world_size)

    def connect_precision(self, precision: Precision) -> None:
        name = getattr(precision, "name", None)
        if name not in PRECISIONS:
            raise MisconfigurationException(
                f"The `ModelParallelStrategy` does not support `Trainer(..., precision={name!r})`. Choose a different "
                f"precision among: {', '.join(PRECISIONS)}."
            )

    # ---- the mesh ------------------------------------------------------------------------
    @property
    def mesh_shape(self) -> tuple[int, int]:
        """(data parallel, tensor parallel): "auto" is the number of nodes, and the devices of one node."""
        dp, tp = self._data_parallel_size, self._tensor_parallel_size
        return (self.num_nodes if dp == "auto" else dp), (self.num_processes if tp == "auto" else tp)

    @property
    def device_mesh(self) -> DeviceMesh:
        if self._device_mesh is None:
            raise RuntimeError("Accessing the device mesh before processes have initialized is not allowed.")
        return self._device_mesh

    @property
    def module_mesh(self) -> DeviceMesh | None:
        return self._device_mesh

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """The loaders are split over the data-parallel dimension: a tensor-parallel group reads the same batches."""
        _, tp = self.mesh_shape
        return {"num_replicas": self.world_size // tp, "rank": self.global_rank // tp}

    def setup_environment(self) -> None:
        """Processes and the process group (``ParallelStrategy``), then the mesh ``configure_model`` sees."""
        super().setup_environment()
        if self._device_mesh is None:
            dp, tp = self.mesh_shape
            _check_product(dp, tp, self.world_size)
            self._device_mesh = init_device_mesh(self.root_device.type, (dp, tp), mesh_dim_names=DIMS)

    # ---- the module ----------------------------------------------------------------------
    def setup_module(self, module: nn.Module) -> nn.Module:
        """The module as ``configure_model`` parallelized it: checked, its other tensors moved to this device and
        made rank 0's (they are replicated: every rank must start from the same values)."""
        _check_parallelized(module, type(self).__name__)
        materialize(module, self.root_device)  # built by init_module(empty_init=True): each rank's shards get memory
        module = module.to(self.root_device)
        self._broadcast(plain_tensors(module))
        if self.mesh_shape[0] > 1:
            _warn_unsynced(module, self.mesh_shape[0])
        if isinstance(module, FSDPModule):  # fully_shard(self): its steps are its forward
            register_steps(module)
        self.module = self.model = module
        return module


def _check_size(name: str, value: Any) -> Size:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value  # type: ignore[no-any-return]
    raise MisconfigurationException(f"ModelParallelStrategy({name}={value!r}): give a positive integer or 'auto'.")


def _check_product(dp: int, tp: int, world_size: int) -> None:
    if dp * tp != world_size:
        raise MisconfigurationRuntimeError(
            f"The sizes `data_parallel_size={dp}` and `tensor_parallel_size={tp}` multiplied should equal the world "
            f"size ({world_size})."
        )


def _check_parallelized(module: nn.Module, strategy: str) -> None:
    """Lightning's rules: the module parallelizes itself in ``configure_model``, with FSDP2, not FSDP1."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if not _defines_configure_model(module):
        raise TypeError(
            f"When using the {strategy}, you are required to override the `configure_model()` hook in the "
            "LightningModule and apply parallelization there."
        )
    if any(isinstance(m, FullyShardedDataParallel) for m in module.modules()):
        raise TypeError(
            "Found modules that are wrapped with `torch.distributed.fsdp.FullyShardedDataParallel`. The "
            f"`{strategy}` only supports the new FSDP2 APIs in PyTorch >= 2.4."
        )


def _defines_configure_model(module: nn.Module) -> bool:
    """Whether a class below ``trainer.Module`` (which this layer cannot import) defines ``configure_model``."""
    owner = next((cls for cls in type(module).__mro__ if "configure_model" in vars(cls)), None)
    return owner is not None and (owner.__module__, owner.__qualname__) != ("trainer.module", "Module")


def _warn_unsynced(module: nn.Module, replicas: int) -> None:
    """With several data-parallel replicas, only parameters sharded over "data_parallel" get averaged gradients."""
    on_dp = [
        p for p in module.parameters() if isinstance(p, DTensor) and DIMS[0] in (p.device_mesh.mesh_dim_names or ())
    ]
    if len(on_dp) < len(list(module.parameters())):
        warnings.warn(
            f"ModelParallelStrategy(data_parallel_size={replicas}): {type(module).__name__} has parameters that "
            "configure_model did not shard over device_mesh['data_parallel']; their gradients are not averaged "
            "across the replicas, so the replicas drift apart. Apply fully_shard(..., "
            "mesh=self.device_mesh['data_parallel']) to the model in configure_model.",
            stacklevel=2,
        )


__all__ = ["ModelParallelStrategy"]
