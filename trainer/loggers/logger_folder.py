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
    version = version if isinstance(version, str) else f"version_{version or 0}"
    return os.path.join(os.fspath(save_dir), str(getattr(logger, "name", None) or "lightning_logs"), version)


def logger_log_dir(logger: Any) -> str | None:
    """What ``trainer.log_dir`` shows for a logger: its ``log_dir``, else its ``save_dir`` (Lightning's answer for a
    logger that has no folder of its own), else None."""
    for folder in (logger.log_dir, logger.save_dir):
        if isinstance(folder, str | os.PathLike):
            return os.fspath(folder)
    return None
