"""A batch as a captured step sees it: its signature (the cache key) and its static device copy.

A graph reads its inputs from fixed addresses, so each batch is copied into the static tensors of
its signature: the tree's structure and, per tensor, shape, dtype and device. A batch straight from
the loader (pinned memory, the default transfer) is copied from there into the static tensors, so it
is copied once, as it would be moved to the device anyway (``StaticInputs.mover``); a batch that a
transfer hook already moved is copied on the device. Non-tensor leaves (file names, ids) are not
part of the key: a captured step does not read them, and a step that branches on them is a Python
side effect that runs once (docs/cuda-graphs.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

Meta = tuple[tuple[int, ...], torch.dtype, torch.device]


@dataclass(frozen=True)
class Signature:
    """What a graph's inputs are: the batch's structure and each tensor leaf's shape, dtype and device.

    Hashed once (it keys two dicts per batch); ``StaticInputs`` hands out one object per signature, so
    the later comparisons are identity checks."""

    spec: pytree.TreeSpec
    tensors: tuple[Meta | None, ...]  # per leaf; None for a leaf that is not a tensor
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.spec, self.tensors)))

    def __hash__(self) -> int:
        return self._hash

    def describe(self) -> str:
        shapes = [f"{tuple(m[0])} {str(m[1]).removeprefix('torch.')}" for m in self.tensors if m is not None]
        return "[" + ", ".join(shapes) + "]"


class Uncapturable(ValueError):
    """The batch holds something a graph's static inputs cannot hold."""


def signature(batch: Any, device: torch.device | None = None) -> tuple[Signature, list[Any]]:
    """``batch``'s signature and leaves; with ``device``, as it will be once moved there.

    Raises ``Uncapturable`` for a leaf that is moved to the device but is not a plain dense tensor.
    """
    leaves, spec = pytree.tree_flatten(batch)
    metas: list[Meta | None] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if leaf.layout is not torch.strided:
                raise Uncapturable(f"the batch holds a {type(leaf).__name__} with layout {leaf.layout}")
            metas.append((tuple(leaf.shape), leaf.dtype, device if device is not None else leaf.device))
        elif hasattr(leaf, "to") and callable(leaf.to):
            raise Uncapturable(f"the batch holds a {type(leaf).__name__}: moved with .to(), but not a tensor")
        else:
            metas.append(None)
    return Signature(spec, tuple(metas)), leaves


class StaticInputs:
    """The static input tensors of up to ``limit`` signatures, and the copy of each batch into them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffers: dict[Signature, tuple[Signature, list[torch.Tensor | None]]] = {}  # sig -> (itself, tensors)
        self.moved: tuple[Any, Signature] | None = None  # the batch ``move`` placed last, and its signature

    def static(self, sig: Signature, leaves: list[Any]) -> tuple[Signature, list[torch.Tensor | None]] | None:
        """The one ``Signature`` object for ``sig`` and its static tensors (made on first sight while there is
        room), or None."""
        found = self.buffers.get(sig)
        if found is None and len(self.buffers) < self.limit:
            tensors = [
                torch.empty_like(leaf, device=meta[2]) if meta is not None else None
                for leaf, meta in zip(leaves, sig.tensors)
            ]
            found = self.buffers[sig] = (sig, tensors)
        return found

    def fill(self, sig: Signature, leaves: list[Any]) -> tuple[Signature, Any] | None:
        """The batch with each tensor copied into ``sig``'s static tensors, with the signature's one object;
        None when there is no room."""
        found = self.static(sig, leaves)
        if found is None:
            return None
        merged: list[Any] = []
        for leaf, buffer in zip(leaves, found[1]):
            if buffer is None:
                merged.append(leaf)
                continue
            if leaf is not buffer:
                buffer.copy_(leaf, non_blocking=True)  # from pinned memory: overlaps; ordered before the replay
            merged.append(buffer)
        return found[0], pytree.tree_unflatten(merged, sig.spec)

    def place(self, batch: Any) -> tuple[Signature, Any] | None:
        """``batch`` in the static tensors (already, when ``move`` put it there), with its signature; None
        when there is no room. Raises ``Uncapturable`` for a batch a graph cannot take."""
        moved = self.moved
        if moved is not None and moved[0] is batch:
            return moved[1], batch
        return self.fill(*signature(batch))

    def mover(self, device: torch.device, fallback: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
        """The batch transfer of a captured run: straight into the static tensors where it can, else
        ``fallback`` (the strategy's move)."""

        def move(batch: Any) -> Any:
            try:
                placed = self.fill(*signature(batch, device))
            except Uncapturable:
                placed = None
            if placed is None:
                return batch if fallback is None else fallback(batch)
            self.moved = (placed[1], placed[0])
            return placed[1]

        return move
