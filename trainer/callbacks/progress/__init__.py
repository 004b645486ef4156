"""Progress bars, as in ``lightning.pytorch.callbacks.progress``: the ``ProgressBar`` base, ``TQDMProgressBar``
(the default) and ``RichProgressBar`` (needs ``rich``; imported on use)."""

from typing import Any

from trainer.callbacks.progress.base import ProgressBar
from trainer.callbacks.progress.tqdm_progress import TQDMProgressBar

ProgressBar._built_by_name = TQDMProgressBar  # ProgressBar(refresh_rate=...), steadytrain 0.1's bar, builds it


def __getattr__(name: str) -> Any:
    if name in ("RichProgressBar", "RichProgressBarTheme"):
        from trainer.callbacks.progress import rich_progress

        return getattr(rich_progress, name)
    raise AttributeError(f"module 'trainer.callbacks.progress' has no attribute {name!r}")


__all__ = ["ProgressBar", "RichProgressBar", "RichProgressBarTheme", "TQDMProgressBar"]
