"""The loggers a Trainer's ``logger=`` flag stands for."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable

from trainer.loggers.base import Logger


@functools.cache
def tensorboard_available() -> bool:
    """Whether ``tensorboard`` or ``tensorboardX`` is installed (found, not imported: importing is slow)."""
    return any(importlib.util.find_spec(name) is not None for name in ("tensorboard", "tensorboardX"))


def build_loggers(
    logger: bool | Logger | Iterable[Logger] | None, default_root_dir: str, fast_dev_run: bool
) -> list[Logger]:
    """True: Lightning's default, a TensorBoardLogger writing ``<default_root_dir>/lightning_logs/version_N`` where
    tensorboard (or tensorboardX) is installed, else a CSVLogger there; False or None (the Trainer turns its default
    None into True): none; else the Logger(s) given.

    Under ``fast_dev_run`` any logger becomes a DummyLogger, as in Lightning: ``self.logger`` still
    takes calls, nothing is written and ``log_dir`` is None.
    """
    if logger is False or logger is None:
        return []
    if logger is not True:
        one = isinstance(logger, Logger) or (not isinstance(logger, (list, tuple)) and _duck_logger(logger))
        loggers: list[Logger] = [logger] if one else list(logger)  # type: ignore[list-item, arg-type]
        bad = [type(lg).__name__ for lg in loggers if not (isinstance(lg, Logger) or _duck_logger(lg))]
        if bad:
            raise TypeError(f"logger= takes True/False, a Logger or a list of them; got {', '.join(bad)}.")
    if fast_dev_run:
        from trainer.loggers.dummy import DummyLogger

        return [DummyLogger()]
    if logger is True and tensorboard_available():
        from trainer.loggers.tensorboard import TensorBoardLogger

        return [TensorBoardLogger(save_dir=default_root_dir, name="lightning_logs")]
    if logger is True:
        from trainer.loggers.csv import CSVLogger

        return [CSVLogger(save_dir=default_root_dir, name="lightning_logs")]
    return loggers


def _duck_logger(obj: object) -> bool:
    """An object that logs as a Logger does without subclassing it (Lightning takes one: a test's mock, say)."""
    return all(callable(getattr(obj, name, None)) for name in ("log_metrics", "log_hyperparams"))
