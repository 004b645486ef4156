"""A module built on the meta device (``trainer.init_module(empty_init=True)`` under FSDP or ModelParallelStrategy)
gets its memory only after it is sharded, so a model larger than one process's memory can be built at all.

``materialize`` allocates each rank's shards on its device and runs every submodule's ``reset_parameters()`` on them
(torchtitan's recipe, which Lightning follows); a checkpoint's weights are loaded after it (the loops defer them).
"""

from __future__ import annotations

import itertools

import torch
from torch import nn


def has_meta_tensors(module: nn.Module) -> bool:
    """Whether any parameter or buffer of ``module`` still lives on the meta device (holds no memory yet)."""
    return any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers()))


def materialize(module: nn.Module, device: torch.device) -> None:
    """Give a meta module its memory on ``device`` (its shards, where it is sharded) and initialise it.

    ``to_empty`` runs on the root (it swaps every tensor at once, keeping shared ones shared), then each submodule
    holding tensors of its own re-initialises them with ``reset_parameters()``. A submodule without one keeps
    uninitialised memory: a warning names its class, as Lightning's does, so its values can be loaded or set.
    """
    from trainer.strategies.fsdp_policies import warn_on_rank_zero  # torch.distributed: only where a module is sharded

    if not has_meta_tensors(module):
        return
    module.to_empty(device=device)
    uninitialised = set()
    for submodule in module.modules():
        if next(itertools.chain(submodule.parameters(recurse=False), submodule.buffers(recurse=False)), None) is None:
            continue
        reset = getattr(submodule, "reset_parameters", None)
        if callable(reset):
            reset()
        else:
            uninitialised.add(type(submodule).__name__)
    if uninitialised:
        warn_on_rank_zero(
            "Parameter initialization incomplete. The following modules have parameters or buffers with "
            "uninitialized memory because they don't define a `reset_parameters()` method for re-initialization: "
            f"{', '.join(sorted(uninitialised))}"
        )
