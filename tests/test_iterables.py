"""Any iterable of batches is a loader: a list, a class with ``__iter__``, with or without ``__len__``."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.helpers import REPO_ROOT, run_python
from tests.models import Regressor, assert_bitwise_equal, every_step_checkpoints, loader, params, quiet, regression_data
from trainer.data import (
    capture_epoch_rng,
    num_batches,
    prepare_eval_loader,
    prepare_train_loader,
    restore_epoch_rng,
    set_epoch,
    skip_batches,
)

Batch = list[torch.Tensor]
DDP_SCRIPT = REPO_ROOT / "tests" / "scripts" / "iterables_ddp.py"


def batches(n: int = 48, batch_size: int = 8, seed: int = 0) -> list[Batch]:
    """The batches an unshuffled DataLoader over ``regression_data(n)`` yields, as a plain list."""
    return list(loader(regression_data(n, seed=seed), batch_size=batch_size))


class Stream:
    """Yields the batches anew on each ``iter()``; no ``__len__``; records ``set_epoch``."""

    def __init__(self, items: list[Batch]) -> None:
        self.items = items
        self.epochs: list[int] = []

    def __iter__(self) -> Iterator[Batch]:
        yield from self.items

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class Shuffled:
    """Reorders its batches and adds noise from the global RNG, lazily, inside a generator."""

    def __init__(self, items: list[Batch]) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Batch]:
        for i in torch.randperm(len(self.items)).tolist():
            x, y = self.items[i]
            yield [x + 0.01 * torch.randn_like(x), y]


class Recorder(Regressor):
    """Records (epoch, batch_idx) of every training step."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[int, int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, batch_idx))
        return super().training_step(batch, batch_idx)


class Evaluated(Regressor):
    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])


def fit_params(tmp_path: Path, train: Any, val: Any = None, **flags: Any) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = Regressor()
    fit = quiet(tmp_path, max_epochs=2, **flags)
    fit.fit(module, train, val)
    return params(module), fit


# ---- one rank: any iterable trains and evaluates -------------------------------------------------
def test_list_of_batches_trains_like_an_unshuffled_dataloader(tmp_path: Path) -> None:
    data, val = regression_data(48), regression_data(16, seed=1)
    expected, by_loader = fit_params(tmp_path, loader(data), loader(val))
    got, by_list = fit_params(tmp_path, batches(48), [batches(16, seed=1)])
    assert_bitwise_equal(got, expected)
    assert by_list.num_training_batches == 6
    assert torch.equal(by_list.callback_metrics["val_loss"], by_loader.callback_metrics["val_loss"])


def test_iterable_without_len_runs_to_exhaustion_each_epoch(tmp_path: Path) -> None:
    module, fit = Recorder(), quiet(tmp_path, max_epochs=3)
    fit.fit(module, Stream(batches(40)))
    assert math.isinf(fit.num_training_batches)
    assert module.seen == [(epoch, i) for epoch in range(3) for i in range(5)]
    assert fit.global_step == 15


def test_limit_train_batches_stops_an_iterable_without_len(tmp_path: Path) -> None:
    module, fit = Recorder(), quiet(tmp_path, max_epochs=3, limit_train_batches=2)
    fit.fit(module, Stream(batches(40)))
    assert fit.num_training_batches == 2
    assert module.seen == [(epoch, i) for epoch in range(3) for i in range(2)]


def test_set_epoch_of_a_custom_iterable_is_called_each_epoch(tmp_path: Path) -> None:
    stream = Stream(batches(16))
    quiet(tmp_path, max_epochs=3).fit(Regressor(), stream)
    assert stream.epochs == [0, 1, 2]


