"""ModelCheckpoint's options checked as Lightning checks them (issue 33): the error type and words ported tests
match, ``to_yaml``, a pickled copy equal to the original, and when an epoch's save waits for its validation."""

from __future__ import annotations

import pickle
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ModelCheckpoint
from trainer.exceptions import MisconfigurationException


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(save_top_k=-3), r"save_top_k=-3\) must be -1 \(all\), 0 or more: .*Must be >= -1"),
        (dict(save_top_k=3), r"ModelCheckpoint\(save_top_k=3, monitor=None\) is not a valid configuration"),
        (dict(every_n_epochs=-2), r"every_n_epochs=-2\) must be >= 0 or None: .*Must be >= 0"),
        (dict(every_n_train_steps=1, every_n_epochs=2), r"Combination of parameters every_n_train_steps=1, every_n"),
        (dict(train_time_interval=timedelta(minutes=1), every_n_epochs=2), r"should be mutually exclusive"),
    ],
)
def test_bad_options_raise_lightnings_error(kwargs: dict[str, Any], pattern: str) -> None:
    with pytest.raises(MisconfigurationException, match=pattern):
        ModelCheckpoint(**kwargs)


def test_options_lightning_accepts() -> None:
    for top_k in (-1, 0, 1):
        ModelCheckpoint(save_top_k=top_k)  # without a monitor: all, none, or the newest
    ModelCheckpoint(every_n_train_steps=0, every_n_epochs=0, train_time_interval=timedelta(minutes=1))


def test_a_symbolic_last_link_needs_a_local_folder(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath="memory://somewhere", save_last="link")
    with pytest.raises(ValueError, match=r"save_last='link'\)` is only supported for local file paths"):
        callback.setup(quiet(tmp_path), Regressor(), stage="fit")


def test_to_yaml_writes_the_best_k_scores(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", monitor="val_loss", save_top_k=2)
    data = loader(regression_data(16), batch_size=8)
    quiet(tmp_path, max_epochs=3, callbacks=[callback], enable_checkpointing=True).fit(Regressor(), data, data)
    callback.to_yaml()
    written = yaml.safe_load((tmp_path / "c" / "best_k_models.yaml").read_text())
    assert written == callback.best_k_models and len(written) == 2


def test_a_pickled_callback_equals_the_original(tmp_path: Path) -> None:
    callback = ModelCheckpoint(dirpath=tmp_path)
    assert vars(pickle.loads(pickle.dumps(callback))) == vars(callback)


def test_epoch_saves_wait_for_validation_when_it_is_not_every_epoch(tmp_path: Path) -> None:
    """check_val_every_n_epoch=2: the epochs without a validation save nothing (Lightning's rule), even the first,
    whose validation loader is not loaded yet."""
    callback = ModelCheckpoint(tmp_path / "c", monitor="epoch", mode="max", save_top_k=-1, filename="{epoch}")
    data = loader(regression_data(8), batch_size=8)
    fit = quiet(tmp_path, max_epochs=5, callbacks=[callback], enable_checkpointing=True, check_val_every_n_epoch=2)
    fit.fit(Regressor(), data, data)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["epoch=1.ckpt", "epoch=3.ckpt", "last.ckpt"]


def test_a_checkpoint_callback_with_checkpointing_off_is_named_in_lightnings_words(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationException, match=r"`enable_checkpointing=False` but found `ModelCheckpoint`"):
        quiet(tmp_path, callbacks=[ModelCheckpoint()], enable_checkpointing=False)


def test_saves_call_trainer_save_checkpoint_as_lightning_does(tmp_path: Path) -> None:
    """``trainer.save_checkpoint(str_path, weights_only)``: what a script wrapping or mocking it sees."""
    calls: list[tuple[Any, ...]] = []
    fit = quiet(
        tmp_path, max_epochs=2, callbacks=[ModelCheckpoint(tmp_path, save_last=False)], enable_checkpointing=True
    )
    original = fit.save_checkpoint
    fit.save_checkpoint = lambda *args, **kwargs: (calls.append((*args, kwargs)), original(*args, **kwargs))  # type: ignore[method-assign]
    fit.fit(Regressor(), loader(regression_data(8), batch_size=8))
    assert calls == [
        (str(tmp_path / "epoch=0-step=1.ckpt"), False, {}),
        (str(tmp_path / "epoch=1-step=2.ckpt"), False, {}),
    ]
