"""ModelCheckpoint's rules as Lightning's (issue 33): what it monitors without ``self.log``, a NaN score, where
``dirpath`` points, and its ``save_last`` annotation on a command line."""

from __future__ import annotations

import inspect
import math
import os
from pathlib import Path
from typing import Any

import pytest

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ModelCheckpoint
from trainer.exceptions import MisconfigurationException


def fit(tmp_path: Path, module: Any, callback: ModelCheckpoint, epochs: int = 3) -> None:
    data = loader(regression_data(32), batch_size=8)
    quiet(tmp_path, max_epochs=epochs, callbacks=[callback], enable_checkpointing=True).fit(module, data)


@pytest.mark.parametrize(("monitor", "best"), [("epoch", "epoch=2.ckpt"), ("step", "epoch=2.ckpt")])
def test_epoch_and_step_are_monitored_without_being_logged(tmp_path: Path, monitor: str, best: str) -> None:
    callback = ModelCheckpoint(tmp_path / "ckpt", filename="{epoch}", monitor=monitor, mode="max", save_top_k=2)
    fit(tmp_path, Regressor(), callback)
    assert Path(callback.best_model_path).name == best
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("epoch=*.ckpt")) == ["epoch=1.ckpt", "epoch=2.ckpt"]


@pytest.mark.parametrize(("mode", "worst"), [("min", math.inf), ("max", -math.inf)])
def test_a_nan_score_is_the_worst_value_and_still_saved_while_there_is_room(
    tmp_path: Path, mode: str, worst: float
) -> None:
    class LogsNaN(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("foo", float("nan"))
            return super().training_step(batch, batch_idx)

    callback = ModelCheckpoint(tmp_path / "ckpt", monitor="foo", mode=mode, save_top_k=1)
    fit(tmp_path, LogsNaN(), callback, epochs=1)
    assert callback.best_model_score == worst and callback.current_score == worst
    assert Path(callback.best_model_path).is_file()


def test_dirpath_expands_home_and_is_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert ModelCheckpoint(dirpath="~/checkpoints").dirpath == str(Path.home() / "checkpoints")
    assert ModelCheckpoint(dirpath="./~/c").dirpath == os.path.realpath(tmp_path / "~" / "c")
    assert ModelCheckpoint(dirpath="s3://bucket/c").dirpath == "s3://bucket/c"


def test_save_last_parses_from_a_command_line() -> None:
    jsonargparse = pytest.importorskip("jsonargparse")
    parser = jsonargparse.ArgumentParser()
    parser.add_argument("--a", type=inspect.signature(ModelCheckpoint).parameters["save_last"].annotation)
    assert [parser.parse_args(["--a", v]).a for v in ("yes", "false", "link")] == [True, False, "link"]


def test_a_bad_mode_is_lightnings_error() -> None:
    with pytest.raises(MisconfigurationException, match="`mode` can be 'min' or 'max', but got unknown"):
        ModelCheckpoint(mode="unknown")
