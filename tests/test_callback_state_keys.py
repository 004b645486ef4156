"""Callback states in checkpoints under Lightning's keys (issue 33): ``"EarlyStopping{'monitor': ..., 'mode': ...}"``,
so Lightning's checkpoints and ours restore by key both ways; checkpoints written with steadytrain's former keys
(``"EarlyStopping[val_loss]"``) still restore; a state no callback takes is named; two callbacks with one key are
refused; a resume past ``max_epochs`` is refused."""

from __future__ import annotations

import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.exceptions import MisconfigurationException


def data() -> torch.utils.data.DataLoader:
    return loader(regression_data(16), batch_size=4)


def test_state_keys_are_lightnings() -> None:
    assert trainer.EarlyStopping(monitor="val_loss").state_key == "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}"
    checkpoint = trainer.ModelCheckpoint(monitor="val_acc", mode="max", every_n_train_steps=5)
    assert checkpoint.state_key == (
        "ModelCheckpoint{'monitor': 'val_acc', 'mode': 'max', 'every_n_train_steps': 5, 'every_n_epochs': 0, "
        "'train_time_interval': None}"
    )
    timed = trainer.ModelCheckpoint(train_time_interval=timedelta(seconds=3))
    assert "'train_time_interval': datetime.timedelta(seconds=3)}" in timed.state_key


def _fit_and_save(tmp_path: Path, callbacks: list[trainer.Callback]) -> Path:
    fit = quiet(tmp_path, max_epochs=2, callbacks=callbacks, enable_checkpointing=True)
    fit.fit(Regressor(), data(), data())
    path = tmp_path / "run.ckpt"
    fit.save_checkpoint(path)
    return path


def test_a_checkpoint_with_former_keys_still_restores(tmp_path: Path) -> None:
    """A checkpoint written before the keys became Lightning's: its states reach the callbacks, with no warning."""
    stopper, saver = (
        trainer.EarlyStopping(monitor="val_loss"),
        trainer.ModelCheckpoint(tmp_path / "c", monitor="val_loss"),
    )
    path = _fit_and_save(tmp_path, [stopper, saver])
    saved = torch.load(path, weights_only=False)
    states = saved["callbacks"]
    states["EarlyStopping[val_loss]"] = {**states.pop(stopper.state_key), "wait_count": 7}
    states["ModelCheckpoint[val_loss]"] = states.pop(saver.state_key)
    torch.save(saved, path)
    stopper, saver = (
        trainer.EarlyStopping(monitor="val_loss"),
        trainer.ModelCheckpoint(tmp_path / "c", monitor="val_loss"),
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*Please add the following callbacks")
        quiet(tmp_path, max_epochs=2, callbacks=[stopper, saver], enable_checkpointing=True).fit(
            Regressor(), data(), data(), ckpt_path=path
        )
    assert stopper.wait_count == 7  # max_epochs reached already: no check ran after the restore
    assert saver.best_model_path == states["ModelCheckpoint[val_loss]"]["best_model_path"] != ""


def test_a_state_no_callback_takes_is_named(tmp_path: Path) -> None:
    stopper = trainer.EarlyStopping(monitor="val_loss", patience=50)
    path = _fit_and_save(tmp_path, [stopper])
    with pytest.warns(UserWarning, match=r"Please add the following callbacks: \[\"EarlyStopping\{'monitor'"):
        quiet(tmp_path, max_epochs=2).fit(Regressor(), data(), data(), ckpt_path=path)


class Counter(trainer.Callback):
    def __init__(self, key: str) -> None:
        self.key = key

    @property
    def state_key(self) -> str:
        return self._generate_state_key(key=self.key)

    def state_dict(self) -> dict[str, Any]:
        return {"key": self.key}


def test_two_stateful_callbacks_with_one_key_are_refused() -> None:
    assert Counter("a").state_key == "Counter{'key': 'a'}"
    trainer.Trainer(callbacks=[Counter("a"), Counter("b")], logger=False)
    with pytest.raises(
        RuntimeError, match=r"more than one stateful callback of type `Counter`.*\"Counter\{'key': 'a'}\""
    ):
        trainer.Trainer(callbacks=[Counter("a"), Counter("a")], logger=False)
    same = trainer.ModelCheckpoint(monitor="val_loss")
    with pytest.raises(RuntimeError, match="more than one stateful callback of type `ModelCheckpoint`"):
        trainer.Trainer(callbacks=[same, trainer.ModelCheckpoint(monitor="val_loss")], logger=False)
    weights = trainer.ModelCheckpoint(monitor="val_loss", save_weights_only=True)  # beside a full one: its own key
    trainer.Trainer(callbacks=[trainer.ModelCheckpoint(monitor="val_loss"), weights], logger=False)


def test_a_resume_past_max_epochs_is_refused(tmp_path: Path) -> None:
    fit = quiet(tmp_path, max_epochs=3)
    fit.fit(Regressor(), data())
    path = tmp_path / "three.ckpt"
    fit.save_checkpoint(path)
    quiet(tmp_path, max_epochs=3).fit(Regressor(), data(), ckpt_path=path)  # at the limit: nothing left to do
    with pytest.raises(MisconfigurationException, match=r"current_epoch=3, but you have set Trainer\(max_epochs=2\)"):
        quiet(tmp_path, max_epochs=2).fit(Regressor(), data(), ckpt_path=path)
