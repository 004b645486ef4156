"""Lightning's ``is_shared_filesystem``: whether every rank sees the files rank zero writes under a path
(a cluster's shared home or scratch), which decides whether each node must save its own copy of a file."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import torch

from trainer.strategies.base import Strategy


def is_shared_filesystem(strategy: Strategy, path: str | os.PathLike[str] | None = None, timeout: int = 3) -> bool:
    """Whether the folder at ``path`` (default: the working directory) is one filesystem for all ranks: rank zero
    writes a file there and every rank looks for it for up to ``timeout`` seconds. One rank: True."""
    if path is not None and "://" in str(path) and not str(path).startswith("file://"):
        return True  # a remote store (s3://, gs://) is the same for every rank
    folder = Path(Path.cwd() if path is None else path).resolve()
    if strategy.world_size == 1:
        return True
    if not _on_every_rank(strategy, strategy.broadcast(folder) == folder):
        return False  # not even the same path on every rank
    folder = folder.parent if folder.is_file() else folder
    if not folder.is_dir():
        raise FileNotFoundError(f"is_shared_filesystem: {folder} does not exist on rank {strategy.global_rank}")
    probe = folder / f".steadytrain_shared_fs_{strategy.broadcast(uuid.uuid4().hex)}"
    if strategy.is_global_zero:
        probe.touch()
    strategy.barrier()
    deadline = time.monotonic() + timeout
    while not (found := probe.exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    shared = _on_every_rank(strategy, found)
    strategy.barrier()
    if strategy.is_global_zero:
        probe.unlink(missing_ok=True)
    return shared


def _on_every_rank(strategy: Strategy, flag: bool) -> bool:
    return bool(strategy.all_reduce(torch.tensor(float(flag), device=strategy.root_device), op="min").item())
