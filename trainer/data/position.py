"""What a mid-epoch position depends on, checked on resume; the same position on another number of ranks.

A checkpoint taken in the middle of an epoch records how many batches of the epoch were trained.
That count only means the same samples if the data is laid out the same way: same dataset length,
batch size, ``drop_last``, sampler, shuffle seed and number of ranks. ``layout`` records those;
``changes`` names what differs, so a resume with changed data stops with a clear error instead of
silently skipping or repeating samples.

One change keeps the position meaningful: the number of ranks, when the global batch stays the
same (2 ranks x 16 -> 1 x 32). The rest of the interrupted epoch then sees exactly the samples the
uninterrupted run would have: ``reshard`` rebuilds the old layout's global batches (the old ranks'
batches interleaved back into one device's order) and gives new rank r items r, r+W, ... of each,
as a distributed sampler would.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

from trainer.data.loaders import rebuild_settings, sized

Layout = dict[str, Any]


def layout(loader: Iterable[Any], world_size: int, seed: int, batches: int | float) -> Layout:
    """The facts a position in ``loader`` depends on (``loader`` is the user's, before sharding;
    ``batches`` this rank's batches per epoch)."""
    facts: Layout = {"world_size": world_size, "seed": seed, "sampler": _sampler_kind(loader)}
    if isinstance(loader, DataLoader):
        bs = loader.batch_sampler
        facts["dataset_length"] = len(loader.dataset) if _has_len(loader.dataset) else None  # type: ignore[arg-type]
        facts["batch_size"] = bs.batch_size if type(bs) is BatchSampler else None
        facts["drop_last"] = bs.drop_last if type(bs) is BatchSampler else None
    facts["batches_per_epoch"] = None if math.isinf(batches) else int(batches)
    return facts


def _has_len(obj: object) -> bool:
    try:
        len(obj)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _sampler_kind(loader: Iterable[Any]) -> str:
    if not isinstance(loader, DataLoader):
        return f"iterable:{type(loader).__name__}"
    bs = loader.batch_sampler
    if bs is not None and type(bs) is not BatchSampler:
        return f"batch_sampler:{type(bs).__name__}"
    sampler = bs.sampler if bs is not None else loader.sampler
    if type(sampler) is SequentialSampler:
        return "sequential"
    if type(sampler) is RandomSampler and not sampler.replacement:
        return "random"
    return f"sampler:{type(sampler).__name__}"


def changes(saved: Layout, now: Layout) -> dict[str, tuple[Any, Any]]:
    """What differs between two layouts, ignoring what the number of ranks alone explains."""
    diff = {k: (saved.get(k), now.get(k)) for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)}
    if "world_size" in diff and reshardable(saved, now):
        return {}
    return diff


def reshardable(saved: Layout, now: Layout) -> bool:
    """Only the number of ranks changed, the global batch did not, and the sampler can be rebuilt."""
    keep = ("dataset_length", "drop_last", "sampler", "seed", "batches_per_epoch")
    if any(saved.get(k) != now.get(k) for k in keep) or saved.get("sampler") not in ("sequential", "random"):
        return False
    if saved.get("batch_size") is None or now.get("batch_size") is None:
        return False
    return bool(saved["batch_size"] * saved["world_size"] == now["batch_size"] * now["world_size"])


def describe(changed: dict[str, tuple[Any, Any]]) -> str:
    return ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in changed.items())


class ReshardedBatches(Sampler[list[int]]):
    """The global batches of the old layout, each strided into this rank's share for the new number of ranks.

    The old ranks split one device's order (``sampler``'s, drawn once per epoch) as a distributed
    sampler does: padded to a multiple of their number, old rank r took items r, r+W, ... and batched
    them; a global batch is their batches interleaved back.
    """

    def __init__(self, sampler: Iterable[int], old: Layout, world_size: int, rank: int) -> None:
        self.sampler, self.world_size, self.rank = sampler, world_size, rank
        self.old_world, self.old_batch, self.drop_last = old["world_size"], old["batch_size"], bool(old["drop_last"])

    def __iter__(self) -> Iterator[list[int]]:
        order = list(self.sampler)
        total = math.ceil(len(order) / self.old_world) * self.old_world
        padded = order + (order * math.ceil((total - len(order)) / max(len(order), 1)))[: total - len(order)]
        old_ranks = [
            BatchSampler(padded[r :: self.old_world], self.old_batch, self.drop_last) for r in range(self.old_world)
        ]
        for parts in zip(*old_ranks):
            whole = [i for column in itertools.zip_longest(*parts) for i in column if i is not None]
            yield whole[self.rank :: self.world_size]

    def __len__(self) -> int:
        share = math.ceil(len(sized(self.sampler)) / self.old_world)
        return share // self.old_batch if self.drop_last else math.ceil(share / self.old_batch)


def reshard(loader: DataLoader, saved: Layout, world_size: int, rank: int) -> DataLoader:
    """``loader`` laid out as it was under ``saved`` (its number of ranks), sliced for this rank.

    Iterate it with the checkpoint's epoch RNG in place: the old ranks' order was one device's (the
    user's sampler; a shuffle draws its seed from that RNG).
    """
    bs = loader.batch_sampler
    assert type(bs) is BatchSampler
    batches = ReshardedBatches(bs.sampler, saved, world_size, rank)
    return DataLoader(loader.dataset, batch_sampler=batches, **rebuild_settings(loader))
