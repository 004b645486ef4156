"""Which of a ``ModelCheckpoint``'s files a logger that uploads checkpoints (wandb, MLflow) has not uploaded yet,
and what it records with each: Lightning's rules, shared by both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.callbacks.checkpoint import ModelCheckpoint

SETTINGS = ("monitor", "mode", "save_last", "save_top_k", "save_weights_only", "every_n_train_steps", "every_n_epochs")


def unlogged_checkpoints(callback: ModelCheckpoint, logged: dict[str, float]) -> list[tuple[float, str]]:
    """``(mtime, path)`` of the kept, best and last checkpoints that exist and are not logged at that mtime, oldest
    first (a file rewritten under the same name, ``last.ckpt``, is logged again)."""
    paths = {*callback.best_k_models, callback.last_model_path, callback.best_model_path} - {""}
    found = [(os.path.getmtime(path), path) for path in paths if os.path.exists(path)]
    return sorted((mtime, path) for mtime, path in found if logged.get(path) != mtime)


def checkpoint_score(callback: ModelCheckpoint, path: str) -> float | None:
    """The monitored value a checkpoint was saved with, as a Python number (Lightning's: the kept ones' scores,
    the best score for the best, the latest for ``last``)."""
    score: Any
    if path in callback.best_k_models:
        score = callback.best_k_models[path]
    elif path == callback.best_model_path:
        score = callback.best_model_score
    else:
        score = getattr(callback, "current_score", None)
    return score.item() if hasattr(score, "item") else score


def checkpoint_metadata(callback: ModelCheckpoint, path: str, settings_key: str) -> dict[str, Any]:
    """The score, the file's name and the callback's settings (under ``settings_key``), as Lightning records them."""
    return {
        "score": checkpoint_score(callback, path),
        "original_filename": Path(path).name,
        settings_key: {name: getattr(callback, name) for name in SETTINGS if hasattr(callback, name)},
    }


def checkpoint_aliases(callback: ModelCheckpoint, path: str) -> list[str]:
    """``["latest", "best"]`` for the best checkpoint, ``["latest"]`` for the others (Lightning's aliases)."""
    return ["latest", "best"] if path == callback.best_model_path else ["latest"]
