"""A logger whose folder is deleted mid-run recreates it and says so, or stops naming it (issue 36, case 2)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from trainer.loggers.csv import CSVLogger
from trainer.loggers.tensorboard import TensorBoardLogger


def test_csv_logger_recreates_deleted_run_folder(tmp_path: Path) -> None:
    logger = CSVLogger(str(tmp_path), name="run")
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.flush()
    metrics = Path(logger.log_dir) / "metrics.csv"
    assert metrics.exists()
    shutil.rmtree(logger.log_dir)
    logger.log_metrics({"loss": 0.5}, step=1)
    with pytest.warns(UserWarning, match=r"metrics\.csv was deleted.*from step 1"):
        logger.flush()
    assert "0.5" in metrics.read_text() and "1.0" not in metrics.read_text()
    assert (Path(logger.log_dir) / "hparams.yaml").exists()
    logger.finalize("success")


def _delete_from_outside(folder: str) -> None:
    """``rm -rf`` the run folder, again if a file appeared in it meanwhile (the SummaryWriter's own thread may
    still be writing: on a loaded machine a single rmtree can meet a folder that is no longer empty)."""
    for _ in range(100):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            return
        time.sleep(0.01)
    raise AssertionError(f"{folder} could not be deleted")


def test_tensorboard_logger_recreates_deleted_event_file(tmp_path: Path) -> None:
    logger = TensorBoardLogger(str(tmp_path), name="run")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.log_metrics({"loss": 0.9}, step=1)
    logger.flush()
    _delete_from_outside(logger.log_dir)
    with pytest.warns(UserWarning, match=r"was deleted while this run logged.*new event file"):
        logger.log_metrics({"loss": 0.5}, step=2)
        logger.log_metrics({"loss": 0.4}, step=3)
        logger.flush()
    logger.finalize("success")
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(logger.log_dir))


def test_mlflow_logger_stops_naming_deleted_store(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from trainer.loggers.mlflow import MLFlowLogger

    store = tmp_path / "mlflow.db"
    logger = MLFlowLogger(tracking_uri=f"sqlite:///{store}", save_dir=str(tmp_path / "runs"))
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.flush()
    store.unlink()
    logger.log_metrics({"loss": 0.5}, step=1)
    with pytest.raises(FileNotFoundError, match=r"MLflow store .*mlflow\.db was deleted"):
        logger.flush()
    logger.finalize("success")  # reported once; ending the run raises nothing more


def test_wandb_offline_run_file_deleted_is_named(tmp_path: Path) -> None:
    """wandb's service keeps writing into a deleted stream: the next send sees the file gone and stops the run
    (the catalogue case ``outside-log-folder-deleted-wandb-offline`` runs it with wandb itself)."""
    from types import SimpleNamespace

    from trainer.loggers.wandb_media import offline_file_gone

    stream = tmp_path / "offline-run-1" / "run-1.wandb"
    stream.parent.mkdir()
    stream.write_bytes(b"")
    run = SimpleNamespace(settings=SimpleNamespace(mode="offline", sync_file=str(stream)))
    assert offline_file_gone(run) is None
    online = SimpleNamespace(settings=SimpleNamespace(mode="online", sync_file=str(tmp_path / "absent.wandb")))
    assert offline_file_gone(online) is None  # online runs stream to the server; the local copy is not the record
    shutil.rmtree(stream.parent)
    error = offline_file_gone(run)
    assert isinstance(error, FileNotFoundError) and f"{stream} was deleted" in str(error)
    assert "ckpt_path='last'" in str(error)
