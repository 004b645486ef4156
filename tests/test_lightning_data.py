"""Lightning's data rules, as a port meets them (trainer/connectors/test_data_connector.py, loops/test_fetchers.py,
trainer/test_dataloaders.py, trainer/flags/test_limit_batches.py and test_overfit_batches.py): what a combined loader
counts as one loader, how a bad loader is named, what an unsized loader allows."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.exceptions import MisconfigurationException
from trainer.utilities import CombinedLoader


# ---- CombinedLoader: what is one loader -------------------------------------------------------------------
def test_a_list_of_numbers_is_one_iterable_and_an_empty_list_one_empty_one() -> None:
    assert len(CombinedLoader([1, 2, 3]).flattened) == 1
    assert [batch for batch, _, _ in CombinedLoader([1, 2, 3])] == [1, 2, 3]
    combined = CombinedLoader([[], [1, 2, 3]], "min_size")
    iter(combined)
    assert combined.flattened == [[], [1, 2, 3]] and len(combined) == 0
    assert [b for b, _, _ in CombinedLoader({"a": [1, 2], "b": [3, 4]}, "min_size")] == [
        {"a": 1, "b": 3},
        {"a": 2, "b": 4},
    ]


# ---- a bad loader is named, with where it came from ---------------------------------------------------------
class NoHooks(Regressor):
    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("method", "argument"),
    [("fit", "train_dataloaders"), ("validate", "dataloaders"), ("test", "dataloaders")],
)
def test_no_loader_anywhere_names_both_ways_to_give_one(tmp_path: Path, method: str, argument: str) -> None:
    with pytest.raises(TypeError, match=rf"invalid dataloader was passed to `Trainer.{method}\({argument}=...\)`"):
        getattr(quiet(tmp_path), method)(NoHooks())
    with pytest.raises(ValueError, match=r"Either pass the dataloader to the `.\w+\(\)` method OR implement"):
        getattr(quiet(tmp_path), method)(NoHooks())  # still a ValueError, as before


@pytest.mark.parametrize("bad", [object(), [loader(regression_data(8)), 3]])
def test_a_bad_loader_passed_or_returned_says_which(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(TypeError, match=r"invalid dataloader was passed to `Trainer.fit\(train_dataloaders=...\)`"):
        quiet(tmp_path).fit(NoHooks(), bad)

    class Returns(NoHooks):
        def train_dataloader(self) -> Any:
            return bad

    with pytest.raises(TypeError, match=r"invalid dataloader was returned from `Returns.train_dataloader\(\)`"):
        quiet(tmp_path).fit(Returns())


def test_a_hook_returning_none_is_named(tmp_path: Path) -> None:
    class Returns(NoHooks):
        def test_dataloader(self) -> Any:
            return None

    with pytest.raises(TypeError, match=r"returned from `Returns.test_dataloader\(\)`. Found None"):
        quiet(tmp_path).test(Returns())


def test_a_list_of_batches_still_trains(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]
    run = quiet(tmp_path, max_epochs=1)
    run.fit(Regressor(), batches)
    assert run.global_step == 3


# ---- limits on loaders with no length, and lengths that may be wrong ----------------------------------------------
class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Rows of the regression data, as a stream."""

    def __init__(self, n: int = 32) -> None:
        self.data = regression_data(n)

    def __iter__(self) -> Any:
        return iter(self.data)


class SizedStream(Stream):
    def __len__(self) -> int:
        return len(self.data)


@pytest.mark.parametrize(("stage", "flag"), [("fit", "limit_train_batches"), ("validate", "limit_val_batches")])
def test_a_fraction_of_a_stream_is_refused_with_lightnings_words(tmp_path: Path, stage: str, flag: str) -> None:
    stream = DataLoader(Stream(), batch_size=8)
    with pytest.raises(ValueError, match=rf"When using an `IterableDataset`, `Trainer\({flag}\)` must be `1.0` or an"):
        getattr(quiet(tmp_path, **{flag: 0.5}), stage)(Regressor(), stream)


def test_a_fraction_that_leaves_no_batch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"You requested to check 0.1 of the `val_dataloader` but 0.1 \* 2 < 1"):
        quiet(tmp_path, limit_val_batches=0.1).validate(Regressor(), loader(regression_data(16)))


def test_a_stream_with_a_length_warns_that_workers_may_make_it_wrong(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="Your `IterableDataset` has `__len__` defined"):
        quiet(tmp_path).validate(Regressor(), DataLoader(SizedStream(), batch_size=8))
    with pytest.warns(UserWarning, match="Your `IterableDataset` has `__len__` defined"):
        quiet(tmp_path, max_epochs=1).fit(Regressor(), DataLoader(SizedStream(), batch_size=8))


