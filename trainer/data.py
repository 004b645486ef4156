"""DataLoader plumbing the loop needs: batch to device, sharding across ranks, exact resume.

Loaders are rebuilt as plain ``DataLoader`` objects from their public settings (never by patching
``__init__``); a DataLoader subclass therefore loses its own extra behaviour when it is resharded.
One process always gets the user's loader back untouched, so a run matches a hand-written loop.
Any other iterable of batches (a list, a custom class) is used as it is: it has no sampler to
shard or skip by index, so several ranks need it sharded by the user, and a resume reads past
its finished batches.
"""

from __future__ import annotations

import collections
import inspect
import itertools
import math
from collections.abc import Iterable, Iterator, Sized
from typing import Any, Protocol, overload, runtime_checkable

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)
from torch.utils.data.dataloader import _BaseDataLoaderIter
from typing_extensions import override

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


# ---- batch to device ----------------------------------------------------------------------------
@runtime_checkable
class _Movable(Protocol):
    """Anything with ``.to``: tensors, modules, user batch classes."""

    def to(self, device: torch.device) -> Any: ...


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        # Only a pinned source can overlap the copy with compute; otherwise non_blocking buys nothing.
        return obj.to(device, non_blocking=device.type == "cuda" and obj.is_pinned())
    return obj.to(device)


def move_to_device(batch: Any, device: torch.device | str) -> Any:
    """Move every tensor (or object with ``.to``) inside nested collections/dataclasses to ``device``."""
    return apply_to_collection(batch, _Movable, _move, device=torch.device(device))


