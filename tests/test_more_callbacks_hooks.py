"""Timer, LambdaCallback and BasePredictionWriter on tiny CPU runs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, quiet
from tests.test_more_callbacks import data
from trainer.callbacks import BasePredictionWriter, LambdaCallback, Timer
from trainer.callbacks import timer as timer_module


# ---- Timer --------------------------------------------------------------------------------------
class Clock:
    """Stands in for ``time.monotonic`` in the timer's module; a callback advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(timer_module, "time", fake)
    return fake


def ticking(clock: Clock, seconds: float = 10.0) -> LambdaCallback:
    """Each training batch takes ``seconds``."""
    return LambdaCallback(on_train_batch_start=lambda *args: setattr(clock, "now", clock.now + seconds))


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [("00:00:00:35", 35), ("01:02:03:04", 93784), (timedelta(minutes=2), 120), ({"hours": 1}, 3600), (None, None)],
)
def test_duration_forms(duration: Any, seconds: int | None) -> None:
    assert Timer(duration).time_remaining() == seconds


@pytest.mark.parametrize("bad", ["35", "00:00:35", "1:2:3:4"])
def test_a_malformed_duration_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="DD:HH:MM:SS"):
        Timer(bad)


@pytest.mark.parametrize(("interval", "steps"), [("step", 4), ("epoch", 6)])
def test_training_stops_when_the_budget_is_spent(tmp_path: Path, clock: Clock, interval: str, steps: int) -> None:
    """35 s at 10 s a batch, 3 batches an epoch: after the 4th batch, or at the end of the 2nd epoch."""
    timer = Timer(duration="00:00:00:35", interval=interval)
    fit = quiet(tmp_path, max_epochs=10, callbacks=[ticking(clock), timer])
    fit.fit(Regressor(), data(24))
    assert fit.global_step == steps
    assert timer.time_elapsed("train") == 10.0 * steps and timer.time_remaining() == 35.0 - 10.0 * steps


class WithTestStep(Regressor):
    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)


def test_each_stage_is_timed(tmp_path: Path, clock: Clock) -> None:
    slow_validation = LambdaCallback(on_validation_batch_end=lambda *args: setattr(clock, "now", clock.now + 1.0))
    timer = Timer()
    fit = quiet(tmp_path, max_epochs=1, callbacks=[ticking(clock), slow_validation, timer])
    fit.fit(Regressor(), data(24), data(16))
    assert timer.time_elapsed("train") == 32.0 and timer.time_elapsed("validate") == 2.0
    assert timer.start_time("train") == 1000.0 and timer.end_time("train") == 1032.0
    assert timer.start_time("test") is None and timer.time_elapsed("test") == 0.0
    fit.test(WithTestStep(), data(16))
    assert timer.time_elapsed("test") == 0.0 and timer.end_time("test") == clock.now
    with pytest.raises(ValueError, match="unknown stage 'training'"):
        timer.time_elapsed("training")


def test_a_resumed_run_continues_the_budget(tmp_path: Path, clock: Clock) -> None:
    every_epoch = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts")
    callbacks = [ticking(clock), Timer("00:00:00:45"), every_epoch]
    first = quiet(tmp_path, max_epochs=1, callbacks=callbacks, enable_checkpointing=True)
    first.fit(Regressor(), data(24))  # 30 s spent
    timer = Timer("00:00:00:45")
    second = quiet(tmp_path, max_epochs=10, callbacks=[ticking(clock), timer])
    second.fit(Regressor(), data(24), ckpt_path=tmp_path / "ckpts" / "last.ckpt")
    assert second.global_step == 5 and timer.time_elapsed() == 50.0  # 2 more batches, not 5


