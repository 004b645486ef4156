"""Sampler injection, eval sharding, set_epoch, exact mid-epoch resume and batch limits."""

from __future__ import annotations

import io
import math
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from trainer.data import (
    DistributedSamplerWrapper,
    EvalShardSampler,
    capture_epoch_rng,
    has_len,
    num_batches,
    prepare_eval_loader,
    prepare_train_loader,
    restore_epoch_rng,
    set_epoch,
    skip_batches,
)
from trainer.move import move_to_device


class CountingDataset(Dataset[torch.Tensor]):
    """Deterministic: item i is [i, 2i]; records which indices were fetched (in this process)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.fetched: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        self.fetched.append(i)
        return torch.tensor([i, 2 * i], dtype=torch.float32)


class AugmentedDataset(CountingDataset):
    """Random augmentation from torch's global RNG, as torchvision transforms do."""

    def __getitem__(self, i: int) -> torch.Tensor:
        return super().__getitem__(i) + torch.rand(2)


class Stream(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(5))


class Reversed(Sampler[int]):
    """A custom sampler that records set_epoch calls."""

    def __init__(self, n: int) -> None:
        self.n, self.epochs = n, []  # type: ignore[var-annotated]

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n - 1, -1, -1))

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def collate(items: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(items)


def init_worker(worker_id: int) -> None:
    pass


def indices(loader: DataLoader) -> list[int]:
    return [int(i) for batch in loader for i in batch[:, 0]]


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# ---- move_to_device -----------------------------------------------------------------------------
Pair = namedtuple("Pair", ["x", "y"])


@dataclass
class Batch:
    inputs: torch.Tensor
    meta: dict[str, Any]


class HasTo:
    def __init__(self) -> None:
        self.device: torch.device | None = None

    def to(self, device: torch.device) -> HasTo:
        self.device = device
        return self


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_move_to_device_nested(device: str) -> None:
    t = torch.ones(2)
    batch = {"a": (t, [t, "label", 3]), "b": Pair(t, Batch(t, {"m": t})), "c": HasTo()}
    out = move_to_device(batch, torch.device(device))
    assert isinstance(out["b"], Pair) and isinstance(out["b"].y, Batch)
    assert out["a"][1][1:] == ["label", 3]
    moved = [out["a"][0], out["a"][1][0], out["b"].x, out["b"].y.inputs, out["b"].y.meta["m"]]
    assert all(m.device.type == device for m in moved)
    assert out["c"].device == torch.device(device)


# ---- prepare_train_loader -----------------------------------------------------------------------
def test_train_loader_keeps_settings_and_detects_shuffle() -> None:
    gen = torch.Generator()
    kwargs: dict[str, Any] = dict(
        batch_size=3, drop_last=True, num_workers=2, collate_fn=collate, worker_init_fn=init_worker,
        generator=gen, persistent_workers=True, prefetch_factor=3, timeout=7.0,
    )  # fmt: skip
    for shuffle in (False, True):
        loader = DataLoader(CountingDataset(20), shuffle=shuffle, **kwargs)
        new = prepare_train_loader(loader, num_replicas=2, rank=1, seed=5)
        assert new is not loader and new.dataset is loader.dataset
        assert all(getattr(new, k) == v for k, v in kwargs.items())
        sampler = new.sampler
        if shuffle:  # the user's RandomSampler (its generator is the loader's), split as DistributedSampler splits
            assert isinstance(sampler, DistributedSamplerWrapper) and sampler.sampler is loader.sampler
            assert (sampler.num_replicas, sampler.rank) == (2, 1)
            continue
        assert isinstance(sampler, DistributedSampler)
        assert (sampler.shuffle, sampler.num_replicas, sampler.rank, sampler.seed) == (shuffle, 2, 1, 5)
        assert not sampler.drop_last


def test_one_replica_opt_out_and_iterable_are_unchanged() -> None:
    loader = DataLoader(CountingDataset(8), shuffle=True)
    assert prepare_train_loader(loader, 1, 0) is loader
    assert prepare_train_loader(loader, 2, 0, use_distributed_sampler=False) is loader
    assert prepare_eval_loader(loader, 1, 0) is loader
    stream = DataLoader(Stream(), batch_size=2)
    assert prepare_train_loader(stream, 2, 1) is stream
    assert prepare_eval_loader(stream, 2, 1) is stream


class TaggedLoader(DataLoader[torch.Tensor]):
    """A DataLoader subclass with its own attribute and ``__iter__`` (counts its passes)."""

    def __init__(self, tag: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tag, self.passes = tag, [0]

    def __iter__(self) -> Iterator[torch.Tensor]:
        self.passes[0] += 1
        return super().__iter__()


def test_a_rebuilt_loader_stays_the_users_subclass(tmp_path: Any) -> None:
    """Sharding or per-sample seeding rebuilds the loader over a new sampler; its subclass and attributes stay."""
    from tests.models import Regressor, quiet
    from trainer.data.sample_seeds import seed_samples

    loader = TaggedLoader("mine", CountingDataset(20), batch_size=4, shuffle=True)
    for new in (prepare_train_loader(loader, 2, 1), prepare_eval_loader(loader, 2, 1), seed_samples(loader, 0, True)):
        assert type(new) is TaggedLoader and new is not loader and new.tag == "mine"
        assert new.sampler is not loader.sampler and new.batch_size == 4
        assert len(list(new)) == len(new)
    pairs = [(torch.randn(8), torch.randn(1)) for _ in range(16)]  # a list, not a TensorDataset: it gets seeded
    train = TaggedLoader("train", pairs, batch_size=8, num_workers=1)  # type: ignore[arg-type]
    fit = quiet(tmp_path, max_epochs=2)
    fit.fit(Regressor(), train)
    assert type(fit.train_dataloader) is TaggedLoader and fit.train_dataloader is not train
    assert train.passes == [2]  # its __iter__ ran each epoch (the copy shares the user's attributes)


@pytest.mark.parametrize(("n", "shuffle"), [(20, False), (20, True), (21, True)])
def test_rank_shares_are_disjoint_and_complete(n: int, shuffle: bool) -> None:
    loader = DataLoader(CountingDataset(n), batch_size=4, shuffle=shuffle)
    shares = []
    for r in (0, 1):  # ranks seeded alike draw the same shuffle seed
        torch.manual_seed(0)
        shares.append(indices(prepare_train_loader(loader, 2, r)))
    assert len(shares[0]) == len(shares[1]) == math.ceil(n / 2)
    if n % 2 == 0:
        assert not set(shares[0]) & set(shares[1])
    assert set(shares[0]) | set(shares[1]) == set(range(n))


def test_each_epoch_reshuffles_and_ranks_agree_on_rank_zeros_draw() -> None:
    """The ranks' streams differ here (iterated one after the other): ``agree`` gives both rank 0's seed."""
    loader = DataLoader(CountingDataset(40), batch_size=5, shuffle=True)
    drawn: dict[int, int] = {}
    epoch = 0
    ranks = [prepare_train_loader(loader, 2, r, seed=3, agree=lambda v: drawn.setdefault(epoch, v)) for r in (0, 1)]
    orders = []
    for epoch in (0, 1):
        for rank_loader in ranks:
            set_epoch(rank_loader, epoch)
        shares = [indices(rank_loader) for rank_loader in ranks]
        assert sorted(shares[0] + shares[1]) == list(range(40))  # same permutation on both ranks
        orders.append(shares[0])
    assert orders[0] != orders[1]


def test_custom_sampler_is_wrapped_padded_and_gets_set_epoch() -> None:
    sampler = Reversed(7)
    loader = DataLoader(CountingDataset(7), batch_size=2, sampler=sampler)
    ranks = [prepare_train_loader(loader, 2, r) for r in (0, 1)]
    assert all(isinstance(r.sampler, DistributedSamplerWrapper) for r in ranks)
    shares = [indices(r) for r in ranks]
    assert shares == [[6, 4, 2, 0], [5, 3, 1, 6]]  # strided, last rank padded from the start
    set_epoch(ranks[0], 4)
    assert sampler.epochs == [4]


def test_custom_batch_sampler_is_refused() -> None:
    batches = BatchSampler(SequentialSampler(range(10)), 2, False)
    loader = DataLoader(CountingDataset(10), batch_sampler=list(batches))
    with pytest.raises(ValueError, match="use_distributed_sampler=False and shard it yourself"):
        prepare_train_loader(loader, 2, 0)


def test_explicit_default_batch_sampler_is_sharded() -> None:
    loader = DataLoader(CountingDataset(10), batch_sampler=BatchSampler(SequentialSampler(range(10)), 3, True))
    new = prepare_train_loader(loader, 2, 0)
    assert (new.batch_size, new.drop_last, len(new)) == (3, True, 1)


@pytest.mark.parametrize(
    ("n", "batch_size", "drop_last", "message"),
    [
        (1, 4, False, "dataset of 1 samples across 2 ranks with batch_size 4 leaves rank 1 with nothing"),
        (6, 4, True, r"6 samples across 2 ranks with batch_size 4 \(drop_last=True\) leaves rank 0"),
    ],
)
def test_too_small_dataset_is_refused(n: int, batch_size: int, drop_last: bool, message: str) -> None:
    loader = DataLoader(CountingDataset(n), batch_size=batch_size, drop_last=drop_last)
    with pytest.raises(ValueError, match=message):
        prepare_train_loader(loader, 2, 0)


# ---- prepare_eval_loader ------------------------------------------------------------------------
@pytest.mark.parametrize("shuffle", [False, True])
def test_eval_shard_sees_every_sample_once(shuffle: bool) -> None:
    loader = DataLoader(CountingDataset(101), batch_size=8, shuffle=shuffle)
    ranks = [prepare_eval_loader(loader, 2, r) for r in (0, 1)]
    assert all(isinstance(r.sampler, EvalShardSampler) for r in ranks)
    shares = [indices(r) for r in ranks]
    assert [len(s) for s in shares] == [51, 50] == [len(r.sampler) for r in ranks]  # type: ignore[arg-type]
    assert sorted(shares[0] + shares[1]) == list(range(101))


def test_eval_custom_batch_sampler_strides_whole_batches() -> None:
    batches = [[0, 1], [2, 3], [4]]
    loader = DataLoader(CountingDataset(5), batch_sampler=batches)
    assert [indices(prepare_eval_loader(loader, 2, r)) for r in (0, 1)] == [[0, 1, 4], [2, 3]]


# ---- set_epoch ----------------------------------------------------------------------------------
def test_set_epoch_reaches_each_object_once() -> None:
    sampler = Reversed(6)
    batch_sampler = BatchSampler(sampler, 2, False)
    batch_sampler.set_epoch = sampler.set_epoch  # type: ignore[attr-defined]  # same calls recorded
    set_epoch(DataLoader(CountingDataset(6), sampler=sampler, batch_size=2), 2)
    assert sampler.epochs == [2]
    set_epoch(DataLoader(CountingDataset(6), batch_sampler=batch_sampler), 3)
    assert sampler.epochs == [2, 3, 3]  # batch sampler + its sampler; the default SequentialSampler has none


# ---- exact resume -------------------------------------------------------------------------------
def test_epoch_rng_round_trips_through_weights_only_load() -> None:
    sampler_gen, loader_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    data = CountingDataset(12)
    loader = DataLoader(data, batch_size=4, sampler=RandomSampler(data, generator=sampler_gen), generator=loader_gen)
    buffer = io.BytesIO()
    torch.save(capture_epoch_rng(loader), buffer)
    first = indices(loader)
    buffer.seek(0)
    restore_epoch_rng(loader, torch.load(buffer, weights_only=True))
    assert indices(loader) == first
    with pytest.raises(ValueError, match="loader_generator"):
        restore_epoch_rng(
            DataLoader(data, sampler=RandomSampler(data, generator=sampler_gen)), capture_epoch_rng(loader)
        )


def test_skip_batches_never_loads_skipped_samples() -> None:
    data = CountingDataset(30)
    loader = DataLoader(data, batch_size=4, shuffle=True)
    skipped = skip_batches(loader, 3)
    assert len(skipped) == len(loader) - 3 == 5
    remaining = indices(skipped)
    assert sorted(data.fetched) == sorted(remaining) and len(remaining) == 30 - 12


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("distributed", [False, True])
def test_skip_batches_resumes_bitwise(num_workers: int, distributed: bool) -> None:
    loader = DataLoader(CountingDataset(40), batch_size=3, shuffle=True, num_workers=num_workers)
    if distributed:
        loader = prepare_train_loader(loader, 2, 1, seed=7)
    torch.manual_seed(0)
    set_epoch(loader, 2)
    start = capture_epoch_rng(loader)
    full = list(loader)
    end = torch.get_rng_state()
    torch.manual_seed(123)  # a resumed process starts from unrelated RNG
    restore_epoch_rng(loader, start)
    set_epoch(loader, 2)
    assert_same(list(skip_batches(loader, 4)), full[4:])
    assert torch.equal(torch.get_rng_state(), end)  # same global RNG draws as the full epoch


@pytest.mark.parametrize("k", [0, 2])
def test_skip_loader_iter_makes_all_epoch_order_draws(k: int) -> None:
    """The sampler's seed must be drawn inside iter(), before the trainer restores the checkpoint RNG."""
    loader = DataLoader(CountingDataset(12), batch_size=3, shuffle=True)
    torch.manual_seed(0)
    next(iter(loader))  # base_seed at iter(), RandomSampler's seed at the first next()
    after_first_batch = torch.get_rng_state()
    torch.manual_seed(0)
    iter(skip_batches(loader, k))
    assert torch.equal(torch.get_rng_state(), after_first_batch)


@pytest.mark.parametrize("batch_size", [4, None])
def test_skip_batches_resumes_random_augmentation_bitwise(batch_size: int | None) -> None:
    loader = DataLoader(AugmentedDataset(30), batch_size=batch_size, shuffle=True)
    torch.manual_seed(0)
    start, k = capture_epoch_rng(loader), 3
    full, checkpoint = [], torch.empty(0)
    for i, batch in enumerate(loader):
        full.append(batch)
        if i == k - 1:
            checkpoint = torch.get_rng_state()
    torch.manual_seed(123)
    restore_epoch_rng(loader, start)
    set_epoch(loader, 0)
    it = iter(skip_batches(loader, k))
    torch.set_rng_state(checkpoint)
    assert_same(list(it), full[k:])


def test_skip_loader_forwards_set_epoch() -> None:
    loader = prepare_train_loader(DataLoader(CountingDataset(10), batch_size=2), 2, 0)
    set_epoch(skip_batches(loader, 1), 5)
    assert loader.sampler.epoch == 5  # type: ignore[attr-defined]


def test_skip_batches_refuses_iterable_and_negative() -> None:
    with pytest.raises(ValueError, match="IterableDataset"):
        skip_batches(DataLoader(Stream()), 1)
    with pytest.raises(ValueError, match="-1"):
        skip_batches(DataLoader(CountingDataset(4)), -1)


# ---- limits -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("limit", "expected"), [(None, 10), (3, 3), (50, 10), (0, 0), (0.25, 2), (1.0, 10), (0.0, 0)])
def test_num_batches_with_len(limit: int | float | None, expected: int) -> None:
    loader = DataLoader(CountingDataset(20), batch_size=2)
    assert has_len(loader)
    assert num_batches(loader, limit) == expected


def test_num_batches_without_len() -> None:
    loader = DataLoader(Stream())
    assert not has_len(loader)
    assert num_batches(loader, None) == num_batches(loader, 1.0) == math.inf
    assert num_batches(loader, 4) == 4
    with pytest.raises(ValueError, match=r"0\.5"):
        num_batches(loader, 0.5)


@pytest.mark.parametrize("limit", [-1, -0.5, 1.5])
def test_num_batches_rejects_bad_limits(limit: int | float) -> None:
    with pytest.raises(ValueError, match=str(limit)):
        num_batches(DataLoader(CountingDataset(4)), limit)
