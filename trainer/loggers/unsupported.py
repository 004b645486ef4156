"""Lightning's loggers for services steadytrain does not support: the names import, so a ported file that mentions
them still runs; building one raises, naming the loggers to use instead."""

from __future__ import annotations

from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.loggers.base import Logger

INSTEAD = (
    "use WandbLogger, MLFlowLogger, TensorBoardLogger or CSVLogger (trainer.loggers), or a Logger of your own "
    "(docs/logging.md, 'your own logger')"
)


class _Unsupported(Logger):
    """A logger steadytrain has no backend for."""

    service = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(
            f"{type(self).__name__}: steadytrain does not support {self.service}; {INSTEAD}. "
            "See docs/migration/from-lightning.md, 'What differs'."
        )

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        raise NotImplementedError  # never built


class CometLogger(_Unsupported):
    """Lightning's Comet logger; not supported here (raises when built)."""

    service = "Comet (comet_ml)"


class LitLogger(_Unsupported):
    """Lightning's LitLogger, for Lightning AI's hosted experiments; not supported here (raises when built)."""

    service = "Lightning AI's hosted experiment tracking (litlogger)"


class NeptuneShutDown(MisconfigurationException, RuntimeError):
    """Building a NeptuneLogger: a configuration error here, a ``RuntimeError`` as Lightning's own raises."""


class NeptuneLogger(_Unsupported):
    """Lightning's Neptune logger: Neptune has shut down, and Lightning's raises a ``RuntimeError`` too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NeptuneShutDown(f"NeptuneLogger is no longer supported: Neptune has shut down; {INSTEAD}.")
