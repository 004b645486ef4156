"""Lightning's ``CombinedLoader``: several loaders (a dict, list or tuple of them) iterated together.

Modes, as Lightning's: ``min_size`` (stop with the shortest), ``max_size_cycle`` (stop with the longest, the others
start over), ``max_size`` (stop with the longest, the others give None once done) and ``sequential`` (each loader
whole, one after the other). Iterating it yields ``(batch, batch_idx, dataloader_idx)``; ``batch`` has the shape of
the collection given (``{"a": batch_a, "b": batch_b}``).

``fit`` takes one for training (a dict or list of training loaders becomes one in ``max_size_cycle`` mode, as in
Lightning) and ``validate``/``test``/``predict`` one in any mode (``sequential``: the loaders run one after the
other with their ``dataloader_idx``). The loops see it through ``as_batches``, which yields the batches alone; each
loader inside is sharded across ranks as a loader on its own would be (``map_loaders``). A mid-epoch resume reads
past the finished batches of a combined loader (its loaders advance together, so their samplers cannot skip by
index).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

from trainer.exceptions import MisconfigurationException

Mode = Literal["min_size", "max_size_cycle", "max_size", "sequential"]
MODES: dict[str, Callable[[list[int | float]], int | float]] = {
    "min_size": min,
    "max_size_cycle": max,
    "max_size": max,
    "sequential": sum,
}


def _is_leaf(obj: Any) -> bool:
    """One loader: anything but a dict, list or tuple, or one of those holding only numbers and strings (``[1, 2, 3]``
    is one iterable of three items, as in Lightning; so is an empty list)."""
    if not isinstance(obj, Mapping | list | tuple):
        return True
    children = obj.values() if isinstance(obj, Mapping) else obj
    return all(isinstance(child, int | float | str) for child in children)


def _first(values: list[Any]) -> Any:
    return values[0]


def _keyed(keys: list[Any], values: list[Any]) -> dict[Any, Any]:
    return dict(zip(keys, values))


# The rebuilds are module functions and partials, not closures: a Trainer holding its loaders pickles.
def _flatten(iterables: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The loaders of a collection (dicts, lists and tuples, nested), and how to put values back in its shape."""
    if _is_leaf(iterables):
        return [iterables], _first
    if isinstance(iterables, Mapping):
        keys = list(iterables)
        parts = [_flatten(iterables[k]) for k in keys]
        return _join(parts, functools.partial(_keyed, keys))
    if isinstance(iterables, list | tuple):
        parts = [_flatten(item) for item in iterables]
        return _join(parts, tuple if isinstance(iterables, tuple) else list)
    return [iterables], _first


def _join(
    parts: list[tuple[list[Any], Callable[[list[Any]], Any]]], build: Callable[[list[Any]], Any]
) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The leaves of several parts in order, and a rebuild that hands each part its own slice of the values."""
    leaves = [leaf for part, _ in parts for leaf in part]
    sizes = [len(part) for part, _ in parts]
    return leaves, functools.partial(_unflatten, sizes, [rebuild for _, rebuild in parts], build)


def _unflatten(
    sizes: list[int], rebuilds: list[Callable[[list[Any]], Any]], build: Callable[[list[Any]], Any], values: list[Any]
) -> Any:
    out, start = [], 0
    for size, rebuild in zip(sizes, rebuilds):
        out.append(rebuild(values[start : start + size]))
        start += size
    return build(out)


def _length(loader: Any) -> int | float:
    try:
        return len(loader)
    except (TypeError, NotImplementedError):
        return math.inf


class CombinedLoader(Iterable[Any]):
    """Iterate several loaders together (``mode``: min_size, max_size_cycle, max_size or sequential)."""

    def __init__(self, iterables: Any, mode: Mode = "min_size") -> None:
        if mode not in MODES:
            raise MisconfigurationException(f"Unsupported mode {mode!r}, please select one of: {list(MODES)}.")
        self._iterables = iterables
        self._flattened, self._unflatten = _flatten(iterables)
        self._mode: Mode = mode
        self._limits: list[int | float] | None = None
        self._iterator: Iterator[tuple[Any, int, int]] | None = None

    @property
    def iterables(self) -> Any:
        """The loaders in the shape given (a dict, list, tuple, or the one loader)."""
        return self._iterables

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def flattened(self) -> list[Any]:
        return self._flattened

    @flattened.setter
    def flattened(self, flattened: list[Any]) -> None:
        if len(flattened) != len(self._flattened):
            raise MisconfigurationException(
                f"Mismatch in flattened length ({len(flattened)}) and existing length ({len(self._flattened)})"
            )
        self._flattened = list(flattened)
        self._iterables = self._unflatten(self._flattened)

    @property
    def sampler(self) -> Any:
        return self._unflatten([getattr(x, "sampler", None) for x in self._flattened])

    @property
    def batch_sampler(self) -> Any:
        return self._unflatten([getattr(x, "batch_sampler", None) for x in self._flattened])

    @property
    def limits(self) -> list[int | float] | None:
        """The number of batches taken from each loader (None: all)."""
        return self._limits

    @limits.setter
    def limits(self, limits: int | float | list[int | float] | None) -> None:
        if isinstance(limits, int | float):
            limits = [limits] * len(self._flattened)
        elif isinstance(limits, list) and len(limits) != len(self._flattened):
            raise MisconfigurationException(
                f"Mismatch in number of limits ({len(limits)}) and number of iterables ({len(self._flattened)})"
            )
        self._limits = limits

    def lengths(self) -> list[int | float]:
        """Each loader's number of batches (inf without a length), under ``limits``."""
        lengths = [_length(loader) for loader in self._flattened]
        if self._limits is not None:
            lengths = [min(length, limit) for length, limit in zip(lengths, self._limits)]
        return lengths

    def batches_per_epoch(self) -> int | float:
        """The number of batches a pass yields: the mode's min, max or sum of ``lengths``."""
        return MODES[self._mode](self.lengths()) if self._flattened else 0

    def __iter__(self) -> CombinedLoader:
        """Starts the pass: as in Lightning, every loader is started (its workers up) now, not at the first batch;
        ``sequential`` starts only the first, each next one when its turn comes."""
        loaders = self._flattened[:1] if self._mode == "sequential" else self._flattened
        self._iterator = self._generate([iter(loader) for loader in loaders])
        return self

    def __next__(self) -> tuple[Any, int, int]:
        if self._iterator is None:
            raise RuntimeError("Please call `iter(combined_loader)` first.")
        return next(self._iterator)

    def __len__(self) -> int:
        if self._iterator is None:
            raise RuntimeError("Please call `iter(combined_loader)` first.")
        total = self.batches_per_epoch()
        if math.isinf(total):
            raise TypeError("a CombinedLoader over a loader without a length has no length")
        return int(total)

    def reset(self) -> None:
        """Forget the pass in progress and end DataLoader workers kept between passes."""
        from trainer.data.loaders import shut_down_workers

        self._iterator = None
        shut_down_workers(self._flattened)

    def _generate(self, started: list[Iterator[Any]]) -> Iterator[tuple[Any, int, int]]:
        limits = [math.inf] * len(self._flattened) if self._limits is None else self._limits
        if self._mode == "sequential":
            for idx, (loader, limit) in enumerate(zip(self._flattened, limits)):
                for batch_idx, batch in enumerate(started[0] if idx == 0 else loader):
                    if batch_idx >= limit:
                        break
                    yield batch, batch_idx, idx
            return
        total = self.batches_per_epoch()
        iterators = started
        consumed = [False] * len(iterators)
        batch_idx = 0
        while batch_idx < total:
            values = []
            for i, loader in enumerate(self._flattened):
                try:
                    values.append(next(iterators[i]))
                    continue
                except StopIteration:
                    consumed[i] = True
                if self._mode == "min_size" or all(consumed):
                    return
                if self._mode == "max_size":
                    values.append(None)
                    continue
                iterators[i] = iter(loader)  # max_size_cycle: a shorter loader starts over
                values.append(next(iterators[i]))
            yield self._unflatten(values), batch_idx, 0
            batch_idx += 1


