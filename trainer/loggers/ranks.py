"""Which loggers the Trainer calls on every rank: a user's own, as Lightning calls every logger.

Lightning calls each logger on every rank and leaves rank zero to the logger (its docs: decorate the methods
with ``@rank_zero_only``); a logger written without it logs from all ranks, on purpose. steadytrain's own
loggers (and subclasses of them) are called on global rank zero only: they write one run folder.
"""

from __future__ import annotations

from typing import Any

from trainer.loggers.base import Logger


def called_on_every_rank(logger: Any) -> bool:
    """Whether ``logger`` is the user's own: no steadytrain logger but the abstract base in its classes."""
    ours = [cls for cls in type(logger).__mro__ if cls.__module__.split(".")[0] == "trainer"]
    return all(cls is Logger for cls in ours)