def test_rank_zeros_clock_decides(tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision goes through ``broadcast``: a rank whose own clock says stop follows rank zero's "go on"."""
    fit = quiet(tmp_path, max_epochs=2, callbacks=[ticking(clock), Timer("00:00:00:01")])
    decisions: list[Any] = []

    def rank_zero_says_go_on(obj: Any, src: int = 0) -> Any:
        if not isinstance(obj, bool):  # not the timer's
            return obj
        decisions.append(obj)
        return False

    monkeypatch.setattr(fit.strategy, "broadcast", rank_zero_says_go_on)
    fit.fit(Regressor(), data(24))
    assert fit.global_step == 6 and decisions.count(True) == 6


def test_a_spent_budget_stops_a_resumed_run_at_fit_start(tmp_path: Path) -> None:
    timer = Timer("00:00:00:10")
    timer.load_state_dict({"time_elapsed": {"train": 11.0}})
    seen: list[bool] = []
    after = LambdaCallback(on_fit_start=lambda t, m: seen.append(t.should_stop))
    quiet(tmp_path, max_epochs=1, callbacks=[timer, after]).fit(Regressor(), data())
    assert seen == [True] and timer.state_dict()["time_elapsed"]["train"] >= 11.0


# ---- LambdaCallback -----------------------------------------------------------------------------
def test_lambda_hooks_run_with_the_hooks_arguments(tmp_path: Path) -> None:
    calls: list[Any] = []
    callback = LambdaCallback(
        setup=lambda t, m, stage: calls.append(("setup", stage)),
        on_train_epoch_end=lambda t, m: calls.append(("epoch_end", t.current_epoch)),
        on_train_batch_end=lambda t, m, out, batch, idx: calls.append(("batch_end", idx, "loss" in out)),
        on_fit_end=None,  # ignored, as in Lightning
    )
    quiet(tmp_path, max_epochs=2, callbacks=[callback]).fit(Regressor(), data(16))
    assert calls == [
        ("setup", "fit"),
        ("batch_end", 0, True),
        ("batch_end", 1, True),
        ("epoch_end", 0),
        ("batch_end", 0, True),
        ("batch_end", 1, True),
        ("epoch_end", 1),
    ]


def test_an_unknown_hook_name_is_refused_with_the_valid_names() -> None:
    with pytest.raises(TypeError) as info:
        LambdaCallback(on_train_epoch_ends=print, on_epoch_end=print)
    message = str(info.value)
    assert "'on_epoch_end', 'on_train_epoch_ends', which are not hooks" in message
    assert "on_train_epoch_end" in message and "setup" in message and "state_dict" not in message
    with pytest.raises(TypeError, match=r"on_fit_start=...\) must be callable"):
        LambdaCallback(on_fit_start=3)  # type: ignore[arg-type]


# ---- BasePredictionWriter -----------------------------------------------------------------------
class Predictor(Regressor):
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return batch[0][:, :1] * 0 + batch_idx


class Writer(BasePredictionWriter):
    def __init__(self, write_interval: Any = "batch") -> None:
        super().__init__(write_interval)
        self.batches: list[tuple[Any, ...]] = []
        self.epochs: list[tuple[Any, Any]] = []

    def write_on_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        self.batches.append((list(batch_indices or []), batch_idx, dataloader_idx, prediction.shape[0]))

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Sequence[Any], batch_indices: Any) -> None:
        self.epochs.append((predictions, batch_indices))


def test_batch_writer_gets_each_batch_with_its_sample_indices(tmp_path: Path) -> None:
    writer = Writer("batch")
    quiet(tmp_path, callbacks=[writer]).predict(Predictor(), data(10, batch_size=4), return_predictions=False)
    assert writer.batches == [([0, 1, 2, 3], 0, 0, 4), ([4, 5, 6, 7], 1, 0, 4), ([8, 9], 2, 0, 2)]
    assert writer.epochs == []


def test_epoch_writer_gets_every_prediction_even_when_predict_keeps_none(tmp_path: Path) -> None:
    writer = Writer("epoch")
    quiet(tmp_path, callbacks=[writer]).predict(Predictor(), data(6, batch_size=4), return_predictions=False)
    ((predictions, indices),) = writer.epochs
    assert [float(p[0]) for p in predictions] == [0.0, 1.0]  # one loader: a flat list, as in Lightning
    assert indices == [[[0, 1, 2, 3], [4, 5]]]  # always a list per loader


def test_several_loaders_and_an_order_that_is_not_known(tmp_path: Path) -> None:
    writer = Writer("batch_and_epoch")
    torch.manual_seed(0)
    loaders = [data(4, batch_size=4), data(8, batch_size=4, shuffle=True)]
    quiet(tmp_path, callbacks=[writer]).predict(Predictor(), loaders)
    assert [b[:3] for b in writer.batches] == [([0, 1, 2, 3], 0, 0), ([], 0, 1), ([], 1, 1)]
    ((predictions, indices),) = writer.epochs
    assert [len(p) for p in predictions] == [1, 2] and indices == [[[0, 1, 2, 3]], []]


def test_writer_refuses_an_unknown_interval_and_says_what_to_define(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'batch', 'epoch', 'batch_and_epoch'"):
        BasePredictionWriter("step")  # type: ignore[arg-type]
    assert BasePredictionWriter("epoch").interval == "epoch"
    with pytest.raises(NotImplementedError, match="define write_on_batch_end"):
        quiet(tmp_path, callbacks=[BasePredictionWriter()]).predict(Predictor(), data(4))