class CombinedBatches(Iterable[Any]):
    """What the loops iterate for a ``CombinedLoader``: its batches alone, with its length and ``set_epoch``."""

    def __init__(self, combined: CombinedLoader) -> None:
        self.combined = combined

    def __iter__(self) -> Iterator[Any]:
        return (batch for batch, _, _ in iter(self.combined))

    def __len__(self) -> int:
        total = self.combined.batches_per_epoch()
        if math.isinf(total):
            raise TypeError("a CombinedLoader over a loader without a length has no length")
        return int(total)

    def inner_loaders(self) -> list[Any]:
        return list(self.combined.flattened)

    def set_epoch(self, epoch: int) -> None:
        from trainer.data.loaders import set_epoch

        for loader in self.combined.flattened:
            set_epoch(loader, epoch)


class ShapedLoaders(list[Any]):
    """Several loaders as a list, with the shape they were given in (one loader, a list, a tuple or a dict), so the
    Trainer shows them as given (``trainer.val_dataloaders``), as Lightning does."""

    def __init__(self, loaders: Iterable[Any], unflatten: Callable[[list[Any]], Any]) -> None:
        super().__init__(loaders)
        self.unflatten = unflatten


def shaped(given: Any) -> ShapedLoaders:
    """``given`` (a loader, or a dict, list or tuple of them: one level, as a list of batches is one loader) as a
    ``ShapedLoaders``."""
    if _is_leaf(given):
        return ShapedLoaders([given], _first)
    if isinstance(given, Mapping):
        keys = list(given)
        return ShapedLoaders(given.values(), functools.partial(_keyed, keys))
    if isinstance(given, list | tuple):
        return ShapedLoaders(given, tuple if isinstance(given, tuple) else list)
    return ShapedLoaders([given], _first)


def as_given(loaders: list[Any]) -> Any:
    """The placed ``loaders`` in the shape their ``ShapedLoaders`` was given in (a ``CombinedLoader`` for its batches);
    None when there are none."""
    if not loaders:
        return None
    shown = [loader.combined if isinstance(loader, CombinedBatches) else loader for loader in loaders]
    return getattr(loaders, "unflatten", list)(shown)


def map_loaders(loader: Any, place: Callable[[Any], Any]) -> Any:
    """``place`` applied to a loader, or to each loader of a ``CombinedLoader`` (a new one, same mode and limits)."""
    if not isinstance(loader, CombinedLoader):
        return place(loader)
    placed = CombinedLoader(loader.iterables, loader.mode)
    placed.flattened = [place(inner) for inner in loader.flattened]
    placed.limits = loader.limits
    return placed


def as_batches(loader: Any) -> Any:
    """The iterable of batches the loops run: a ``CombinedLoader``'s batches alone, any other loader itself."""
    return CombinedBatches(loader) if isinstance(loader, CombinedLoader) else loader
