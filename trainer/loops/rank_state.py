"""Each rank's share of a checkpoint: its RNG, the epoch's RNG and an open accumulation window's gradients."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from trainer.loops.window_grads import open_window_grads, restore_window_grads

if TYPE_CHECKING:
    from trainer.data.train_source import TrainSource
    from trainer.loops.progress import Progress
    from trainer.loops.step import TrainingStep
    from trainer.view import TrainerView


def rank_state(
    trainer: TrainerView, data: TrainSource, step: TrainingStep | None, progress: Progress
) -> dict[str, Any]:
    """This rank's RNG, the epoch's RNG and, inside an accumulation window, the gradients so far."""
    window_open = step is not None and step.window.is_open_after(progress.batches_done)
    return {**data.rank_state(), "grads": open_window_grads(trainer) if window_open else None}


def load_rank_state(
    trainer: TrainerView, data: TrainSource, progress: Progress, ranks: list[dict[str, Any]], saved_world_size: int
) -> bool:
    """This rank's RNG, the epoch's RNG and an open accumulation window's gradients (True: there were some).

    On another number of ranks: the epoch's RNG is the first old rank's (it ordered the old
    layout, rebuilt for the rest of the epoch), each rank continues an old rank's RNG, and an open
    window's gradients are the old ranks' mean, which is what DDP's all-reduce would have made.
    """
    same = saved_world_size == trainer.world_size
    mine = ranks[trainer.global_rank] if same else ranks[min(trainer.global_rank, len(ranks) - 1)]
    data.load_rank_state(mine, ranks[0], same)
    if not same and not progress.batches_done:
        warnings.warn(
            f"resuming a {saved_world_size}-rank checkpoint on {trainer.world_size} rank(s): weights, optimizer "
            "and position are exact; each rank's random stream continues an old rank's.",
            stacklevel=4,
        )
    return restore_window_grads(trainer, ranks, mine, same)