# ---- overfit_batches: every loader of fit in its dataset's order -------------------------------------------------
class Reversed(torch.utils.data.Sampler[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        return iter(range(self.n - 1, -1, -1))

    def __len__(self) -> int:
        return self.n


def test_overfit_puts_training_and_validation_loaders_in_order_whatever_their_sampler(tmp_path: Path) -> None:
    data = regression_data(16)
    custom = DataLoader(data, batch_size=4, sampler=Reversed(16))
    run = quiet(tmp_path, max_epochs=1, overfit_batches=2)
    with pytest.warns(UserWarning, match="requested to overfit but enabled train dataloader shuffling") as seen:
        run.fit(Regressor(), custom, DataLoader(data, batch_size=4, sampler=Reversed(16)))
    assert any("enabled val dataloader shuffling" in str(w.message) for w in seen)
    assert isinstance(run.train_dataloader.sampler, torch.utils.data.SequentialSampler)
    assert isinstance(run.val_dataloaders.sampler, torch.utils.data.SequentialSampler)


@pytest.mark.parametrize("every", [-1, "2", 1.5])
def test_reload_every_n_epochs_must_be_a_count(every: Any) -> None:
    with pytest.raises(ValueError, match=r"`reload_dataloaders_every_n_epochs` should be an int >= 0, got"):
        trainer.Trainer(reload_dataloaders_every_n_epochs=every)


# ---- epochs whose length is known only at their end --------------------------------------------------------------
class Counted(Regressor):
    """Counts validation batches per epoch; its learning rate halves every epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.validated: list[int] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.validated.append(self.current_epoch)
        super().validation_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)}


class SaveAfterValidation(trainer.Callback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


def test_an_unsized_epoch_validates_at_its_end_and_resumes_exactly_from_there(tmp_path: Path) -> None:
    stream, val = DataLoader(Stream(32), batch_size=8), loader(regression_data(16))
    full = Counted()
    quiet(tmp_path, max_epochs=3, callbacks=[SaveAfterValidation(tmp_path / "val.ckpt")]).fit(full, stream, val)
    assert full.validated == [0, 0, 1, 1, 2, 2]  # 2 validation batches after each epoch's 4 training batches

    resumed = Counted()
    run = quiet(tmp_path, max_epochs=3)
    run.fit(resumed, stream, val, ckpt_path=tmp_path / "val.ckpt")  # saved inside epoch 0's last validation
    assert resumed.validated == [1, 1, 2, 2]
    assert run.optimizers[0].param_groups[0]["lr"] == 0.05 * 0.5**3
    for a, b in zip(full.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


class Fading(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Rows in the first epoch only (a stream that ran dry)."""

    def __init__(self, module: trainer.Module) -> None:
        self.module, self.data = module, regression_data(16)

    def __iter__(self) -> Any:
        return iter(self.data if self.module.current_epoch == 0 else [])


def test_an_epoch_without_batches_ends_as_in_lightning(tmp_path: Path) -> None:
    module = Regressor()
    run = quiet(tmp_path, max_epochs=3)
    with pytest.warns(UserWarning, match="yielded no batch in epoch 1: the epoch ends without training"):
        run.fit(module, DataLoader(Fading(module), batch_size=8))
    assert (run.current_epoch, run.global_step) == (3, 2)


def test_a_generator_used_up_after_one_epoch_is_still_refused(tmp_path: Path) -> None:
    batches = ((x[None], y[None]) for x, y in regression_data(4))
    with pytest.raises(ValueError, match=r"yielded no batch in epoch 1\. A generator or iterator is used up"):
        quiet(tmp_path, max_epochs=2).fit(Regressor(), batches)


# ---- steps that pull their own batches ------------------------------------------------------------------------------
class PullsItsBatches(Regressor):
    def training_step(self, dataloader_iter: Any) -> Any:  # type: ignore[override]
        batch, _, _ = next(dataloader_iter)
        return super().training_step(batch, 0)

    def predict_step(self, dataloader_iter: Any) -> Any:  # type: ignore[override]
        return next(dataloader_iter)


def test_a_step_taking_dataloader_iter_is_refused_by_name_when_called(tmp_path: Path) -> None:
    module, data = PullsItsBatches(), loader(regression_data(16))
    with pytest.raises(MisconfigurationException, match=r"`training_step\(self, dataloader_iter\)` is not"):
        quiet(tmp_path, max_epochs=1).fit(module, data)
    with pytest.raises(MisconfigurationException, match=r"Write `predict_step\(self, batch, batch_idx\)`"):
        quiet(tmp_path).predict(module, data)
    quiet(tmp_path, max_epochs=1, limit_train_batches=0).fit(module, data)  # never called: nothing to refuse
    assert "training_step" not in vars(module)  # the module keeps its own step after the stage


class Predicting(Regressor):
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return self.net(batch[0])


def test_the_profiler_times_each_batch_fetch_under_lightnings_names(tmp_path: Path) -> None:
    run = quiet(tmp_path, profiler="simple", limit_val_batches=3, limit_predict_batches=3)
    module, data = Predicting(), loader(regression_data(16), batch_size=4)
    run.validate(module, data)
    run.predict(module, data)
    durations = run.profiler.recorded_durations  # type: ignore[union-attr]
    assert len(durations["[_EvaluationLoop].val_next"]) == 3
    assert len(durations["[_PredictionLoop].predict_next"]) == 3  # the prediction loop has its own name in Lightning


def test_workers_started_by_spawn_without_persistent_workers_get_lightnings_advice(tmp_path: Path) -> None:
    """Each epoch's iter() starts spawned workers afresh (a fresh interpreter each): Lightning advises persistence."""
    data = regression_data(16)
    spawned = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context="spawn")
    with pytest.warns(UserWarning, match="Consider setting `persistent_workers=True` in 'train_dataloader'"):
        quiet(tmp_path, limit_train_batches=0).fit(Regressor(), spawned)  # asked for and checked, never iterated
    kept = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context="spawn", persistent_workers=True)
    forked = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context="fork")
    for fine in (kept, forked):
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="Consider setting `persistent_workers=True`")
            quiet(tmp_path, limit_train_batches=0).fit(Regressor(), fine)
