"""Each rank's share of a loader: a distributed sampler built (never patched) keeping every
setting; evaluation shards unpadded, so metrics count every sample exactly once.

Training shares interleave as ``DistributedSampler``'s do (rank r takes items r, r+W, ...) of the
order one device would see: a ``SequentialSampler``'s, or a ``RandomSampler``'s drawn as on one
device (``trainer.data.shuffle``), so each global batch holds one device's batch.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, overload

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from trainer.data.loaders import call_set_epoch, has_len, rebuild, sized
from trainer.data.shuffle import Agree, SharedShuffle
from trainer.exceptions import MisconfigurationException


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
        return math.ceil(len(sized(self.sampler)) / self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the wrapped sampler so its own per-epoch shuffle still happens."""
        call_set_epoch([self.sampler], epoch)


class EvalShardSampler(Sampler[Any]):
    """Rank r gets items r, r+W, r+2W, ... of the wrapped order, unpadded: every item seen once."""

    def __init__(self, sampler: Iterable[Any], num_replicas: int, rank: int) -> None:
        self.sampler, self.num_replicas, self.rank = sampler, num_replicas, rank

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.sampler, self.rank, None, self.num_replicas)

    def __len__(self) -> int:
        return len(range(self.rank, len(sized(self.sampler)), self.num_replicas))


# ---- rebuilding loaders -------------------------------------------------------------------------
def _batching(loader: DataLoader) -> tuple[Iterable[Any], int | None, bool]:
    """The per-sample sampler, batch size and drop_last, wherever the user put them."""
    bs = loader.batch_sampler
    if type(bs) is BatchSampler:
        return bs.sampler, bs.batch_size, bs.drop_last
    return getattr(bs, "sampler", loader.sampler), None, False  # a custom batch sampler batches itself


def _has_custom_batch_sampler(loader: DataLoader) -> bool:
    return loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler


def _rebuild(loader: DataLoader, sampler: Iterable[Any], batch_size: int | None, drop_last: bool) -> DataLoader:
    return rebuild(loader, loader.dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last)


def _check_rank(num_replicas: int, rank: int) -> None:
    if not 0 <= rank < num_replicas:
        raise MisconfigurationException(f"rank must be in [0, {num_replicas}), got {rank}")


def _check_room(n: int, num_replicas: int, batch_size: int | None, drop_last: bool, padded: bool) -> None:
    """Fail the same way on every rank when some rank would get no real sample or no batch."""
    for r in range(num_replicas):
        real = len(range(r, n, num_replicas))
        got = math.ceil(n / num_replicas) if padded else real
        if real == 0 or (drop_last and batch_size is not None and got < batch_size):
            hint = " (drop_last=True)" if drop_last else ""
            raise MisconfigurationException(
                f"dataset of {n} samples across {num_replicas} ranks with batch_size {batch_size}"
                f"{hint} leaves rank {r} with nothing; use fewer ranks, a smaller batch or more data"
            )


def _train_sampler(
    sampler: Iterable[Any], loader: DataLoader, num_replicas: int, rank: int, seed: int, agree: Agree | None
) -> Sampler[Any]:
    dataset = loader.dataset
    if type(sampler) is SequentialSampler:
        return DistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=seed)
    if is_plain_shuffle(sampler, dataset):
        return DistributedSamplerWrapper(SharedShuffle(dataset, agree), num_replicas, rank)  # type: ignore[arg-type]
    return DistributedSamplerWrapper(sampler, num_replicas, rank)


def is_plain_shuffle(sampler: Iterable[Any], dataset: Any) -> bool:
    """``shuffle=True``'s sampler: a permutation per epoch drawn from the default generator."""
    return (
        type(sampler) is RandomSampler
        and sampler.generator is None
        and not sampler.replacement
        and sampler.num_samples == len(dataset)
    )


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
        raise MisconfigurationException(
            f"the {what} loader ({type(loader).__name__}) is not a DataLoader, so the Trainer cannot shard it "
            f"across {num_replicas} ranks; pass a DataLoader (the Trainer then gives each rank its share with a "
            "distributed sampler), or give each rank its own share yourself and pass use_distributed_sampler=False"
        )


