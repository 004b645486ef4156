"""Random augmentation in workers or on several ranks: every sample has its own seed.

The rule users hold: one device without workers draws exactly as a hand-written loop (and
Lightning) does, from the default generator. As soon as samples are drawn in workers or on
several ranks, a sample's draws depend only on the data seed, the epoch and its index, so
1 x 32 with workers, 2 x 16 with or without workers, and a resume from one to the other agree.

PyTorch seeds worker ``w`` once with ``base_seed + w``; a sample then draws from wherever that
worker's stream happens to be, which depends on which worker got which batch and on every sample
the worker loaded before. A resumed run skips its finished batches without loading them, so those
streams cannot be put back. Instead, just before ``dataset[i]`` runs in a worker, the worker's
torch (CPU), ``random`` and ``numpy`` generators are seeded from (data seed, epoch, ``i``). What
a sample draws then depends on that sample alone: not on the number of workers, on prefetching,
on persistent workers, on the number of ranks, or on where a run was resumed.

The sampler yields ``SampleKey(epoch, index)`` instead of ``index`` and ``SeededDataset`` seeds
from the key, then calls the user's ``dataset[index]``. Without workers (several ranks) it runs in
the main process and puts the generators back after each batch: the model's own draws (dropout)
are untouched by data loading. Cost: about 10 microseconds per sample (``benchmarks/sample_seeds.py``);
none for a ``TensorDataset``, which draws nothing.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler, TensorDataset

from trainer.data.loaders import call_set_epoch, rebuild, sized
from trainer.seed import rng_state, set_rng_state

_MASK64 = (1 << 64) - 1


class SampleKey(NamedTuple):
    """What the sampler hands a worker: the sample's index and the epoch it is drawn in."""

    epoch: int
    index: Any


def sample_seed(data_seed: int, epoch: int, index: Any) -> int:
    """A 64-bit seed mixed from the three numbers (splitmix64 finaliser), stable across processes."""
    key = index if isinstance(index, int) else zlib.crc32(repr(index).encode())
    x = (data_seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + key * 0x94D049BB133111EB) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def seed_this_sample(data_seed: int, epoch: int, index: Any) -> None:
    """Seed the generators a ``__getitem__`` draws from (the default CPU generator, not every device:
    ``torch.manual_seed`` would cost 300 microseconds)."""
    seed = sample_seed(data_seed, epoch, index)
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return
    np.random.seed(seed & 0xFFFFFFFF)


class KeyedSampler(Sampler[Any]):
    """Yields ``SampleKey(epoch, i)`` (or lists of them, for a batch sampler) for each item of ``sampler``."""

    def __init__(self, sampler: Iterable[Any], batched: bool = False) -> None:
        self.sampler, self.batched, self.epoch = sampler, batched, 0

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        if self.batched:
            return ([SampleKey(epoch, i) for i in batch] for batch in self.sampler)
        return (SampleKey(epoch, i) for i in self.sampler)

    def __len__(self) -> int:
        return len(sized(self.sampler))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        call_set_epoch([self.sampler, getattr(self.sampler, "sampler", None)], epoch)


class SeededDataset(Dataset[Any]):
    """The user's dataset, reached by ``SampleKey``; each sample runs with its own seed.

    Other attributes are the user's dataset's, so code reading ``loader.dataset.classes`` still works.
    """

    def __init__(self, dataset: Dataset[Any], data_seed: int, restore: bool = False) -> None:
        self.dataset, self.data_seed, self.restore = dataset, data_seed, restore

    def __getitem__(self, key: SampleKey) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[SampleKey]) -> list[Any]:
        if not self.restore:
            return [self._get(key) for key in keys]  # per sample, even where the user batches the fetch
        state = rng_state()
        try:
            return [self._get(key) for key in keys]
        finally:
            set_rng_state(state)

    def _get(self, key: SampleKey) -> Any:
        seed_this_sample(self.data_seed, key.epoch, key.index)
        return self.dataset[key.index]

    def __len__(self) -> int:
        return len(sized(self.dataset))

    def __getattr__(self, name: str) -> Any:
        if name in ("dataset", "data_seed", "restore") or name.startswith("__"):
            raise AttributeError(name)  # not set yet (unpickling) or a protocol lookup
        return getattr(self.dataset, name)


def seed_samples(loader: Iterable[Any], data_seed: int, several_ranks: bool = False) -> Iterable[Any]:
    """``loader`` rebuilt so each sample draws from its own seed, in workers or on several ranks.

    One device without workers keeps the user's loader: its samples draw from the main process's
    RNG as in a hand-written loop, and checkpoints restore that RNG exactly. An iterable dataset
    has no index to seed from; a ``TensorDataset`` draws nothing.
    """
    if not isinstance(loader, DataLoader) or (loader.num_workers == 0 and not several_ranks):
        return loader
    if isinstance(loader.dataset, IterableDataset | TensorDataset):
        return loader
    dataset = SeededDataset(loader.dataset, data_seed, restore=loader.num_workers == 0)
    bs = loader.batch_sampler
    if bs is None:
        return rebuild(loader, dataset, batch_size=None, sampler=KeyedSampler(loader.sampler))
    if type(bs) is not BatchSampler:
        return rebuild(loader, dataset, batch_sampler=KeyedSampler(bs, batched=True))
    keyed = KeyedSampler(bs.sampler)
    return rebuild(loader, dataset, batch_size=bs.batch_size, sampler=keyed, drop_last=bs.drop_last)
