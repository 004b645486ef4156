"""ModelCheckpoint's names and state as Lightning's (issue 33): a name that exists gets ``-v<n>`` unless it is the
file the new checkpoint replaces; ``best_model_score``/``kth_value`` are plain attributes kept in the state."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ModelCheckpoint
from trainer.exceptions import MisconfigurationException


def fit(tmp_path: Path, callback: ModelCheckpoint, epochs: int, **flags: object) -> None:
    data = loader(regression_data(16), batch_size=8)
    quiet(tmp_path, max_epochs=epochs, callbacks=[callback], enable_checkpointing=True, **flags).fit(Regressor(), data)


def test_keeping_every_checkpoint_under_one_name_versions_them(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", filename="best", monitor="epoch", save_top_k=-1, save_last=False)
    callback.STARTING_VERSION = 5
    fit(tmp_path, callback, epochs=3)
    names = {"best.ckpt", "best-v5.ckpt", "best-v6.ckpt"}
    assert set(os.listdir(tmp_path / "c")) == names and {Path(p).name for p in callback.best_k_models} == names
    assert torch.load(tmp_path / "c" / "best-v6.ckpt", weights_only=True)["epoch"] == 2  # none was overwritten


def test_the_one_checkpoint_dropped_gives_its_name_to_the_new_one(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", filename="best", monitor="epoch", mode="max", save_last=False)
    fit(tmp_path, callback, epochs=3)
    assert os.listdir(tmp_path / "c") == ["best.ckpt"]
    assert torch.load(tmp_path / "c" / "best.ckpt", weights_only=True)["epoch"] == 2


def test_a_resumed_run_versions_the_names_the_first_run_wrote_after_its_checkpoint(tmp_path: Path) -> None:
    first = ModelCheckpoint(tmp_path / "c", every_n_train_steps=2, save_top_k=-1, save_last=False)
    fit(tmp_path, first, epochs=2)
    again = ModelCheckpoint(tmp_path / "c", every_n_train_steps=2, save_top_k=-1, save_last=False)
    data = loader(regression_data(16), batch_size=8)
    quiet(tmp_path, max_epochs=2, callbacks=[again], enable_checkpointing=True).fit(
        Regressor(), data, ckpt_path=str(tmp_path / "c" / "epoch=0-step=2.ckpt")
    )
    written = ["epoch=0-step=2.ckpt", "epoch=1-step=4-v1.ckpt", "epoch=1-step=4.ckpt"]
    assert sorted(os.listdir(tmp_path / "c")) == written


def test_scores_are_plain_attributes_kept_in_the_state(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", monitor="epoch", mode="max", save_top_k=2, save_last=False)
    assert callback.kth_value == -torch.inf and callback.best_model_score is None
    fit(tmp_path, callback, epochs=3)
    assert (callback.best_model_score, callback.kth_value) == (2, 1)
    assert Path(callback.kth_best_model_path).name == "epoch=1-step=4.ckpt"
    callback.best_model_score = torch.tensor(7.0)  # settable, as Lightning's
    state = callback.state_dict()
    assert (state["best_model_score"], state["kth_value"]) == (7, 1)
    restored = ModelCheckpoint(tmp_path / "c", monitor="epoch", mode="max", save_top_k=2)
    restored.load_state_dict(state)
    assert (restored.best_model_score, restored.kth_value, restored.kth_best_model_path) == (
        7,
        1,
        callback.kth_best_model_path,
    )


def test_another_dirpath_given_restores_only_the_best_path(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", monitor="epoch", mode="max", save_top_k=2)
    fit(tmp_path, callback, epochs=2)
    elsewhere = ModelCheckpoint(tmp_path / "elsewhere", monitor="epoch", mode="max", save_top_k=2)
    with pytest.warns(UserWarning, match="The dirpath has changed from"):
        elsewhere.load_state_dict(callback.state_dict())
    assert elsewhere.best_model_path == callback.best_model_path
    assert elsewhere.best_k_models == {} and elsewhere.best_model_score is None and elsewhere.last_model_path == ""


def test_a_stand_in_logger_puts_checkpoints_where_lightning_does(tmp_path: Path) -> None:
    stand_in = mock.MagicMock(name="logger")  # not a trainer.loggers.Logger: read as Lightning reads any logger
    stand_in.name, stand_in.save_dir, stand_in.version = "mine", tmp_path / "logs", "0"
    del stand_in.__iter__
    data = loader(regression_data(16), batch_size=8)
    quiet(tmp_path, max_epochs=1, logger=stand_in, enable_checkpointing=True).fit(Regressor(), data)
    assert sorted(os.listdir(tmp_path / "logs" / "mine" / "0" / "checkpoints")) == ["epoch=0-step=2.ckpt", "last.ckpt"]


@pytest.mark.parametrize("where", ["root", "dirpath", "save_checkpoint"])
def test_a_url_for_runs_or_checkpoints_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    url = "memory://bucket/run"
    with pytest.raises(MisconfigurationException, match=r"'memory://bucket/run[^']*' is a URL; .* Give a local folder"):
        if where == "root":
            trainer.Trainer(default_root_dir=url)
        elif where == "dirpath":
            fit(tmp_path, ModelCheckpoint(dirpath=url), epochs=1)
        else:
            run = quiet(tmp_path, max_epochs=1)
            run.fit(Regressor(), loader(regression_data(16), batch_size=8))
            run.save_checkpoint(f"{url}/model.ckpt")
    assert not (tmp_path / "memory:").exists()


def test_save_last_link_is_a_relative_link_so_the_folder_can_move(tmp_path: Path) -> None:
    callback = ModelCheckpoint(tmp_path / "c", monitor="epoch", mode="max", save_last="link")
    fit(tmp_path, callback, epochs=2)
    link = tmp_path / "c" / "last.ckpt"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert Path(os.readlink(link)) == Path(callback.best_model_path).relative_to(tmp_path / "c")
    (tmp_path / "c").rename(tmp_path / "moved")
    assert torch.load(tmp_path / "moved" / "last.ckpt", weights_only=True)["epoch"] == 1
