"""Rank-zero helpers, as ``lightning.pytorch.utilities.rank_zero`` has them: lightning-utilities' own functions.

They read ``rank_zero_only.rank``. It starts from the launcher's environment (torchrun, SLURM) and
the strategy sets it to its global rank when its processes are up (``trainer.launch.set_global_rank``), as
Lightning's strategies do; a rank that steadytrain started itself only knows its rank then.
"""

from __future__ import annotations

from lightning_utilities.core.rank_zero import (
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

from trainer.launch import rank_from_environment, set_global_rank
from trainer.user_warnings import LightningDeprecationWarning

__all__ = [
    "LightningDeprecationWarning",
    "WarningCache",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "set_global_rank",
]

# Keep a rank already set (by a strategy, or by Lightning in the same process): it knows better than the environment.
if getattr(rank_zero_only, "rank", None) is None:
    set_global_rank(rank_from_environment())
