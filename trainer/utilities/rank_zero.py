"""Rank-zero helpers, as ``lightning.pytorch.utilities.rank_zero`` has them: lightning-utilities' own functions.

They read ``rank_zero_only.rank``. It starts from the launcher's environment (torchrun, SLURM) and
the strategy sets it to its global rank when its processes are up (``set_global_rank``), as
Lightning's strategies do; a rank that steadytrain started itself only knows its rank then.
"""

from __future__ import annotations

import os

from lightning_utilities.core.rank_zero import (
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

__all__ = [
    "WarningCache",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "set_global_rank",
]

# Lightning's order: LOCAL_RANK before SLURM_PROCID, which SLURM sets even when it does not start the ranks.
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def _rank_from_environment() -> int:
    for name in _RANK_VARIABLES:
        if (value := os.environ.get(name)) is not None:
            return int(value)
    return 0


def set_global_rank(rank: int) -> None:
    """Tell ``rank_zero_only`` (and every helper above) which rank this process is."""
    rank_zero_only.rank = rank  # type: ignore[attr-defined]


# Keep a rank already set (by a strategy, or by Lightning in the same process): it knows better than the environment.
if getattr(rank_zero_only, "rank", None) is None:
    set_global_rank(_rank_from_environment())
