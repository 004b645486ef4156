"""The MLflow side of MLFlowLogger: the experiment and run found or made, checkpoints as artifacts.

Checkpoints are laid out as Lightning's MLFlowLogger lays them out: ``<stem>/<file>`` beside
``<stem>/metadata.yaml`` (score, the callback's settings) and ``<stem>/aliases.txt``
(``['latest', 'best']`` for the best one).
"""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.loggers.checkpoints import checkpoint_aliases, checkpoint_metadata

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from trainer.callbacks.checkpoint import ModelCheckpoint


@contextlib.contextmanager
def store_lock(folder: Path) -> Iterator[None]:
    """Runs that start together with one local store wait here in turn: MLflow creates a new SQLite store's tables
    with migrations that fail when two processes run them at once. An advisory ``flock`` on
    ``<folder>/.mlflow.db.lock`` (none where ``fcntl`` is missing: Windows)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".mlflow.db.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def store_path(tracking_uri: str) -> Path | None:
    """The local file or folder a tracking URI keeps its runs in (``sqlite:///x.db``, ``file:./mlruns``, a path);
    None for a server."""
    if tracking_uri.startswith("sqlite:///") and ":memory:" not in tracking_uri:
        return Path(tracking_uri[len("sqlite:///") :])
    if tracking_uri.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(tracking_uri).path))
    return Path(tracking_uri) if "://" not in tracking_uri else None


def store_deleted(store: Path, run_id: str | None) -> FileNotFoundError:
    """The local store went while the run logged to it: MLflow cannot make the run again in a new one."""
    return FileNotFoundError(
        errno.ENOENT,
        f"MLFlowLogger: the MLflow store {store} was deleted while run {run_id} logged to it (a cleanup job? rm -r of "
        "the save_dir?). The run stops here rather than log into nothing: MLflow cannot recreate a run mid-way, and "
        "what it had logged went with the store. The checkpoints are untouched; resume from the last one with a "
        "store that holds the run (restored), or with another logger",
        str(store),
    )


def experiment_id(client: MlflowClient, name: str, location: str | None, given_location: str | None) -> str:
    """The experiment named ``name``, created (with its artifacts at ``location``) when there is none; a run that
    started at the same moment and created it first wins, and its experiment is used."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name, artifact_location=location)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        raise ValueError(
            f"MLflow experiment {name!r} is deleted at {client.tracking_uri}: restore it "
            f"(mlflow experiments restore --experiment-id {experiment.experiment_id}) or pick another name."
        )
    if given_location not in (None, experiment.artifact_location):
        warnings.warn(
            f"MLFlowLogger(artifact_location={given_location!r}): experiment {name!r} exists and keeps its own, "
            f"{experiment.artifact_location}.",
            stacklevel=5,
        )
    return str(experiment.experiment_id)


def new_run(client: MlflowClient, experiment: str, tags: dict[str, str]) -> str:
    """A new run with the given tags and MLflow's own (source, user, git commit), as Lightning's has."""
    from mlflow.tracking.context.registry import resolve_tags

    return str(client.create_run(experiment, tags=resolve_tags(tags)).info.run_id)


def continue_run(client: MlflowClient, run_id: str, tags: dict[str, str], batch_kwargs: dict[str, Any]) -> str:
    """Mark an existing run RUNNING again and apply the given tags; returns its experiment's id."""
    from mlflow.entities import RunTag
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as err:
        raise ValueError(
            f"MLflow run {run_id!r} (from run_id= or the resumed checkpoint) is not in the tracking store "
            f"{client.tracking_uri}: point tracking_uri (or save_dir) at the store that holds it."
        ) from err
    client.update_run(run_id, status="RUNNING")
    if tags:
        client.log_batch(run_id, tags=[RunTag(key, value) for key, value in tags.items()], **batch_kwargs)
    return str(run.info.experiment_id)


def upload_checkpoint(client: MlflowClient, run_id: str, callback: ModelCheckpoint, path: str) -> None:
    """One checkpoint file (or sharded folder, once its asynchronous write is done) with its metadata."""
    stem = Path(path).stem
    if os.path.isdir(path):
        from trainer.checkpoint.sharded import wait_pending

        wait_pending()
        client.log_artifacts(run_id, path, f"{stem}/{Path(path).name}")
    else:
        client.log_artifact(run_id, path, stem)
    client.log_dict(run_id, checkpoint_metadata(callback, path, "Checkpoint"), f"{stem}/metadata.yaml")
    client.log_text(run_id, str(checkpoint_aliases(callback, path)), f"{stem}/aliases.txt")
