"""Lightning's ``utilities.data``: whether a loader has a length on every rank, and a batch's size."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from trainer.data.loaders import has_len
from trainer.results import extract_batch_size
from trainer.strategies.base import Strategy


def has_len_all_ranks(
    dataloader: Iterable[Any], strategy: Strategy, allow_zero_length_dataloader_with_multiple_devices: bool = False
) -> bool:
    """Whether ``len(dataloader)`` works. Collective under several ranks: a loader empty on this rank but not on
    all is an error (that rank would wait for the others at the first collective), unless allowed."""
    if not has_len(dataloader):
        return False
    local = len(dataloader)  # type: ignore[arg-type]
    total = int(strategy.all_reduce(torch.tensor(local, device=strategy.root_device), op="sum").item())
    name = type(dataloader).__name__
    if total == 0:
        warnings.warn(
            f"Total length of `{name}` across ranks is zero. Please make sure this was your intention.", stacklevel=2
        )
    if total > 0 and local == 0:
        message = (
            f"`{name}` within local rank has zero length. Please make sure that it returns at least 1 batch; "
            "or allow_zero_length_dataloader_with_multiple_devices=True."
        )
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=2)
    if isinstance(dataloader, DataLoader) and isinstance(dataloader.dataset, IterableDataset):
        warnings.warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when "
            "num_workers > 1), `__len__` could be inaccurate if each worker is not configured independently to "
            "avoid having duplicate data.",
            stacklevel=2,
        )
    return True


def suggested_max_num_workers(local_world_size: int) -> int:
    """An upper bound for ``DataLoader(num_workers=...)``: this process's CPUs shared among the ranks on the
    machine, one left for each rank's main process."""
    if local_world_size < 1:
        raise ValueError(f"suggested_max_num_workers: local_world_size={local_world_size}; it is at least 1.")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // local_world_size - 1)


__all__ = ["extract_batch_size", "has_len_all_ranks", "suggested_max_num_workers"]
