"""MLflow: mlflow is imported and the run created on first use, so building the logger costs nothing.

With no ``tracking_uri`` (and no ``MLFLOW_TRACKING_URI``) the store is SQLite in ``save_dir``
(``<save_dir>/mlflow.db``, artifacts in ``<save_dir>/mlartifacts``): MLflow 3 refuses new work in its
file store (``file:./mlruns``), which is Lightning's default.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import override

from trainer.loggers.base import FlushAtExit, Logger, StepBuffer, hparams_dict, sanitize_hparams
from trainer.loggers.checkpoints import unlogged_checkpoints
from trainer.loggers.folder import RunFolder
from trainer.loggers.mlflow_run import (
    continue_run,
    experiment_id,
    new_run,
    store_deleted,
    store_lock,
    store_path,
    upload_checkpoint,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from trainer.callbacks.checkpoint import ModelCheckpoint

STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
PARAM_VALUE_LIMIT = 250  # the oldest servers' limit (newer ones take 6000): a run logs to any of them
PARAMS_PER_BATCH = 100  # MLflow's limits for one log_batch call
METRICS_PER_BATCH = 1000
_NOT_IN_KEYS = re.compile(r"[^a-zA-Z0-9_/. -]+")  # what Lightning removes from metric names
INSTALL = "pip install mlflow, or steadytrain's extra: pip install -e '.[mlflow]' in a clone of the repository"


def _global_rank() -> int:
    """This process's global rank: the process group's once there is one, else the launcher's ``RANK``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _mlflow_installed() -> bool:
    """Found, not imported (importing takes seconds); a stand-in a test put in ``sys.modules`` has no spec, and
    counts."""
    try:
        return importlib.util.find_spec("mlflow") is not None
    except ValueError:
        return True


