"""Facts about a loader that the other data modules ask: its length, its batch count under a
limit, the settings it is rebuilt with, and how it is told the epoch."""

from __future__ import annotations

import copy
import inspect
import math
import multiprocessing
import warnings
from collections.abc import Iterable, Sized
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

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


def rebuild(loader: DataLoader, dataset: Any, **batching: Any) -> DataLoader:
    """``loader`` over ``dataset`` with new batching (``sampler``, ``batch_size``...), its other settings kept.

    A DataLoader subclass stays that subclass: a shallow copy of it with DataLoader's own state replaced, so what it
    overrides (``__iter__``, ``_get_iterator``) and its own attributes still serve, as Lightning keeps them when it
    replaces a sampler (its ``__init__`` is not run again; Lightning re-runs it with the captured arguments)."""
    built = DataLoader(dataset, **batching, **rebuild_settings(loader))
    if type(loader) is DataLoader:
        return built
    kept = copy.copy(loader)
    vars(kept).update(vars(built))
    return kept


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


_PREFIX = {"train": "train", "training": "train", "validation": "val", "test": "test", "predict": "predict"}


def num_batches(loader: Iterable[Any], limit: int | float | None = None, stage: str = "train") -> int | float:
    """Batches to run under a ``limit_*_batches`` value: None all, int a count, float a fraction. ``stage`` (train,
    validation, test, predict) names the flag in Lightning's messages."""
    total: int | float = len(loader) if has_len(loader) else math.inf  # type: ignore[arg-type]
    if limit is None:
        return total
    prefix = _PREFIX.get(stage, stage)
    if isinstance(limit, int):
        if limit < 0:
            raise MisconfigurationException(f"a batch limit must be >= 0, got limit_{prefix}_batches={limit}")
        return min(limit, total)
    if not 0.0 <= limit <= 1.0:
        raise MisconfigurationException(f"a float batch limit is a fraction in [0.0, 1.0], got {limit}")
    if math.isinf(total):
        if limit not in (0.0, 1.0):
            raise MisconfigurationException(
                f"When using an `IterableDataset`, `Trainer(limit_{prefix}_batches)` must be `1.0` or an int. An int "
                f"specifies `num_{prefix}_batches` to use (limit_{prefix}_batches={limit} is a fraction of the "
                "batches, but the loader has no length)."
            )
        return total if limit == 1.0 else 0
    count = int(total * limit)
    if count == 0 and limit > 0.0 and total > 0:
        raise MisconfigurationException(
            f"You requested to check {limit} of the `{prefix}_dataloader` but {limit} * {total} < 1. Please increase "
            f"the `limit_{prefix}_batches` argument. Try at least `limit_{prefix}_batches={1.0 / total}`"
        )
    return count


def count_batches(loader: Iterable[Any], limit: int | float | None, stage: str) -> int | float:
    """A stage's batches (``num_batches``), counted as its loaders are set up, with Lightning's warning for a
    DataLoader over an ``IterableDataset`` with ``__len__``: with several workers each iterates the whole dataset
    unless told its share, so the length (and the data) may be wrong."""
    _warn_iterable_length(loader)
    return num_batches(loader, limit, stage)


_LOADER_NAMES = {"training": "train", "validation": "val", "fit validation": "val"}


def warn_spawned_workers(loader: Any, stage: str) -> None:
    """Lightning's advice for a DataLoader whose workers start in fresh interpreters (the ``spawn`` start method,
    as in a ``ddp_spawn`` rank): each epoch's ``iter()`` pays that start again unless the workers persist."""
    if not isinstance(loader, DataLoader) or loader.num_workers == 0 or loader.persistent_workers:
        return
    context = loader.multiprocessing_context
    method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
    if method == "spawn":
        name = f"{_LOADER_NAMES.get(stage, stage)}_dataloader"
        warnings.warn(
            f"Consider setting `persistent_workers=True` in '{name}' to speed up the dataloader worker initialization.",
            stacklevel=2,
        )


def _warn_iterable_length(loader: Iterable[Any]) -> None:
    streams = any(
        isinstance(inner, DataLoader) and isinstance(inner.dataset, IterableDataset) for inner in _inner(loader)
    )
    if streams and has_len(loader):
        warnings.warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when "
            "num_workers > 1), `__len__` could be inaccurate if each worker is not configured independently to "
            "avoid having duplicate data.",
            stacklevel=4,
        )


def _inner(loader: Iterable[Any]) -> list[Any]:
    """The loaders inside (a combined loader's each), or the loader itself."""
    return loader.inner_loaders() if hasattr(loader, "inner_loaders") else [loader]  # type: ignore[no-any-return]


def shut_down_workers(loaders: Iterable[Any]) -> None:
    """End the worker processes a loader keeps between epochs (``persistent_workers``) once a stage ends,
    so none outlives the stage that needed it; the next ``iter()`` starts new ones."""
    for outer in loaders:
        for loader in _inner(outer):  # a CombinedLoader's each
            iterator = getattr(loader, "_iterator", None) if isinstance(loader, DataLoader) else None
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
                loader._iterator = None
