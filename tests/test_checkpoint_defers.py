"""ModelCheckpoint saving on steps while monitoring a validation metric (Lightning's rules, issue 33): a step's save
waits for the validation that logs the value (or a fresh one), and a value not logged before any validation is a
warning, not an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ModelCheckpoint


class Scores(Regressor):
    """Logs ``score`` = the epoch's entry of ``scores`` at each validation's end."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        self.scores = scores

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self.log("score", torch.tensor(self.scores[self.current_epoch]))


def fit(tmp_path: Path, callback: ModelCheckpoint, scores: list[float], **kwargs: Any) -> None:
    data = loader(regression_data(8), batch_size=4)  # 2 batches an epoch
    trainer = quiet(tmp_path, max_epochs=len(scores), callbacks=[callback], enable_checkpointing=True, **kwargs)
    trainer.fit(Scores(scores), data, loader(regression_data(4), batch_size=4))


def test_a_step_save_waits_for_the_validation_that_logs_the_monitor(tmp_path: Path) -> None:
    """Validation every second epoch: the saves at the other epochs' last steps would read a missing or a stale
    score; they wait, and the best is the best validation's."""
    callback = ModelCheckpoint(tmp_path / "c", monitor="score", mode="max", every_n_train_steps=2, save_last=False)
    fit(tmp_path, callback, [0.1, 0.5, 1.0, 3.0], check_val_every_n_epoch=2)
    assert float(callback.best_model_score) == 3.0  # type: ignore[arg-type]
    assert Path(callback.best_model_path).name == "epoch=3-step=8.ckpt"


def test_a_step_save_before_a_validation_takes_the_fresh_score(tmp_path: Path) -> None:
    """Validation twice an epoch, a save every step: each save due right before a validation waits for it."""
    callback = ModelCheckpoint(tmp_path / "c", monitor="score", mode="max", every_n_train_steps=1, save_top_k=-1)
    fit(tmp_path, callback, [0.2, 0.9], val_check_interval=0.5)
    assert sorted(callback.best_k_models.values()) == pytest.approx([0.2, 0.2, 0.9, 0.9])  # never a stale score


def test_a_monitor_never_logged_after_a_validation_is_an_error(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", monitor="nope")
    with pytest.raises(KeyError, match=r"monitor='nope'\) found no such logged metric"):
        fit(tmp_path, callback, [0.1, 0.2])


def test_a_monitor_not_logged_before_any_validation_is_a_warning(tmp_path: Path) -> None:
    """No validation at all: the monitored value may be a validation's, so Lightning warns (once) and keeps no top-k
    checkpoint; ``last.ckpt`` is still written."""
    callback = ModelCheckpoint(tmp_path / "c", monitor="val_loss")
    data = loader(regression_data(8), batch_size=4)
    with pytest.warns(UserWarning, match=r"ModelCheckpoint\(monitor='val_loss'\)` could not find the monitored key"):
        quiet(tmp_path, max_epochs=2, callbacks=[callback], enable_checkpointing=True).fit(Regressor(), data)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["last.ckpt"]
    assert callback.best_model_path == "" and callback.best_model_score is None
