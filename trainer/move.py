"""Batches to the device: every tensor (or object with ``.to``) inside nested collections.

A leaf: the Module, the DataModule and the strategies move batches with it, below the data package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class _Movable(Protocol):
    """Anything with ``.to``: tensors, modules, user batch classes."""

    def to(self, device: torch.device) -> Any: ...


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        # Only a pinned source can overlap the copy with compute; otherwise non_blocking buys nothing.
        return obj.to(device, non_blocking=device.type == "cuda" and obj.is_pinned())
    return obj.to(device)


def move_to_device(batch: Any, device: torch.device | str) -> Any:
    """Move every tensor (or object with ``.to``) inside nested collections/dataclasses to ``device``."""
    return device_mover(device)(batch)


def device_mover(device: torch.device | str) -> Callable[[Any], Any]:
    """``move_to_device`` to one device with its import done now: what the loops call per batch."""
    # Imported here: lightning_utilities parses version specifiers at import (~40 ms), a cost
    # `import trainer` must not pay; after the first call this is a dictionary lookup.
    from lightning_utilities.core.apply_func import apply_to_collection

    return functools.partial(apply_to_collection, dtype=_Movable, function=_move, device=torch.device(device))
