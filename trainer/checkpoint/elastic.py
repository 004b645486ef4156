"""Elastic restarts: after torchrun restarts the group, ``fit`` resumes from this run's newest checkpoint.

``torchrun --max-restarts=N`` restarts every rank when one dies, with the same command line, so the
restarted ranks would start from the beginning (or from the ``ckpt_path`` they were given, which is
older than anything the run wrote since). Precedence on a restart: the newest complete checkpoint
written since torchrun started wins over ``ckpt_path``; when there is none yet (the run died before
its first checkpoint) ``ckpt_path`` applies as on the first attempt. Rank 0 chooses and broadcasts its
choice, so every rank loads the same checkpoint even where their views of the folders differ.

Only the first ``fit`` of a restarted process resumes this way: a later one starts as it did before.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.launch import ElasticRestart, elastic_restart

if TYPE_CHECKING:
    from trainer.view import TrainerView

_resumed_in_this_process = False


def fit_checkpoint_path(trainer: TrainerView, ckpt_path: Any) -> Path | None:
    """The checkpoint ``fit`` starts from: this run's newest after an elastic restart, else ``ckpt_path``."""
    from trainer.checkpoint.state import resolve_checkpoint_path

    global _resumed_in_this_process
    restart = None if _resumed_in_this_process else elastic_restart()
    if restart is not None:
        _resumed_in_this_process = True
        chosen = trainer.strategy.broadcast(_choose(trainer, restart, ckpt_path) if trainer.is_global_zero else None)
        if chosen is not None:
            return Path(chosen)
    return resolve_checkpoint_path(trainer, ckpt_path) if ckpt_path is not None else None


def _choose(trainer: TrainerView, restart: ElasticRestart, ckpt_path: Any) -> str | None:
    """Rank 0: the newest complete checkpoint written since torchrun started, announced in one line."""
    from trainer.checkpoint.newest import newest_checkpoint
    from trainer.checkpoint.state import checkpoint_folders

    found = newest_checkpoint(checkpoint_folders(trainer), since=restart.started_at)
    if found is None:
        start = f"ckpt_path={str(ckpt_path)!r}" if ckpt_path is not None else "the beginning"
        print(f"steadytrain: elastic restart {restart.count}: no checkpoint of this run yet; starting from {start}.")
        return None
    instead = f" (newer than ckpt_path={str(ckpt_path)!r})" if ckpt_path not in (None, "last") else ""
    print(f"steadytrain: elastic restart {restart.count}: resuming from {found}{instead}.", flush=True)
    return str(found)
