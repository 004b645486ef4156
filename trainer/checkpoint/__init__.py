"""Checkpoints: atomic files, safe loading, portable weights (``io``), and what a run saves (``state``)."""

from trainer.checkpoint.io import (
    CheckpointError,
    clean_stale_temporaries,
    extract_state_dict,
    link_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    strip_prefixes,
    to_safe,
    unwrap_model,
    unwritable_reason,
)
from trainer.checkpoint.newest import find_last_checkpoint

__all__ = [
    "CheckpointError",
    "clean_stale_temporaries",
    "extract_state_dict",
    "find_last_checkpoint",
    "link_checkpoint",
    "load_checkpoint",
    "load_weights",
    "save_checkpoint",
    "strip_prefixes",
    "to_safe",
    "unwrap_model",
    "unwritable_reason",
]
