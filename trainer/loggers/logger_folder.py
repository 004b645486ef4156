"""The folder a logger gives a run (its checkpoints, the CLI's config), Lightning's rule for any logger."""

from __future__ import annotations

import os
from typing import Any


def logger_folder(logger: Any) -> str | None:
    """The logger's ``log_dir``; for a logger with none (a user's own, which Lightning asks only for ``save_dir``,
    ``name`` and ``version``) ``<save_dir>/<name>/<version>``, where Lightning's ModelCheckpoint saves
    (``version_<n>`` for a number); None for a logger that writes nothing locally (no ``save_dir``)."""
    log_dir = logger.log_dir
    if isinstance(log_dir, str | os.PathLike):
        return os.fspath(log_dir)
    save_dir = logger.save_dir
    if not isinstance(save_dir, str | os.PathLike):
        return None
    version = getattr(logger, "version", None)
    name = getattr(logger, "name", None) or "lightning_logs"
    return lightning_run_folder(save_dir, name, version if isinstance(version, str) else version or 0)


def lightning_run_folder(save_dir: str | os.PathLike[str], name: Any, version: Any) -> str:
    """Lightning's ``<save_dir>/<name>/<version>`` for a logger: a string version as it is, a number as
    ``version_<n>`` (where its ModelCheckpoint saves, whatever the logger)."""
    version = version if isinstance(version, str) else f"version_{version}"
    return os.path.join(os.fspath(save_dir), str(name), version)


def logger_log_dir(logger: Any) -> str | None:
    """What ``trainer.log_dir`` shows for a logger: its ``log_dir``, else its ``save_dir`` (Lightning's answer for a
    logger that has no folder of its own), else None."""
    for folder in (logger.log_dir, logger.save_dir):
        if isinstance(folder, str | os.PathLike):
            return os.fspath(folder)
    return None