def test_validate_test_predict_on_lists_of_batches(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module, fit = Evaluated(), quiet(tmp_path)
    data = regression_data(20)
    as_list = batches(20, batch_size=6)  # a last, smaller batch too
    assert fit.validate(module, [as_list]) == fit.validate(module, loader(data, batch_size=6))
    assert fit.test(module, Stream(as_list)) == fit.test(module, loader(data, batch_size=6))
    with torch.no_grad():
        expected = [module.net(x) for x, _ in as_list]
    assert_bitwise_equal(fit.predict(module, [as_list]), expected)  # a list of loaders: one, a list
    assert_bitwise_equal(fit.predict(module, Stream(as_list)), expected)


class TwoLoaders(Evaluated):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        super().validation_step(batch, batch_idx)


def test_a_list_of_loaders_still_means_several_loaders(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module, fit = TwoLoaders(), quiet(tmp_path)
    whole = fit.validate(module, loader(regression_data(32), batch_size=8))[0]["val_loss"]
    first, second = batches(32)[:2], batches(32)[2:]
    per_loader = fit.validate(module, [first, second])  # two loaders of plain batches, each its own metric
    both = (per_loader[0]["val_loss/dataloader_idx_0"] * 16 + per_loader[1]["val_loss/dataloader_idx_1"] * 16) / 32
    assert both == pytest.approx(whole, rel=1e-6)


# ---- exact resume -------------------------------------------------------------------------------
def resume_run(tmp_path: Path, make: Any, ckpt: Path | None = None) -> tuple[list[torch.Tensor], trainer.Trainer]:
    torch.manual_seed(0)
    module = Regressor(dropout=0.2, lr=0.01, adam=True)  # dropout: the global RNG matters
    every_step = every_step_checkpoints(tmp_path / "ckpts")
    fit = quiet(tmp_path, max_epochs=3, enable_checkpointing=True, callbacks=[every_step])
    fit.fit(module, make(), [batches(16, seed=1)], ckpt_path=ckpt)
    return params(module), fit


@pytest.mark.parametrize("kind", ["list", "shuffled-augmented"])
def test_mid_epoch_resume_of_an_iterable_is_bitwise_equal(tmp_path: Path, kind: str) -> None:
    items = batches(56)  # 7 batches per epoch
    make = (lambda: list(items)) if kind == "list" else (lambda: Shuffled(items))
    final, full = resume_run(tmp_path / "full", make)
    assert full.global_step == 21
    for step in (3, 9, 7):  # mid first epoch, mid second epoch, an epoch boundary
        ckpt = tmp_path / "full" / "ckpts" / f"step{step}.ckpt"
        resumed, fit = resume_run(tmp_path / f"resume{step}", make, ckpt)
        assert fit.global_step == 21
        assert_bitwise_equal(resumed, final)


def test_skip_batches_of_an_iterable_reads_the_skipped_ones_inside_iter() -> None:
    produced: list[int] = []

    class Counting:
        def __iter__(self) -> Iterator[int]:
            for i in range(6):
                produced.append(i)
                yield i

    it = iter(skip_batches(Counting(), 2))
    assert produced == [0, 1]  # before the first next(): the trainer restores the RNG in between
    assert list(it) == [2, 3, 4, 5]
    assert list(skip_batches([0, 1, 2], 5)) == []


def test_epoch_rng_of_an_iterable_is_the_global_rng_only() -> None:
    state = capture_epoch_rng([torch.ones(1)])
    assert set(state) == {"global"}
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    state = capture_epoch_rng(Stream([]))
    torch.rand(5)
    restore_epoch_rng(Stream([]), state)
    assert torch.equal(torch.rand(3), expected)
    from_loader = capture_epoch_rng(loader(regression_data(8), shuffle=True, generator=torch.Generator()))
    with pytest.raises(ValueError, match="loader_generator"):
        restore_epoch_rng([torch.ones(1)], from_loader)


def test_set_epoch_and_num_batches_of_plain_iterables() -> None:
    stream = Stream([])
    set_epoch(stream, 4)
    set_epoch(skip_batches(stream, 1), 5)
    set_epoch([1, 2], 6)  # no set_epoch: nothing to call
    assert stream.epochs == [4, 5]
    assert num_batches([1, 2, 3]) == 3 and num_batches([1, 2, 3], 2) == 2
    assert math.isinf(num_batches(stream)) and num_batches(stream, 2) == 2
    with pytest.raises(ValueError, match=r"0\.5"):
        num_batches(stream, 0.5)


# ---- several ranks ------------------------------------------------------------------------------
@pytest.mark.parametrize("prepare", [prepare_train_loader, prepare_eval_loader])
def test_several_ranks_refuse_an_iterable_unless_sharded_by_the_user(prepare: Any) -> None:
    items = batches(16)
    pattern = (
        r"loader \(list\) is not a DataLoader, so the Trainer cannot shard it across 2 ranks; "
        r"pass a DataLoader.*use_distributed_sampler=False"
    )
    with pytest.raises(ValueError, match=pattern):
        prepare(items, 2, 1)
    assert prepare(items, 2, 1, use_distributed_sampler=False) is items
    assert prepare(items, 1, 0) is items
    dl = loader(regression_data(16))
    assert prepare(dl, 2, 1) is not dl  # a DataLoader is still sharded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "what"),
    [
        ("train", r"training loader \(Stream\)"),
        ("val", r"validation loader \(list\)"),
        ("predict", r"predict loader \(list\)"),
    ],
)
def test_two_real_ranks_refuse_an_unsharded_iterable_before_any_work(tmp_path: Path, mode: str, what: str) -> None:
    done = run_python([str(DDP_SCRIPT), str(tmp_path), mode], timeout=120)
    assert done.returncode != 0, done.output
    assert re.search(rf"MisconfigurationException: the {what} is not a DataLoader.*across 2 ranks", done.output), (
        done.output
    )
    assert "finished" not in done.output


@pytest.mark.slow
def test_two_real_ranks_opted_out_each_predict_the_iterable_they_were_given(tmp_path: Path) -> None:
    done = run_python([str(DDP_SCRIPT), str(tmp_path), "opted-out"], timeout=120)
    assert done.returncode == 0, done.output
    for rank in (0, 1):
        predicted = torch.load(tmp_path / f"predicted-rank{rank}.pt", weights_only=True)
        assert len(predicted) == 2  # this rank's share is what it was given: both batches, not half


# ---- clear errors -------------------------------------------------------------------------------
x, y = regression_data(16).tensors
SEVERAL = r"which is a batch, but a list means several loaders\. Pass \[batches\]"


@pytest.mark.parametrize(
    ("val", "pattern"),
    [
        ([x, y], rf"validation loaders \(list\) hold a Tensor at index 0, {SEVERAL}"),
        ([(x, y), (x, y)], rf"hold a tuple at index 0, {SEVERAL}"),
        (({"x": x},), rf"validation loaders \(tuple\) hold a dict at index 0, {SEVERAL}"),
        (x, r"validation loader \(Tensor\) is one batch .*pass \[batch\]"),
    ],
)
def test_batches_passed_as_loaders_are_refused(tmp_path: Path, val: Any, pattern: str) -> None:
    module = Recorder()
    with pytest.raises(TypeError, match=pattern):
        quiet(tmp_path).fit(module, batches(16), val)
    assert module.seen == []


@pytest.mark.parametrize(
    ("train", "pattern"),
    [
        (
            regression_data(16),
            r"training loader \(TensorDataset\) is a Dataset, which yields samples.*DataLoader\(dataset, batch_size=",
        ),
        (3, r"training loader \(int\) is not an iterable of batches; pass a DataLoader"),
        ("data.csv", r"training loader \(str\) is not an iterable of batches"),
        ({"x": x}, r"training loader \(dict\) is one batch"),
    ],
)
def test_what_is_not_an_iterable_of_batches_is_named(tmp_path: Path, train: Any, pattern: str) -> None:
    module = Recorder()
    with pytest.raises(TypeError, match=pattern):
        quiet(tmp_path).fit(module, train)
    assert module.seen == []


def test_evaluation_names_a_bad_loader_and_an_empty_list(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=rf"test loaders \(list\) hold a Tensor at index 0, {SEVERAL}"):
        quiet(tmp_path).test(Evaluated(), [x, y])
    with pytest.raises(TypeError, match=r"validation loader \(TensorDataset\) is a Dataset"):
        quiet(tmp_path).validate(Evaluated(), regression_data(8))
    with pytest.raises(ValueError, match=r"the training loader \(list\) is empty \(0 batches\)"):
        quiet(tmp_path).fit(Regressor(), [])
