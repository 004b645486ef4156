"""Callbacks refuse and warn in Lightning's words (issue 33), which ported tests and scripts match, still naming the
value and what to do."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import (
    BasePredictionWriter,
    DeviceStatsMonitor,
    GradientAccumulationScheduler,
    LearningRateMonitor,
    Timer,
)
from trainer.exceptions import MisconfigurationException


def data() -> torch.utils.data.DataLoader:
    return loader(regression_data(8), batch_size=4)


def test_timer_options() -> None:
    with pytest.raises(MisconfigurationException, match=r"Timer\(duration='60 minutes'\).*format DD:HH:MM:SS"):
        Timer(duration="60 minutes")
    with pytest.raises(MisconfigurationException, match=r"Unsupported parameter value `Timer\(interval=often\)`"):
        Timer(interval="often")


def test_the_timer_says_it_stopped_in_lightnings_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.INFO):
        quiet(tmp_path, max_epochs=1000, callbacks=[Timer(duration={"seconds": 0})]).fit(Regressor(), data())
    assert "Time limit reached. Elapsed time is 0:00:00. Signaling Trainer to stop." in caplog.text
    assert "Time limit reached" in capsys.readouterr().out  # still shown without a logging set-up


@pytest.mark.parametrize(
    ("callback", "pattern"),
    [
        (LearningRateMonitor(), r"Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger"),
        (DeviceStatsMonitor(), r"Cannot use `DeviceStatsMonitor` callback with `Trainer\(logger=False\)`"),
    ],
)
def test_monitors_without_a_logger(tmp_path: Path, callback: trainer.Callback, pattern: str) -> None:
    with pytest.raises(MisconfigurationException, match=pattern):
        quiet(tmp_path, max_epochs=1, callbacks=[callback]).fit(Regressor(), data())


class Plain(Regressor):
    def configure_optimizers(self) -> Any:
        return torch.optim.Adagrad(self.parameters(), lr=0.1)  # no momentum, no betas


class NamedTwice(Regressor):
    def configure_optimizers(self) -> Any:
        first, second = self.net[0], self.net[-1]
        groups = [{"params": first.parameters(), "name": "x"}, {"params": second.parameters(), "name": "x"}]
        return torch.optim.SGD(groups, lr=0.1)


def test_lr_monitor_warnings_and_errors(tmp_path: Path) -> None:
    monitor = LearningRateMonitor(log_momentum=True)
    with pytest.warns(RuntimeWarning, match="some optimizers do not have momentum. This will log a value 0"):
        quiet(tmp_path, max_epochs=1, callbacks=[monitor], logger=True).fit(Plain(), data())
    with pytest.raises(MisconfigurationException, match=r"cannot have multiple parameter groups with identical `name`"):
        quiet(tmp_path, max_epochs=1, callbacks=[LearningRateMonitor()], logger=True).fit(NamedTwice(), data())


class Manual(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False


class OwnStep(Regressor):
    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)


def test_gradient_accumulation_scheduler_messages(tmp_path: Path) -> None:
    schedule = {0: 2}
    with pytest.raises(RuntimeError, match="Automatic gradient accumulation and the `GradientAccumulationScheduler`"):
        quiet(tmp_path, max_epochs=1, callbacks=[GradientAccumulationScheduler(schedule)]).fit(Manual(), data())
    with pytest.raises(MisconfigurationException, match="set `accumulate_grad_batches` and are using the `Gradient"):
        quiet(
            tmp_path, max_epochs=1, callbacks=[GradientAccumulationScheduler(schedule)], accumulate_grad_batches=2
        ).fit(Regressor(), data())
    with pytest.warns(UserWarning, match="the hooks will not be called on every batch"):
        quiet(tmp_path, max_epochs=1, callbacks=[GradientAccumulationScheduler(schedule)]).fit(OwnStep(), data())


def test_prediction_writer_interval() -> None:
    with pytest.raises(MisconfigurationException, match=r"`write_interval` should be one of \['batch'"):
        BasePredictionWriter(write_interval="sometimes")  # type: ignore[arg-type]
