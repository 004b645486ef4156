"""What every strategy whose parameters are DTensors shares: FSDP2 (``FSDPStrategy``) and tensor parallelism with
FSDP2 on a 2-D mesh (``ModelParallelStrategy``).

Their checkpoints go through ``torch.distributed.checkpoint``'s state-dict API: each rank's shards into a DCP
directory (``trainer/checkpoint/sharded.py``), or the full tensors gathered into one file by rank 0. Full weights
and optimizer states from any strategy's checkpoint are scattered into the shards. A gradient norm is taken over
every shard; accumulation turns FSDP's reduce-scatter off until the window's last micro-batch.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method
from torch.distributed.tensor import DTensor

from trainer.checkpoint import sharded
from trainer.checkpoint.io import extract_state_dict, strip_prefixes
from trainer.checkpoint.optimizer_names import name_keyed_optimizer_state
from trainer.strategies.parallel import ParallelStrategy

_STEPS = ("training_step", "validation_step", "test_step", "predict_step")
_registered: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # modules whose steps FSDP already wraps


class DTensorStrategy(ParallelStrategy):
    """One process per device; the module's parameters are DTensors (sharded, or replicated on a mesh)."""

    supports_inference_mode = False  # FSDP reuses its all-gather buffers in training
    async_save = False
    builds_on_meta = True  # init_module(empty_init=True): on the meta device; the shards get memory in setup_module

    @property
    def full_state(self) -> bool:
        """Checkpoints: True gathers the full tensors into one file; False (here) writes each rank's shards."""
        return False

    # ---- the step ------------------------------------------------------------------------
    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Accumulate unsharded gradients locally; the window's last micro-batch reduce-scatters them."""
        return _gradient_sync_off(self.module)

    # manual_backward_sync stays the default: FSDP reduce-scatters in every backward (manual_backward too)

    def clip_gradients(self, parameters: list[torch.nn.Parameter], value: float, algorithm: str) -> None:
        """The norm is over every shard of every parameter, whatever mesh each lives on; each group of gradients
        with one layout is scaled on its own (torch's foreach kernels take no mix of DTensors and tensors)."""
        if algorithm != "norm":
            return super().clip_gradients(parameters, value, algorithm)
        groups = _by_layout([p for p in parameters if p.grad is not None])
        total = total_norm([[p.grad for p in group if p.grad is not None] for group in groups])
        for group in groups:
            torch.nn.utils.clip_grads_with_norm_(group, value, total)

    # ---- checkpoints ---------------------------------------------------------------------
    def _options(self) -> StateDictOptions:
        return StateDictOptions(full_state_dict=self.full_state, cpu_offload=self.full_state)

    def module_state_dict(self) -> dict[str, torch.Tensor]:
        """This rank's shards (DTensors), or with ``full_state`` the gathered weights on rank 0."""
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
        """Into a module ``configure_model`` already made of DTensors, full weights are scattered to the shards."""
        if not any(isinstance(p, DTensor) for p in module.parameters()):
            return super().load_module_weights(module, checkpoint)
        weights = strip_prefixes(extract_state_dict(checkpoint))
        set_model_state_dict(module, weights, options=StateDictOptions(full_state_dict=True))

    def save_checkpoint(self, checkpoint: Mapping[str, Any], path: Path, storage_options: Any = None) -> None:
        """A DCP directory with each rank's shards (collective), or one gathered file written by rank 0."""
        if storage_options is not None:  # Lightning's error: DCP writes the shards, not a CheckpointIO
            raise TypeError(
                f"`{type(self).__name__}.save_checkpoint(..., storage_options=...)` is not supported because "
                f"`{type(self).__name__}` does not use the `CheckpointIO` (got storage_options={storage_options!r})."
            )
        if self.full_state:
            return super().save_checkpoint(checkpoint, path)
        sharded.save_sharded(dict(checkpoint), path, self, async_save=self.async_save)

    def teardown(self) -> None:
        sharded.wait_pending()
        super().teardown()

    def offload(self, optimizers: list[torch.optim.Optimizer]) -> None:
        """Sharded parameters stay where they are, as under Lightning's FSDP strategy (its teardown moves nothing)."""


@contextlib.contextmanager
def _gradient_sync_off(module: nn.Module | None) -> Iterator[None]:
    """Every FSDP unit of ``module`` skips its reduce-scatter (a module without one has nothing to skip)."""
    units = [m for m in module.modules() if isinstance(m, FSDPModule)] if module is not None else []
    for unit in units:
        unit.set_requires_gradient_sync(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.set_requires_gradient_sync(True, recurse=False)


def _by_layout(parameters: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """Parameters grouped by their gradients' layout: one mesh and placements per group (plain tensors: one group).
    FSDP's 1-D shards, tensor-parallel shards and FSDP-over-TP 2-D shards each form such a group."""
    groups: dict[Any, list[torch.nn.Parameter]] = {}
    for param in parameters:
        grad = param.grad
        key = (grad.device_mesh, grad.placements) if isinstance(grad, DTensor) else None
        groups.setdefault(key, []).append(param)
    return list(groups.values())


def total_norm(groups: list[list[torch.Tensor]]) -> torch.Tensor:
    """The 2-norm of all gradients together, as one plain tensor: one norm (one collective) per group of one
    layout, the groups' norms combined as the square root of their squares' sum."""
    norms = []
    for group in groups:
        norm = torch.nn.utils.get_total_norm(group)
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    if not norms:
        return torch.tensor(0.0)
    if len(norms) == 1:
        return norms[0]
    return torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]))


def register_steps(module: nn.Module) -> None:
    """A step is the root's forward: FSDP gathers the root's parameters around it (once per module)."""
    if module in _registered:
        return
    for step in _STEPS:
        if callable(getattr(module, step, None)):
            register_fsdp_forward_method(module, step)
    _registered.add(module)


def plain_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers that are not DTensors (``configure_model`` may have made some DTensors)."""
    tensors = [*module.parameters(), *module.buffers()]
    return [t for t in tensors if not isinstance(t, DTensor)]
