"""WandbLogger's Lightning calls (watch, log_table, log_text, use_artifact, download_artifact), ``log_model="all"``
during a fit, and what reaches ``wandb.init``: against a stand-in ``wandb`` module (no network, no wandb process)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from unittest import mock

import pytest

from tests.models import Regressor, loader, quiet, regression_data
from trainer.callbacks import ModelCheckpoint
from trainer.exceptions import MisconfigurationException
from trainer.loggers import TensorBoardLogger, WandbLogger


@pytest.fixture
def wandb_stub(monkeypatch: pytest.MonkeyPatch) -> mock.MagicMock:
    """``import wandb`` gives this mock; ``wandb.init`` a run with an id, no run active before."""
    pytest.importorskip("wandb")  # the logger checks that wandb is installed
    stub = mock.MagicMock(name="wandb")
    stub.run = None
    stub.init.return_value.id = "abcd1234"
    monkeypatch.setitem(sys.modules, "wandb", stub)
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return stub


def test_version_prefix_and_checkpoint_name_are_not_wandb_init_arguments(
    wandb_stub: mock.MagicMock, tmp_path: Path
) -> None:
    logger = WandbLogger(
        save_dir=tmp_path, version="myrun", prefix="p", checkpoint_name="best-model", entity="team", tags=["a"]
    )
    logger.log_metrics({"loss": 1.0})
    (call,) = wandb_stub.init.call_args_list
    assert call.kwargs["id"] == "myrun" and call.kwargs["entity"] == "team" and call.kwargs["tags"] == ["a"]
    assert not {"version", "prefix", "checkpoint_name"} & set(call.kwargs)
    wandb_stub.init.return_value.log.assert_called_once_with({"p-loss": 1.0})  # the prefix on the metric's name


def test_watch_tables_text_and_artifacts(wandb_stub: mock.MagicMock, tmp_path: Path) -> None:
    run = wandb_stub.init.return_value
    logger = WandbLogger(save_dir=tmp_path)
    model = Regressor()
    logger.watch(model, log="all", log_freq=10)
    run.watch.assert_called_once_with(model, log="all", log_freq=10, log_graph=True)

    logger.log_table("samples", columns=["x", "y"], data=[[1, 2]])
    logger.log_text("captions", columns=["text"], data=[["a cat"]], step=4)
    logger.flush()
    assert wandb_stub.Table.call_args_list == [
        mock.call(columns=["x", "y"], data=[[1, 2]], dataframe=None),
        mock.call(columns=["text"], data=[["a cat"]], dataframe=None),
    ]
    logged = {key for call in run.log.call_args_list for key in call.args[0]}
    assert {"samples", "captions", "trainer/global_step"} <= logged

    artifact = logger.use_artifact("team/p/model-x:v1", artifact_type="model")
    run.use_artifact.assert_called_once_with("team/p/model-x:v1", type="model")
    assert artifact is run.use_artifact.return_value


def test_download_artifact_without_a_run_uses_the_api(wandb_stub: mock.MagicMock, tmp_path: Path) -> None:
    wandb_stub.Api.return_value.artifact.return_value.download.return_value = str(tmp_path / "art")
    folder = WandbLogger.download_artifact("team/p/data:latest", save_dir=tmp_path, artifact_type="dataset")
    wandb_stub.Api.return_value.artifact.assert_called_once_with("team/p/data:latest", type="dataset")
    assert folder == str(tmp_path / "art")


def test_log_model_all_uploads_each_checkpoint_as_it_is_saved(wandb_stub: mock.MagicMock, tmp_path: Path) -> None:
    run = wandb_stub.init.return_value
    uploads: list[int] = []
    run.log_artifact.side_effect = lambda *a, **k: uploads.append(fit.global_step)
    logger = WandbLogger(save_dir=tmp_path, log_model="all", checkpoint_name="regressor")
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1, save_last=False)
    fit = quiet(tmp_path, logger=logger, callbacks=[checkpoints], enable_checkpointing=True, max_steps=6)
    fit.fit(Regressor(), loader(regression_data(48)))
    assert uploads == [2, 4, 6]  # during the fit, one version per checkpoint, not all at the end
    names = {call.kwargs["name"] for call in wandb_stub.Artifact.call_args_list}
    assert names == {"regressor"} and wandb_stub.Artifact.return_value.add_file.call_count == 3


def test_bad_log_model_is_named(wandb_stub: mock.MagicMock) -> None:
    with pytest.raises(MisconfigurationException, match=r"log_model='best'\): use True, False or 'all'"):
        WandbLogger(log_model="best")  # type: ignore[arg-type]


class Saved(Regressor):
    """Saves its hyper-parameters: TensorBoard writes them (opening its writer) when the fit starts."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()


def test_sync_tensorboard_starts_wandb_before_any_summary_writer(
    wandb_stub: mock.MagicMock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tensorboard")
    tensorboard = importlib.import_module("trainer.loggers.tensorboard")
    order: list[str] = []
    wandb_stub.init.side_effect = lambda **kwargs: order.append("wandb.init") or wandb_stub.init.return_value
    writer = tensorboard._tensorboard().SummaryWriter
    monkeypatch.setattr(
        tensorboard._tensorboard(), "SummaryWriter", lambda **kwargs: order.append("SummaryWriter") or writer(**kwargs)
    )
    loggers = [TensorBoardLogger(save_dir=tmp_path), WandbLogger(save_dir=tmp_path, sync_tensorboard=True)]
    quiet(tmp_path, logger=loggers, max_steps=1).fit(Saved(), loader(regression_data(8)))
    assert order == ["wandb.init", "SummaryWriter"]  # TensorBoard listed first: wandb still starts first
