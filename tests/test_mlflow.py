"""MLFlowLogger against real tracking stores, read back with ``MlflowClient``.

A fresh SQLite store costs MLflow 5-20 s of schema migrations, so one store is made per module and
copied for each test (a copy opens in well under a second).
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.utils.data import DataLoader

pytest.importorskip("jsonargparse", reason="the CLI needs jsonargparse: pip install 'jsonargparse[signatures]'")
from tests.cli_fixtures.running import QUICK, argv
from tests.cli_fixtures.tiny import Data, Model
from tests.helpers import assert_no_leftovers, clean_env, free_port
from tests.models import Regressor, regression_data
from trainer import ModelCheckpoint, Trainer
from trainer.loggers import CSVLogger, Logger, MLFlowLogger

MLFLOW_MODULE = importlib.import_module("trainer.loggers.mlflow")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs mlflow (the mlflow extra)")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty, migrated SQLite tracking store (mlflow imported once for the module)."""
    pytest.importorskip("mlflow")
    import mlflow.tracking.context.registry  # noqa: F401  (what a run's start imports: paid here, once)
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def save_dir(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``save_dir`` holding a copy of the template store, where MLFlowLogger's default URI points."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # MLflow's own defaults (artifacts of other stores) land here, not in the repo
    folder = tmp_path / "runs"  # the Trainer's default_root_dir, where ckpt_path="last" looks
    folder.mkdir()
    shutil.copy(template, folder / "mlflow.db")
    return folder


def client(save_dir: Path) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{save_dir / 'mlflow.db'}")


class SavedRegressor(Regressor):
    """Saves its hyper-parameters: as in Lightning, loggers get only what ``save_hyperparameters`` saved."""

    def __init__(self, features: int = 8, lr: float = 0.05, dropout: float = 0.0, adam: bool = False) -> None:
        super().__init__(features, lr, dropout, adam)
        self.save_hyperparameters()


def loaders() -> tuple[DataLoader[Any], DataLoader[Any]]:
    data = regression_data()
    return DataLoader(data, batch_size=16), DataLoader(data, batch_size=32)


def fit(logger: Any, max_epochs: int = 2, ckpt_path: str | None = None, **kwargs: Any) -> Trainer:
    kwargs.setdefault("enable_checkpointing", False)
    trainer = Trainer(
        max_epochs=max_epochs,
        logger=logger,
        log_every_n_steps=2,
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(SavedRegressor(lr=0.01), *loaders(), ckpt_path=ckpt_path)
    return trainer


def history(mlflow: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in mlflow.get_metric_history(run_id, key))


def artifact_dirs(mlflow: Any, run_id: str) -> set[str]:
    return {entry.path for entry in mlflow.list_artifacts(run_id)}


# ---- a fit, read back -------------------------------------------------------------------------------
def test_fit_logs_params_metrics_at_their_steps_tags_and_finishes(save_dir: Path, tmp_path: Path) -> None:
    logger = MLFlowLogger(experiment_name="exp", run_name="first", tags={"team": "vision"}, save_dir=str(save_dir))
    assert not (save_dir / "exp").exists()  # building the logger touched nothing
    side = CSVLogger(save_dir=str(tmp_path / "csv"))
    trainer = fit([logger, side])

    mlflow = client(save_dir)
    run = mlflow.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.end_time is not None
    assert (logger.name, logger.version) == (run.info.experiment_id, run.info.run_id)
    assert mlflow.get_experiment(run.info.experiment_id).name == "exp"
    assert run.data.tags["mlflow.runName"] == "first" and run.data.tags["team"] == "vision"
    assert {k: run.data.params[k] for k in ("lr", "features", "adam")} == {
        "lr": "0.01",
        "features": "8",
        "adam": "False",
    }
    with open(side.log_dir + "/metrics.csv") as f:
        rows = list(csv.DictReader(f))
    for key in ("train_loss", "val_loss", "epoch"):  # what the CSV logger got, at the same steps
        expected = sorted((int(row["step"]), float(row[key])) for row in rows if row[key])
        logged = history(mlflow, logger.run_id, key)
        assert [s for s, _ in logged] == [s for s, _ in expected] and len(expected) > 1
        assert [v for _, v in logged] == pytest.approx([v for _, v in expected])
    assert trainer.log_dir == logger.log_dir == str(save_dir / "exp" / "version_0")  # str, as Lightning's
    assert logger.save_dir == str(save_dir)


def test_a_failed_fit_marks_the_run_failed_with_what_it_logged(save_dir: Path) -> None:
    class Breaks(SavedRegressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.trainer.global_step == 4:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    logger = MLFlowLogger(save_dir=str(save_dir))
    trainer = Trainer(max_epochs=1, logger=logger, log_every_n_steps=2, accelerator="cpu", enable_progress_bar=False)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Breaks(), loaders()[0])
    mlflow = client(save_dir)
    assert mlflow.get_run(logger.run_id).info.status == "FAILED"
    assert [step for step, _ in history(mlflow, logger.run_id, "train_loss")] == [1, 3]  # 3: flushed at the end


def test_interrupted_is_killed_and_logging_again_reopens_the_run(save_dir: Path) -> None:
    logger = MLFlowLogger(save_dir=str(save_dir))
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("interrupted")
    mlflow = client(save_dir)
    assert mlflow.get_run(logger.run_id).info.status == "KILLED"
    logger.log_metrics({"loss": 0.5}, step=1)  # a test() after fit: the same run, RUNNING meanwhile
    assert mlflow.get_run(logger.run_id).info.status == "RUNNING"
    logger.finalize("success")
    assert mlflow.get_run(logger.run_id).info.status == "FINISHED"
    assert history(mlflow, logger.run_id, "loss") == [(0, 1.0), (1, 0.5)]
    with pytest.raises(ValueError, match=r"'done'.*'failed', 'finished', 'interrupted', 'success'"):
        logger.finalize("done")


# ---- resume --------------------------------------------------------------------------------------------
def test_a_resumed_fit_appends_to_the_same_run(save_dir: Path) -> None:
    first = MLFlowLogger(save_dir=str(save_dir))
    stopped = fit(first, max_epochs=2, enable_checkpointing=True)
    resumed_logger = MLFlowLogger(save_dir=str(save_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same params again: nothing to warn about, nothing refused
        resumed = fit(resumed_logger, max_epochs=4, ckpt_path="last", enable_checkpointing=True)

    mlflow = client(save_dir)
    assert resumed_logger.run_id == first.run_id
    (run,) = mlflow.search_runs([first.experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["lr"] == "0.01"
    steps = [step for step, _ in history(mlflow, first.run_id, "val_loss")]
    assert steps == [5, 11, 17, 23]  # two epochs before the stop, two after: one run
    assert resumed_logger.log_dir == first.log_dir and resumed.log_dir == stopped.log_dir


def test_run_id_continues_a_run_and_a_changed_param_is_kept_with_a_warning(save_dir: Path) -> None:
    first = MLFlowLogger(save_dir=str(save_dir))
    first.log_hyperparams({"lr": 0.1, "depth": 3})
    first.finalize("success")
    again = MLFlowLogger(save_dir=str(save_dir), run_id=first.run_id, tags={"stage": "2"})
    again.log_hyperparams({"lr": 0.2, "depth": 3, "width": 8})
    with pytest.warns(UserWarning, match=r"keeps its logged values of \['lr'\]"):
        again.finalize("success")
    run = client(save_dir).get_run(first.run_id)
    assert run.data.params == {"lr": "0.1", "depth": "3", "width": "8"} and run.data.tags["stage"] == "2"
    with pytest.raises(ValueError, match=r"run 'nope'.*not in the tracking store"):
        MLFlowLogger(save_dir=str(save_dir), run_id="nope").log_metrics({"x": 1.0}, step=0)


# ---- checkpoints as artifacts --------------------------------------------------------------------------
class SavedCheckpoints(Logger):
    """Records, at each save, the checkpoints kept and what MLflow already holds."""

    def __init__(self, mlflow: MLFlowLogger) -> None:
        self.mlflow, self.kept, self.uploaded = mlflow, set(), []  # type: ignore[var-annotated]

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        self.kept.add(checkpoint_callback.best_model_path)  # without a monitor: the newest save
        self.uploaded.append(artifact_dirs(self.mlflow.experiment, str(self.mlflow.run_id)))


@pytest.mark.parametrize("log_model", [True, "all", False])
def test_log_model_uploads_checkpoints(save_dir: Path, log_model: Any) -> None:
    logger = MLFlowLogger(save_dir=str(save_dir), log_model=log_model)
    saves = SavedCheckpoints(logger)
    trainer = fit([logger, saves], max_epochs=3, callbacks=[ModelCheckpoint(save_top_k=1)], enable_checkpointing=True)
    callback = trainer.checkpoint_callback
    assert callback is not None and len(saves.kept) == 3  # one per epoch, two of them deleted since
    mlflow = client(save_dir)
    uploaded = artifact_dirs(mlflow, logger.run_id)
    if log_model is False:
        assert uploaded == set() and saves.uploaded[-1] == set()
        return
    if log_model == "all":  # each as it was saved, the deleted ones included
        assert uploaded == {Path(p).stem for p in saves.kept} | {"last"}
        assert [len(u) for u in saves.uploaded] == [2, 3, 4]
    else:  # at the end: what the callback keeps
        assert uploaded == {Path(callback.best_model_path).stem, "last"} and saves.uploaded[-1] == set()
    best = Path(callback.best_model_path)
    local = Path(mlflow.download_artifacts(logger.run_id, f"{best.stem}/{best.name}", str(save_dir.parent)))
    assert local.read_bytes() == best.read_bytes()
    meta = yaml.safe_load(Path(mlflow.download_artifacts(logger.run_id, f"{best.stem}/metadata.yaml")).read_text())
    assert meta["original_filename"] == best.name and meta["Checkpoint"]["save_top_k"] == 1
    aliases = Path(mlflow.download_artifacts(logger.run_id, f"{best.stem}/aliases.txt")).read_text()
    assert aliases == "['latest', 'best']"
    assert (save_dir / "mlartifacts").is_dir()  # the default store keeps its artifacts in save_dir


# ---- params, metric names, the environment, ranks ------------------------------------------------------
def test_params_are_flattened_cut_and_sent_in_batches(save_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logger = MLFlowLogger(save_dir=str(save_dir))
    batches: list[int] = []
    experiment = logger.experiment
    real = experiment.log_batch
    monkeypatch.setattr(
        experiment, "log_batch", lambda *a, **k: batches.append(len(k.get("params", []))) or real(*a, **k)
    )
    params = {f"p{i}": i for i in range(230)} | {"model": {"hidden": 4, "act": "tanh"}, "note": "x" * 300}
    with pytest.warns(UserWarning, match=r"\['note'\] are longer than MLflow's 250"):
        logger.log_hyperparams(params)
    logger.flush()
    logged = client(save_dir).get_run(logger.run_id).data.params
    assert logged["model/hidden"] == "4" and logged["model/act"] == "tanh" and logged["p229"] == "229"
    assert logged["note"] == "x" * 250 and len(logged) == 233 and batches == [100, 100, 33]


def test_metric_names_get_the_prefix_and_lose_what_mlflow_refuses(save_dir: Path) -> None:
    logger = MLFlowLogger(save_dir=str(save_dir), prefix="train")
    with pytest.warns(RuntimeWarning, match="'train-acc@1' is logged as 'train-acc1'"):
        logger.log_metrics({"acc@1": 0.5, "loss": torch.tensor(2.0)}, step=3)  # type: ignore[dict-item]
    with pytest.warns(UserWarning, match="metric note='hi' is text"):
        logger.log_metrics({"note": "hi"}, step=3)  # type: ignore[dict-item]
    logger.finalize("success")
    metrics = client(save_dir).get_run(logger.run_id).data.metrics
    assert metrics == {"train-acc1": 0.5, "train-loss": 2.0}


def test_tracking_uri_comes_from_the_environment(save_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = save_dir.parent / "elsewhere.db"
    shutil.copy(save_dir / "mlflow.db", elsewhere)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{elsewhere}")
    logger = MLFlowLogger(save_dir=str(save_dir / "unused"))
    logger.log_metrics({"x": 1.0}, step=0)
    logger.finalize("success")
    from mlflow.tracking import MlflowClient

    assert MlflowClient(f"sqlite:///{elsewhere}").get_run(logger.run_id).data.metrics == {"x": 1.0}
    assert not (save_dir / "unused").exists()


def test_asynchronous_logging_is_complete_when_the_run_ends(save_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logger = MLFlowLogger(save_dir=str(save_dir), synchronous=False)
    calls: list[Any] = []
    real = logger.experiment.log_batch
    monkeypatch.setattr(logger.experiment, "log_batch", lambda *a, **k: calls.append(k["synchronous"]) or real(*a, **k))
    for step in range(3):
        logger.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    logger.finalize("success")  # waits for MLflow's queue before ending the run
    mlflow = client(save_dir)
    assert [step for step, _ in history(mlflow, logger.run_id, "loss")] == [0, 1, 2]
    assert mlflow.get_run(logger.run_id).info.status == "FINISHED" and calls == [False] * 3


def test_an_existing_experiment_is_reused_and_a_deleted_one_named(save_dir: Path) -> None:
    mlflow = client(save_dir)
    kept = mlflow.create_experiment("kept", artifact_location=str(save_dir / "kept_artifacts"))
    with pytest.warns(UserWarning, match="experiment 'kept' exists and keeps its own"):
        logger = MLFlowLogger("kept", save_dir=str(save_dir), artifact_location=str(save_dir / "other"))
        assert logger.experiment_id == kept
    mlflow.delete_experiment(mlflow.create_experiment("gone"))
    with pytest.raises(ValueError, match=r"experiment 'gone' is deleted.*mlflow experiments restore"):
        MLFlowLogger("gone", save_dir=str(save_dir)).log_metrics({"x": 1.0}, step=0)


def test_only_rank_zero_talks_to_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    logger = MLFlowLogger(save_dir=str(tmp_path / "store"))
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"x": 1.0}, step=0)
    logger.experiment.log_param("any", "call", "does nothing")
    assert logger.run_id is None and logger.state_dict()["run_id"] is None
    logger.finalize("success")
    assert not (tmp_path / "store").exists()


def test_bad_arguments_and_a_missing_mlflow_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"log_model='best'.*True, False or 'all'"):
        MLFlowLogger(log_model="best")  # type: ignore[arg-type]
    monkeypatch.setattr(MLFLOW_MODULE.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"needs mlflow.*\.\[mlflow\]"):
        MLFlowLogger()


def test_the_cli_builds_it_by_class_name(save_dir: Path) -> None:
    from trainer.cli import CLI

    args = argv("fit", QUICK, "--trainer.logger MLFlowLogger --trainer.logger.save_dir", save_dir)
    cli = CLI(Model, Data, args=[*args, "--trainer.logger.experiment_name", "cli"])
    logger = cli.trainer.logger
    assert isinstance(logger, MLFlowLogger)
    run = client(save_dir).get_run(logger.run_id)
    assert run.info.status == "FINISHED" and "val_loss" in run.data.metrics
    assert client(save_dir).get_experiment(run.info.experiment_id).name == "cli"
    assert not any(name.startswith("config/") for name in run.data.params)  # Lightning's: hparams, not the config


# ---- a tracking server ---------------------------------------------------------------------------------
@pytest.fixture
def server(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``mlflow server`` on a free loopback port: SQLite backend, artifacts served from a local folder."""
    db = tmp_path / "server.db"
    shutil.copy(template, db)
    port = free_port()
    command = ["-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}", "--serve-artifacts"]
    command += ["--artifacts-destination", str(tmp_path / "served"), "--host", "127.0.0.1", "--port", str(port)]
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115  (closed in teardown)
    proc = subprocess.Popen(
        [sys.executable, *command, "--workers", "1"],
        env=clean_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its workers in its group: killed with it
    )
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, proc, tmp_path / "server.log", deadline=time.monotonic() + 300)
        yield url
    finally:
        _stop(proc)
        log.close()
    assert_no_leftovers(f"--port {port}", within=5)


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlflow server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server did not answer at {url} in time:\n{log.read_text()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its process group, SIGKILL after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(600)  # a server's start on a busy 2-core machine can take minutes
def test_a_fit_logged_to_a_tracking_server(server: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    logger = MLFlowLogger(
        experiment_name="served", tracking_uri=server, save_dir=str(tmp_path / "runs"), log_model=True
    )
    trainer = fit(logger, max_epochs=2, enable_checkpointing=True)
    remote = MlflowClient(server)
    run = remote.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.params["lr"] == "0.01"
    assert [step for step, _ in history(remote, logger.run_id, "val_loss")] == [5, 11]
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # uploaded through the server
    last = Path(trainer.checkpoint_callback.last_model_path)  # type: ignore[union-attr]
    copy = Path(remote.download_artifacts(logger.run_id, "last/last.ckpt", str(tmp_path)))
    assert copy.read_bytes() == last.read_bytes()
    assert list((tmp_path / "served").rglob("last.ckpt"))  # where the server keeps it
    assert not (tmp_path / "runs" / "mlflow.db").exists()  # no local store beside a server
