"""Facts about a loader that the other data modules ask: its length, its batch count under a
limit, the settings it is rebuilt with, and how it is told the epoch."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Sized
from typing import Any

from torch.utils.data import DataLoader

from trainer.exceptions import MisconfigurationException

# DataLoader settings carried over when a loader is rebuilt (those this torch version accepts).
_SETTINGS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


def sized(obj: object) -> Sized:
    """``obj`` itself, typed as sized, or an error saying why a length is needed."""
    if not isinstance(obj, Sized):
        raise TypeError(f"{type(obj).__name__} has no __len__, so it cannot be sharded or skipped")
    return obj


def rebuild_settings(loader: DataLoader) -> dict[str, Any]:
    """The user's DataLoader settings, to build the same loader over another sampler."""
    accepted = inspect.signature(DataLoader.__init__).parameters
    return {k: getattr(loader, k) for k in _SETTINGS if k in accepted and hasattr(loader, k)}


def call_set_epoch(objects: Iterable[object], epoch: int) -> None:
    """Tell each distinct object that has a ``set_epoch`` (once: sampler and batch sampler may be one)."""
    seen: set[int] = set()
    for obj in objects:
        if obj is not None and id(obj) not in seen and callable(getattr(obj, "set_epoch", None)):
            seen.add(id(obj))
            obj.set_epoch(epoch)  # type: ignore[attr-defined]


def set_epoch(loader: Iterable[Any], epoch: int) -> None:
    """Tell the sampler and batch sampler the epoch, so distributed shuffles change per epoch.

    A plain iterable is told itself, when it has a ``set_epoch``.
    """
    if not isinstance(loader, DataLoader):
        call_set_epoch([loader], epoch)
        return
    bs = loader.batch_sampler
    call_set_epoch([loader.sampler, bs, getattr(bs, "sampler", None)], epoch)


def has_len(loader: Iterable[Any]) -> bool:
    """Whether ``len(loader)`` works (an IterableDataset without ``__len__`` has none)."""
    try:
        len(loader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return False
    return True


def num_batches(loader: Iterable[Any], limit: int | float | None = None) -> int | float:
    """Batches to run under a ``limit_*_batches`` value: None all, int a count, float a fraction."""
    total: int | float = len(loader) if has_len(loader) else math.inf  # type: ignore[arg-type]
    if limit is None:
        return total
    if isinstance(limit, int):
        if limit < 0:
            raise MisconfigurationException(f"a batch limit must be >= 0, got {limit}")
        return min(limit, total)
    if not 0.0 <= limit <= 1.0:
        raise MisconfigurationException(f"a float batch limit is a fraction in [0.0, 1.0], got {limit}")
    if math.isinf(total):
        if limit not in (0.0, 1.0):
            raise MisconfigurationException(
                f"a fraction limit ({limit}) needs a loader with __len__; pass an int instead"
            )
        return total if limit == 1.0 else 0
    return int(total * limit)


def shut_down_workers(loaders: Iterable[Any]) -> None:
    """End the worker processes a loader keeps between epochs (``persistent_workers``) once a stage ends,
    so none outlives the stage that needed it; the next ``iter()`` starts new ones."""
    for outer in loaders:
        inner = outer.inner_loaders() if hasattr(outer, "inner_loaders") else [outer]  # a CombinedLoader's each
        for loader in inner:
            iterator = getattr(loader, "_iterator", None) if isinstance(loader, DataLoader) else None
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
                loader._iterator = None