@overload
def prepare_train_loader(
    loader: DataLoader,
    num_replicas: int,
    rank: int,
    seed: int = ...,
    use_distributed_sampler: bool = ...,
    agree: Agree | None = ...,
) -> DataLoader: ...
@overload
def prepare_train_loader(
    loader: Iterable[Any],
    num_replicas: int,
    rank: int,
    seed: int = ...,
    use_distributed_sampler: bool = ...,
    agree: Agree | None = ...,
) -> Iterable[Any]: ...
def prepare_train_loader(
    loader: Iterable[Any],
    num_replicas: int,
    rank: int,
    seed: int = 0,
    use_distributed_sampler: bool = True,
    agree: Agree | None = None,
) -> Iterable[Any]:
    """Shard a training loader across ranks; one rank (or opting out) keeps the user's loader.

    A plain iterable is always kept as it is, and refused on several ranks unless opted out.
    ``agree`` gives every rank rank 0's value (a broadcast): the shuffle seed each rank draws.
    The rebuilt loader draws its base seed from the default generator, as the user's does (its
    workers' seeds do not matter: each sample draws from its own seed, ``sample_seeds``).
    """
    if not isinstance(loader, DataLoader):
        check_shardable(loader, num_replicas, use_distributed_sampler, "training")
        return loader
    sampler, batch_size, drop_last = _batching(loader)
    if not use_distributed_sampler or not _needs_shard(loader, sampler, num_replicas):
        return loader
    _check_rank(num_replicas, rank)
    if _has_custom_batch_sampler(loader):
        raise MisconfigurationException(
            f"cannot shard the custom batch_sampler {type(loader.batch_sampler).__name__} across "
            f"{num_replicas} ranks; set use_distributed_sampler=False and shard it yourself"
        )
    _check_room(len(sized(sampler)), num_replicas, batch_size, drop_last, padded=True)
    new = _train_sampler(sampler, loader, num_replicas, rank, seed, agree)
    return _rebuild(loader, new, batch_size, drop_last)


def unshuffled(loader: Iterable[Any], prefix: str = "train") -> Iterable[Any]:
    """The loader in its dataset's order (``overfit_batches`` runs the same first batches each epoch): any sampler
    but a ``SequentialSampler`` is replaced by one, with Lightning's warning (``prefix``: train or val)."""
    if not isinstance(loader, DataLoader) or _has_custom_batch_sampler(loader):
        return loader
    sampler, batch_size, drop_last = _batching(loader)
    if type(sampler) is SequentialSampler or isinstance(loader.dataset, IterableDataset):
        return loader
    warnings.warn(
        f"You requested to overfit but enabled {prefix} dataloader shuffling. We are turning off the {prefix} "
        f"dataloader shuffling for you (overfit_batches: every epoch runs the same first batches, in order).",
        stacklevel=4,
    )
    return _rebuild(loader, SequentialSampler(loader.dataset), batch_size, drop_last)  # type: ignore[arg-type]


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
    _warn_dropped(loader, sampler, batch_size, drop_last)
    if not _needs_shard(loader, sampler, num_replicas):
        return loader
    _check_rank(num_replicas, rank)
    if _has_custom_batch_sampler(loader):  # whole batches are strided instead of samples
        _check_room(len(sized(loader.batch_sampler)), num_replicas, None, False, padded=False)
        shard = EvalShardSampler(loader.batch_sampler, num_replicas, rank)  # type: ignore[arg-type]
        return rebuild(loader, loader.dataset, batch_sampler=shard)
    if type(sampler) is RandomSampler:  # each rank would shuffle differently: some samples twice
        sampler = SequentialSampler(loader.dataset)  # type: ignore[arg-type]
    if drop_last and batch_size is not None:  # drop what one device drops: the same samples are evaluated
        kept = len(sized(sampler)) // batch_size * batch_size
        sampler = _Head(sampler, kept)
    _check_room(len(sized(sampler)), num_replicas, None, False, padded=False)
    return _rebuild(loader, EvalShardSampler(sampler, num_replicas, rank), batch_size, False)


class _Head(Sampler[Any]):
    """The first ``n`` items of a sampler."""

    def __init__(self, sampler: Iterable[Any], n: int) -> None:
        self.sampler, self.n = sampler, n

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.sampler, self.n)

    def __len__(self) -> int:
        return self.n


def _warn_dropped(loader: DataLoader, sampler: Iterable[Any], batch_size: int | None, drop_last: bool) -> None:
    """An evaluation loader with ``drop_last=True`` leaves samples out of the metrics: say how many."""
    if not drop_last or batch_size is None or not has_len(sampler):
        return
    total = len(sized(sampler))
    if dropped := total % batch_size:
        warnings.warn(
            f"the evaluation DataLoader has drop_last=True: {dropped} of its {total} samples are left out of the "
            "metrics (on every strategy). Set drop_last=False to evaluate every sample.",
            stacklevel=4,
        )