class _NoExperiment:
    """``experiment`` on ranks other than zero: every call does nothing, as Lightning's ``DummyExperiment``."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


class MLFlowLogger(Logger):
    """Logs to an MLflow run: hyper-parameters as params, metrics at their steps, checkpoints as artifacts.

    Lightning's arguments and behaviour. ``tracking_uri`` defaults to ``MLFLOW_TRACKING_URI``, else to
    ``sqlite:///<save_dir>/mlflow.db``. ``log_model``: ``True`` logs the checkpoints at the end of the run
    (every checkpoint as it is saved when ``save_top_k == -1``), ``"all"`` every checkpoint as it is saved,
    ``False`` none. ``run_id`` continues an existing run; a run resumed from a checkpoint continues the
    checkpointed run. ``synchronous`` is MLflow's (``False``: logging calls return before the write, which
    is complete when the run ends).

    What is logged at one step is sent as one ``log_batch`` call (one database transaction or HTTP
    request) when another step is logged, on ``flush``, at a checkpoint, at ``finalize``, or at a normal
    exit. Checkpoints go to ``<save_dir>/<experiment_name>/version_<n>/checkpoints``, a folder chosen
    without asking the server, so every rank agrees on it and only rank zero ever talks to MLflow.
    ``save_dir`` defaults to ``runs`` (not Lightning's ``./mlruns``): the Trainer's ``default_root_dir``,
    where ``fit(ckpt_path="last")`` looks for checkpoints. A local store (SQLite file, ``file:`` folder)
    deleted while the run logs to it stops the run with an error naming it: the run cannot be made again.
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: dict[str, Any] | None = None,
        save_dir: str = "runs",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        if not _mlflow_installed():
            raise ImportError(f"MLFlowLogger needs mlflow: {INSTALL}")
        if log_model not in (True, False, "all"):
            raise ValueError(f"MLFlowLogger(log_model={log_model!r}): use True, False or 'all'.")
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._local_root = Path(save_dir).resolve()  # now: a later chdir must not move the store
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        self._tracking_uri = uri or f"sqlite:///{self._local_root / 'mlflow.db'}"
        self._local_store = uri is None
        self.tags = dict(tags) if tags else None
        self._save_dir = save_dir
        self._log_model = log_model
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._given_run_id = run_id
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._batch_kwargs: dict[str, Any] = {} if synchronous is None else {"synchronous": synchronous}
        self._folder = RunFolder(save_dir, experiment_name)
        self._client: MlflowClient | None = None
        self._active = False  # the run's status is RUNNING (set back after finalize when logging goes on)
        self._continued = False  # the run existed before: its params may be logged already
        self._params: dict[str, str] = {}  # sent when the run starts
        self._row = StepBuffer(self._send)
        self._keys: dict[str, str] = {}  # logged name -> MLflow metric key
        self._checkpoint_callback: ModelCheckpoint | None = None
        self._logged_checkpoints: dict[str, float] = {}  # path -> modification time when logged
        self._flush_at_exit = FlushAtExit()
        self._failed = False  # the local store was deleted: reported once, nothing more is sent

    # ---- Lightning's properties -----------------------------------------------------------------------
    @property
    def experiment(self) -> MlflowClient:
        """The ``MlflowClient``, with the run started; on ranks other than zero, an object that does nothing."""
        if not self._ensure_run(reopen=False):
            return _NoExperiment()  # type: ignore[return-value]
        assert self._client is not None
        return self._client

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id (the run starts here on rank zero; None on the other ranks, unless given)."""
        self._ensure_run(reopen=False)
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        self._ensure_run(reopen=False)
        return self._experiment_id

    @property
    @override
    def name(self) -> str | None:
        """The experiment's id, as in Lightning."""
        return self.experiment_id

    @property
    @override
    def version(self) -> str | None:
        """The run's id, as in Lightning."""
        return self.run_id

    @property
    def save_dir(self) -> str:
        """The local folder: checkpoints and, with the default store, the SQLite file and the artifacts."""
        return self._save_dir

    @property
    @override
    def log_dir(self) -> str:
        """``<save_dir>/<experiment_name>/version_<n>``, known without starting the run."""
        return self._folder.path

    # ---- logging ------------------------------------------------------------------------------------
    @override
    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        """Flattened (``a/b``), as text cut to 250 characters; sent when the run starts."""
        flat = _flatten(sanitize_hparams(hparams_dict(params)))
        cut = sorted(key for key, value in flat.items() if len(value) > PARAM_VALUE_LIMIT)
        if cut:
            warnings.warn(
                f"MLFlowLogger: hyper-parameter(s) {cut} are longer than MLflow's {PARAM_VALUE_LIMIT} characters "
                "and were cut; the checkpoint keeps them whole.",
                stacklevel=2,
            )
        self._params.update({key: value[:PARAM_VALUE_LIMIT] for key, value in flat.items()})

    @override
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Buffered until the step's batch is sent (no step: step 0, as in Lightning); text values are left out
        with a warning, as in Lightning."""
        values = {}
        for name, value in metrics.items():
            if isinstance(value, str):
                warnings.warn(f"MLFlowLogger: metric {name}={value!r} is text, not a number; not logged.", stacklevel=2)
                continue
            values[self._key(name)] = float(value)
        if values and self._ensure_run():
            self._row.add(0 if step is None else step, values)

    @override
    def flush(self) -> None:
        """Send pending hyper-parameters and the buffered step; nothing when nothing is pending."""
        if self._params and self._ensure_run():
            self._send_params()
        self._row.flush()

    @override
    def finalize(self, status: str) -> None:
        """Flush, log the checkpoints (``log_model=True``), and end the run: FINISHED, FAILED or KILLED."""
        if status not in STATUS:
            raise ValueError(f"MLFlowLogger.finalize(status={status!r}): use one of {sorted(STATUS)}.")
        if self._failed:
            self._flush_at_exit.unregister()
            return
        if self._client is None and not self._params and self._row.step is None:
            return  # nothing was logged: no run to end
        try:
            self.flush()
            if self._checkpoint_callback is not None:
                self._log_checkpoints(self._checkpoint_callback)
        finally:
            self._end(STATUS[status])

    @override
    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Lightning's rule: every checkpoint now with ``"all"`` (or ``True`` and ``save_top_k == -1``),
        else with ``True`` the ones kept at the end of the run."""
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callback = checkpoint_callback

    @override
    def state_dict(self) -> dict[str, Any]:
        """Sends what is pending first (only rank zero has any), so the checkpointed steps are in the run."""
        self.flush()
        return {"run_id": self._run_id, "version": self._folder.version}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the checkpointed run, in the same folder; call it before logging anything."""
        self._folder.version = state["version"]
        run_id = state.get("run_id")
        if run_id is None or run_id == self._run_id:
            return
        if self._client is not None:
            warnings.warn(f"MLflow run {self._run_id} already started; not switching to {run_id}", stacklevel=2)
            return
        if self._given_run_id is not None:
            warnings.warn(
                f"MLFlowLogger(run_id={self._given_run_id!r}): the checkpoint continues run {run_id!r}, "
                "which is used instead.",
                stacklevel=2,
            )
        self._run_id = run_id

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the client (it holds the store's connections): unpickled, the logger continues the
        same run by its id."""
        self.flush()
        state = self.__dict__.copy()
        state.update(_client=None, _active=False, _flush_at_exit=FlushAtExit())
        return state

    # ---- the run ------------------------------------------------------------------------------------
    def _ensure_run(self, reopen: bool = True) -> bool:
        """Start the run (``reopen``: or mark it RUNNING again after ``finalize``, to log more); False on ranks
        other than zero. Reading ``experiment`` or ``run_id`` after ``finalize`` does not reopen the run."""
        if self._failed:
            return False
        if self._active or (self._client is not None and not reopen):
            return True
        if _global_rank() != 0:
            return False
        if self._client is None:
            self._client = self._start()
        else:
            assert self._run_id is not None
            self._client.update_run(self._run_id, status="RUNNING")
        self._active = True
        self._flush_at_exit.register(self.flush)
        return True

    def _start(self) -> MlflowClient:
        """The client, with the run created or continued; a local store is created by one run at a time."""
        if not self._local_store:
            return self._start_run()
        with store_lock(self._local_root):
            return self._start_run()

    def _start_run(self) -> MlflowClient:
        from mlflow.tracking import MlflowClient  # 1-2 s, once: never at import or construction

        client = MlflowClient(self._tracking_uri)
        tags = self._run_tags()
        if self._run_id is not None:  # an existing run: RUNNING again, given tags and name applied
            self._experiment_id = continue_run(client, self._run_id, tags, self._batch_kwargs)
            self._continued = True
            return client
        location = self._artifact_location
        if location is None and self._local_store:
            location = (self._local_root / "mlartifacts").as_uri()
        self._experiment_id = experiment_id(client, self._experiment_name, location, self._artifact_location)
        self._run_id = new_run(client, self._experiment_id, tags)
        return client

    def _run_tags(self) -> dict[str, str]:
        from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

        tags = {str(key): str(value) for key, value in (self.tags or {}).items()}
        if self._run_name is not None:
            if tags.get(MLFLOW_RUN_NAME, self._run_name) != self._run_name:
                warnings.warn(f"tag {MLFLOW_RUN_NAME} is replaced by run_name={self._run_name!r}", stacklevel=4)
            tags[MLFLOW_RUN_NAME] = self._run_name
        return tags

    def _end(self, status: str) -> None:
        if self._active and self._client is not None and self._run_id is not None:
            self._client.set_terminated(self._run_id, status)  # waits for asynchronous logging (synchronous=False)
        self._active = False
        self._flush_at_exit.unregister()

    # ---- what is sent -------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        """The metric's MLflow key: prefixed, and without the characters MLflow refuses (warned once)."""
        key = self._keys.get(name)
        if key is None:
            key = f"{self._prefix}{self.LOGGER_JOIN_CHAR}{name}" if self._prefix else name
            clean = _NOT_IN_KEYS.sub("", key)
            if clean != key:
                warnings.warn(
                    f"MLflow allows only letters, digits, '_', '/', '.', '-' and ' ' in metric names: "
                    f"{key!r} is logged as {clean!r}.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            key = self._keys[name] = clean
        return key

    def _check_store(self) -> None:
        """Before each batch: a local store that vanished fails the run in one line, not in SQLAlchemy's words."""
        store = store_path(self._tracking_uri)
        if store is not None and not store.exists():
            self._failed, self._params, self._row.values = True, {}, {}
            raise store_deleted(store, self._run_id)

    def _send(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        assert self._client is not None and self._run_id is not None
        self._check_store()
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in values.items()]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            batch = metrics[start : start + METRICS_PER_BATCH]
            self._client.log_batch(self._run_id, metrics=batch, **self._batch_kwargs)

    def _send_params(self) -> None:
        """MLflow refuses to change a logged param: a continued run skips those it has, warning if one changed."""
        from mlflow.entities import Param

        assert self._client is not None and self._run_id is not None
        self._check_store()
        params, self._params = self._params, {}
        if self._continued:
            logged = self._client.get_run(self._run_id).data.params
            changed = sorted(key for key, value in params.items() if logged.get(key, value) != value)
            if changed:
                warnings.warn(
                    f"MLflow run {self._run_id} keeps its logged values of {changed}: MLflow cannot change a param.",
                    stacklevel=3,
                )
            params = {key: value for key, value in params.items() if key not in logged}
        entries = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(entries), PARAMS_PER_BATCH):
            batch = entries[start : start + PARAMS_PER_BATCH]
            self._client.log_batch(self._run_id, params=batch, **self._batch_kwargs)

    def _log_checkpoints(self, callback: ModelCheckpoint) -> None:
        """The callback's checkpoints not logged yet (or rewritten since), oldest first, as Lightning does."""
        if not self._ensure_run():
            return
        assert self._client is not None and self._run_id is not None
        for mtime, path in unlogged_checkpoints(callback, self._logged_checkpoints):
            upload_checkpoint(self._client, self._run_id, callback, path)
            self._logged_checkpoints[path] = mtime


def _flatten(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` as ``{"a/b": "1"}``: MLflow params are flat text."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, name))
        else:
            flat[name] = str(value)
    return flat