# ---- samplers -----------------------------------------------------------------------------------
class DistributedSamplerWrapper(Sampler[int]):
    """Give each rank a strided share of a custom sampler's order, padded like ``DistributedSampler``.

    The wrapped sampler must yield the same order on every rank (seed it, or give it a generator).
    """

    def __init__(self, sampler: Iterable[int], num_replicas: int, rank: int) -> None:
        self.sampler, self.num_replicas, self.rank = sampler, num_replicas, rank

    def __iter__(self) -> Iterator[int]:
        indices = list(self.sampler)  # materialised each epoch: the wrapped order may change
        total = math.ceil(len(indices) / self.num_replicas) * self.num_replicas
        pad = total - len(indices)
        indices += (indices * math.ceil(pad / max(len(indices), 1)))[:pad]
        return iter(indices[self.rank : total : self.num_replicas])

    def __len__(self) -> int:
        return math.ceil(len(_sized(self.sampler)) / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped sampler so its own per-epoch shuffle still happens."""
        _call_set_epoch([self.sampler], epoch)


class EvalShardSampler(Sampler[Any]):
    """Rank r gets items r, r+W, r+2W, ... of the wrapped order, unpadded: every item seen once."""

    def __init__(self, sampler: Iterable[Any], num_replicas: int, rank: int) -> None:
        self.sampler, self.num_replicas, self.rank = sampler, num_replicas, rank

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.sampler, self.rank, None, self.num_replicas)

    def __len__(self) -> int:
        return len(range(self.rank, len(_sized(self.sampler)), self.num_replicas))


class _SkipBatches(Sampler[Any]):
    """Iterate a (batch) sampler but drop its first ``skip`` items: indices only, no data loaded."""

    def __init__(self, source: Iterable[Any], skip: int) -> None:
        self.source, self.skip = source, skip
        self._current: _LazyIter | None = None

    def __iter__(self) -> Iterator[Any]:
        self._current = _LazyIter(self)
        return self._current

    def __len__(self) -> int:
        return max(len(_sized(self.source)) - self.skip, 0)

    def prime(self) -> None:
        """Make the source draw its RNG and skip now, before the caller restores the global RNG."""
        if self._current is not None:
            self._current.start()

    def set_epoch(self, epoch: int) -> None:
        _call_set_epoch([self.source, getattr(self.source, "sampler", None)], epoch)


class _LazyIter(Iterator[Any]):
    """Starts the source on first use; starting pulls one item so lazy samplers draw their seed."""

    def __init__(self, owner: _SkipBatches) -> None:
        self._owner = owner
        self._it: Iterator[Any] | None = None

    def start(self) -> Iterator[Any]:
        if self._it is None:
            it = iter(self._owner.source)
            collections.deque(itertools.islice(it, self._owner.skip), maxlen=0)
            self._it = itertools.chain(list(itertools.islice(it, 1)), it)
        return self._it

    def __next__(self) -> Any:
        return next(self.start())


class _ResumeLoader(DataLoader):
    """A DataLoader whose ``iter()`` also performs the skip, so all epoch-order RNG draws happen in it."""

    @override
    def __iter__(self) -> _BaseDataLoaderIter:
        it = super().__iter__()  # draws base_seed (and, with workers, prefetches => starts the skip)
        skipper = self.batch_sampler if self.batch_sampler is not None else self.sampler
        if isinstance(skipper, _SkipBatches):
            skipper.prime()  # num_workers=0: the sampler's seed would otherwise be drawn at next()
        return it


class _SkipIterable(Iterable[Any]):
    """A plain iterable minus its first ``skip`` batches, read and dropped inside ``iter()``."""

    def __init__(self, source: Iterable[Any], skip: int) -> None:
        self.source, self.skip = source, skip

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.source)
        # Eagerly, not lazily: the skipped batches' RNG draws must precede the checkpoint RNG restore.
        collections.deque(itertools.islice(it, self.skip), maxlen=0)
        return it

    def set_epoch(self, epoch: int) -> None:
        _call_set_epoch([self.source], epoch)


# ---- rebuilding loaders -------------------------------------------------------------------------
def _sized(obj: object) -> Sized:
    if not isinstance(obj, Sized):
        raise TypeError(f"{type(obj).__name__} has no __len__, so it cannot be sharded or skipped")
    return obj


def _settings(loader: DataLoader) -> dict[str, Any]:
    accepted = inspect.signature(DataLoader.__init__).parameters
    return {k: getattr(loader, k) for k in _SETTINGS if k in accepted and hasattr(loader, k)}


def _batching(loader: DataLoader) -> tuple[Iterable[Any], int | None, bool]:
    """The per-sample sampler, batch size and drop_last, wherever the user put them."""
    bs = loader.batch_sampler
    if type(bs) is BatchSampler:
        return bs.sampler, bs.batch_size, bs.drop_last
    return getattr(bs, "sampler", loader.sampler), None, False  # a custom batch sampler batches itself


def _has_custom_batch_sampler(loader: DataLoader) -> bool:
    return loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler


def _rebuild(loader: DataLoader, sampler: Iterable[Any], batch_size: int | None, drop_last: bool) -> DataLoader:
    return DataLoader(loader.dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **_settings(loader))


def _check_rank(num_replicas: int, rank: int) -> None:
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")


def _check_room(n: int, num_replicas: int, batch_size: int | None, drop_last: bool, padded: bool) -> None:
    """Fail the same way on every rank when some rank would get no real sample or no batch."""
    for r in range(num_replicas):
        real = len(range(r, n, num_replicas))
        got = math.ceil(n / num_replicas) if padded else real
        if real == 0 or (drop_last and batch_size is not None and got < batch_size):
            hint = " (drop_last=True)" if drop_last else ""
            raise ValueError(
                f"dataset of {n} samples across {num_replicas} ranks with batch_size {batch_size}"
                f"{hint} leaves rank {r} with nothing; use fewer ranks, a smaller batch or more data"
            )


def _train_sampler(sampler: Iterable[Any], loader: DataLoader, num_replicas: int, rank: int, seed: int) -> Sampler[Any]:
    dataset = loader.dataset
    if type(sampler) is SequentialSampler:
        return DistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=seed)
    if type(sampler) is RandomSampler and not sampler.replacement and sampler.num_samples == len(dataset):  # type: ignore[arg-type]
        return DistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=seed)
    return DistributedSamplerWrapper(sampler, num_replicas, rank)


def _needs_shard(loader: DataLoader, sampler: Iterable[Any], num_replicas: int) -> bool:
    if num_replicas <= 1 or isinstance(loader.dataset, IterableDataset):
        return False
    return not isinstance(sampler, DistributedSampler | DistributedSamplerWrapper | EvalShardSampler)


# ---- public API ---------------------------------------------------------------------------------
def check_shardable(loader: Iterable[Any], num_replicas: int, use_distributed_sampler: bool, what: str) -> None:
    """Refuse a plain iterable on several ranks unless the user says it is already sharded.

    Only a DataLoader has a sampler the Trainer can split; any other iterable would give every
    rank the same batches, silently training on duplicates and counting metrics several times.
    """
    if num_replicas > 1 and use_distributed_sampler and not isinstance(loader, DataLoader):
        raise ValueError(
            f"the {what} loader ({type(loader).__name__}) is not a DataLoader, so the Trainer cannot shard it "
            f"across {num_replicas} ranks; pass a DataLoader (the Trainer then gives each rank its share with a "
            "distributed sampler), or give each rank its own share yourself and pass use_distributed_sampler=False"
        )


@overload
def prepare_train_loader(
    loader: DataLoader, num_replicas: int, rank: int, seed: int = ..., use_distributed_sampler: bool = ...
) -> DataLoader: ...
@overload
def prepare_train_loader(
    loader: Iterable[Any], num_replicas: int, rank: int, seed: int = ..., use_distributed_sampler: bool = ...
) -> Iterable[Any]: ...
def prepare_train_loader(
    loader: Iterable[Any], num_replicas: int, rank: int, seed: int = 0, use_distributed_sampler: bool = True
) -> Iterable[Any]:
    """Shard a training loader across ranks; one rank (or opting out) keeps the user's loader.

    A plain iterable is always kept as it is, and refused on several ranks unless opted out.
    """
    if not isinstance(loader, DataLoader):
        check_shardable(loader, num_replicas, use_distributed_sampler, "training")
        return loader
    sampler, batch_size, drop_last = _batching(loader)
    if not use_distributed_sampler or not _needs_shard(loader, sampler, num_replicas):
        return loader
    _check_rank(num_replicas, rank)
    if _has_custom_batch_sampler(loader):
        raise ValueError(
            f"cannot shard the custom batch_sampler {type(loader.batch_sampler).__name__} across "
            f"{num_replicas} ranks; set use_distributed_sampler=False and shard it yourself"
        )
    _check_room(len(_sized(sampler)), num_replicas, batch_size, drop_last, padded=True)
    new = _train_sampler(sampler, loader, num_replicas, rank, seed)
    rebuilt = _rebuild(loader, new, batch_size, drop_last)
    if loader.generator is None:
        # Ranks seeded alike would give their workers identical seeds (the DataLoader draws
        # base_seed from the global RNG): a per-rank generator keeps augmentations independent.
        rebuilt.generator = torch.Generator().manual_seed(_draw_seed() + rank)
    return rebuilt


def _draw_seed() -> int:
    return int(torch.empty((), dtype=torch.int64).random_(2**62).item())


@overload
def prepare_eval_loader(
    loader: DataLoader, num_replicas: int, rank: int, use_distributed_sampler: bool = ...
) -> DataLoader: ...
@overload
def prepare_eval_loader(
    loader: Iterable[Any], num_replicas: int, rank: int, use_distributed_sampler: bool = ...
) -> Iterable[Any]: ...
def prepare_eval_loader(
    loader: Iterable[Any], num_replicas: int, rank: int, use_distributed_sampler: bool = True
) -> Iterable[Any]:
    """Shard an eval loader without padding, so metrics count every sample exactly once.

    A DataLoader is always sharded (exact metrics need it). ``use_distributed_sampler`` only
    matters for a plain iterable, which cannot be: False says each rank was given its own share.
    """
    if not isinstance(loader, DataLoader):
        check_shardable(loader, num_replicas, use_distributed_sampler, "evaluation")
        return loader
    sampler, batch_size, drop_last = _batching(loader)
    if not _needs_shard(loader, sampler, num_replicas):
        return loader
    _check_rank(num_replicas, rank)
    if _has_custom_batch_sampler(loader):  # whole batches are strided instead of samples
        _check_room(len(_sized(loader.batch_sampler)), num_replicas, None, False, padded=False)
        shard = EvalShardSampler(loader.batch_sampler, num_replicas, rank)  # type: ignore[arg-type]
        return DataLoader(loader.dataset, batch_sampler=shard, **_settings(loader))
    if type(sampler) is RandomSampler:  # each rank would shuffle differently: some samples twice
        sampler = SequentialSampler(loader.dataset)  # type: ignore[arg-type]
    _check_room(len(_sized(sampler)), num_replicas, batch_size, drop_last, padded=False)
    return _rebuild(loader, EvalShardSampler(sampler, num_replicas, rank), batch_size, drop_last)


def _call_set_epoch(objects: Iterable[object], epoch: int) -> None:
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
        _call_set_epoch([loader], epoch)
        return
    bs = loader.batch_sampler
    _call_set_epoch([loader.sampler, bs, getattr(bs, "sampler", None)], epoch)


def _sampler_generator(loader: DataLoader) -> torch.Generator | None:
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    if isinstance(sampler, DistributedSamplerWrapper):
        sampler = sampler.sampler
    gen = getattr(sampler, "generator", None)
    return gen if isinstance(gen, torch.Generator) else None


def _epoch_generators(loader: Iterable[Any]) -> dict[str, torch.Generator | None]:
    """The generators, besides the global RNG, that order an epoch: a plain iterable has none we know of."""
    if not isinstance(loader, DataLoader):
        return {"loader_generator": None, "sampler_generator": None}
    return {"loader_generator": loader.generator, "sampler_generator": _sampler_generator(loader)}


def capture_epoch_rng(loader: Iterable[Any]) -> dict[str, torch.Tensor]:
    """Snapshot, before ``iter(loader)``, every RNG that decides the epoch's order and worker seeds."""
    state = {"global": torch.get_rng_state()}
    for key, gen in _epoch_generators(loader).items():
        if gen is not None:
            state[key] = gen.get_state()
    return state


def restore_epoch_rng(loader: Iterable[Any], state: dict[str, torch.Tensor]) -> None:
    """Put back what :func:`capture_epoch_rng` saved; a missing generator on either side is an error."""
    gens = _epoch_generators(loader)
    for key, gen in gens.items():
        if (key in state) != (gen is not None):
            raise ValueError(f"saved epoch RNG and loader disagree on {key!r}: was the loader rebuilt differently?")
    torch.set_rng_state(state["global"])
    for key, gen in gens.items():
        if gen is not None:
            gen.set_state(state[key])


def skip_batches(loader: Iterable[Any], num_batches: int) -> Iterable[Any]:
    """Same loader minus its first ``num_batches`` batches; a DataLoader skips index lists (no data loaded).

    ``iter()`` of the result makes the same RNG draws, in the same order, as ``iter()`` followed by
    the first ``next()`` of the original: the DataLoader's base_seed, then the sampler's own seed.
    A plain iterable has no indices: its first batches are read and discarded (``itertools.islice``)
    inside ``iter()``, which resumes exactly only when it yields the same batches each time it is
    iterated with the same global RNG (the only RNG the Trainer restores for it).
    """
    if num_batches < 0:
        raise ValueError(f"num_batches must be >= 0, got {num_batches}")
    if not isinstance(loader, DataLoader):
        return _SkipIterable(loader, num_batches)
    if isinstance(loader.dataset, IterableDataset):
        raise ValueError("cannot skip batches of an IterableDataset without reading them; make it resumable")
    if loader.batch_sampler is None:  # batch_size=None: the sampler yields whole items
        skipper = _SkipBatches(loader.sampler, num_batches)
        return _ResumeLoader(loader.dataset, batch_size=None, sampler=skipper, **_settings(loader))
    skipper = _SkipBatches(loader.batch_sampler, num_batches)
    return _ResumeLoader(loader.dataset, batch_sampler=skipper, **_settings(loader))


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
            raise ValueError(f"a batch limit must be >= 0, got {limit}")
        return min(limit, total)
    if not 0.0 <= limit <= 1.0:
        raise ValueError(f"a float batch limit is a fraction in [0.0, 1.0], got {limit}")
    if math.isinf(total):
        if limit not in (0.0, 1.0):
            raise ValueError(f"a fraction limit ({limit}) needs a loader with __len__; pass an int instead")
        return total if limit == 1.0 else 0
    return int(total * limit)
