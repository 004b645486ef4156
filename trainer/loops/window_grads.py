"""An accumulation window left open by a mid-window checkpoint: its gradients are part of the
position, saved per rank and put back (on another number of ranks: the old ranks' mean, which is
what DDP's all-reduce would have made)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.view import TrainerView


def open_window_grads(trainer: TrainerView) -> list[torch.Tensor | None]:
    """This rank's gradients, for a checkpoint inside an accumulation window (``AccumulationWindow.is_open_after``)."""
    return [None if p.grad is None else p.grad.detach().cpu() for p in trainer.lightning_module.parameters()]


def restore_window_grads(trainer: TrainerView, ranks: list[dict[str, Any]], mine: dict[str, Any], same: bool) -> bool:
    """Put the open window's gradients back; True when the checkpoint had them (the fit must not zero them)."""
    grads = mine["grads"] if same else _mean_grads([r["grads"] for r in ranks])
    if grads is None:
        return False
    device = trainer.strategy.root_device
    for param, grad in zip(trainer.lightning_module.parameters(), grads):
        param.grad = None if grad is None else grad.to(device)
    return True


def _mean_grads(per_rank: list[list[torch.Tensor | None] | None]) -> list[torch.Tensor | None] | None:
    """The element-wise mean of the ranks' open-window gradients (None where a rank has none)."""
    if any(grads is None for grads in per_rank):
        return None
    columns = zip(*per_rank)  # type: ignore[misc]
    return [None if any(g is None for g in col) else torch.stack(list(col)).mean(0) for col in columns]
