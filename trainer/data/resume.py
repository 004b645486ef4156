"""Exact mid-epoch resume: the epoch's RNG captured and restored, finished batches skipped as
index lists (no data loaded), so the rest of the epoch is what an uninterrupted run would see."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler
from torch.utils.data.dataloader import _BaseDataLoaderIter
from typing_extensions import override

from trainer.data.loaders import call_set_epoch, has_len, rebuild_settings, sized
from trainer.data.sample_seeds import KeyedSampler
from trainer.data.sharding import DistributedSamplerWrapper
from trainer.exceptions import MisconfigurationException


class _SkipBatches(Sampler[Any]):
    """Iterate a (batch) sampler but drop its first ``skip`` items: indices only, no data loaded."""

    def __init__(self, source: Iterable[Any], skip: int) -> None:
        self.source, self.skip = source, skip
        self._current: _LazyIter | None = None

    def __iter__(self) -> Iterator[Any]:
        self._current = _LazyIter(self)
        return self._current

    def __len__(self) -> int:
        return max(len(sized(self.source)) - self.skip, 0)

    def prime(self) -> None:
        """Make the source draw its RNG and skip now, before the caller restores the global RNG."""
        if self._current is not None:
            self._current.start()

    def set_epoch(self, epoch: int) -> None:
        call_set_epoch([self.source, getattr(self.source, "sampler", None)], epoch)


class _LazyIter(Iterator[Any]):
    """Starts the source on first use; starting pulls one item so lazy samplers draw their seed."""

    def __init__(self, owner: _SkipBatches) -> None:
        self._owner = owner
        self._it: Iterator[Any] | None = None

    def start(self) -> Iterator[Any]:
        if self._it is None:
            source, skip = self._owner.source, self._owner.skip
            it = iter(source)
            collections.deque(itertools.islice(it, skip), maxlen=0)
            # Not past the end: the uninterrupted run stops at its last batch without asking for another
            # (a RandomSampler with its own generator draws once more when it is run to exhaustion).
            ahead = 0 if has_len(source) and skip >= len(sized(source)) else 1
            self._it = itertools.chain(list(itertools.islice(it, ahead)), it)
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
        call_set_epoch([self.source], epoch)


def _unwrapped(sampler: Any) -> Any:
    """The user's sampler inside the ones the Trainer wraps it in."""
    while isinstance(sampler, DistributedSamplerWrapper | KeyedSampler):
        sampler = sampler.sampler
    return sampler


def _sampler_generator(loader: DataLoader) -> torch.Generator | None:
    batches = _unwrapped(loader.batch_sampler)
    sampler = _unwrapped(getattr(batches, "sampler", loader.sampler))
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
            raise MisconfigurationException(
                f"saved epoch RNG and loader disagree on {key!r}: was the loader rebuilt differently?"
            )
    torch.set_rng_state(state["global"])
    for key, gen in gens.items():
        if gen is not None:
            gen.set_state(state[key])


def start_persistent_workers(loader: Iterable[Any], start: Callable[[Iterable[Any]], Any]) -> None:
    """A resumed run's persistent workers, started without a trace in any RNG.

    With ``persistent_workers`` a run creates its iterator (and draws its workers' base seed from the
    global RNG or the loader's generator) once, in its first epoch; later epochs reuse it. A run
    resumed in a later epoch would create it then: one draw the uninterrupted run never made, which
    shifts every later random number. Creating it here, with the RNGs put back, makes every epoch's
    ``iter()`` a reuse, as in the uninterrupted run. (Which seed the workers got does not matter:
    the samples draw from their own seeds, see ``sample_seeds``.)
    """
    if not isinstance(loader, DataLoader) or not loader.persistent_workers or loader.num_workers == 0:
        return
    if getattr(loader, "_iterator", None) is not None:
        return
    state = capture_epoch_rng(loader)
    start(loader)
    restore_epoch_rng(loader, state)


def skip_batches(loader: Iterable[Any], num_batches: int, reused_workers: bool = False) -> Iterable[Any]:
    """Same loader minus its first ``num_batches`` batches; a DataLoader skips index lists (no data loaded).

    ``iter()`` of the result makes the same RNG draws, in the same order, as ``iter()`` followed by
    the first ``next()`` of the original: the DataLoader's base_seed, then the sampler's own seed.
    ``reused_workers``: the original reused persistent workers here and drew no base_seed, so the
    result draws its own from a private generator.
    A plain iterable has no indices: its first batches are read and discarded (``itertools.islice``)
    inside ``iter()``, which resumes exactly only when it yields the same batches each time it is
    iterated with the same global RNG (the only RNG the Trainer restores for it).
    """
    if num_batches < 0:
        raise MisconfigurationException(f"num_batches must be >= 0, got {num_batches}")
    if not isinstance(loader, DataLoader):
        return _SkipIterable(loader, num_batches)
    if isinstance(loader.dataset, IterableDataset):
        raise MisconfigurationException(
            "cannot skip batches of an IterableDataset without reading them; make it resumable"
        )
    settings = rebuild_settings(loader)
    if reused_workers:
        settings["generator"] = torch.Generator()
    if loader.batch_sampler is None:  # batch_size=None: the sampler yields whole items
        skipper = _SkipBatches(loader.sampler, num_batches)
        return _ResumeLoader(loader.dataset, batch_size=None, sampler=skipper, **settings)
    skipper = _SkipBatches(loader.batch_sampler, num_batches)
    return _ResumeLoader(loader.dataset, batch_sampler=skipper, **settings)
