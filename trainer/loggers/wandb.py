"""Weights & Biases: wandb is imported and the run started on first use, so neither costs anything before."""

from __future__ import annotations

import contextlib
import os
import secrets
import string
import warnings
from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import override

from trainer.exceptions import MisconfigurationException
from trainer.loggers.base import (
    FlushAtExit,
    Logger,
    StepBuffer,
    add_prefix,
    hparams_dict,
    sanitize_hparams,
    to_image_array,
)
from trainer.loggers.checkpoints import checkpoint_aliases, checkpoint_metadata, unlogged_checkpoints
from trainer.loggers.folder import global_rank
from trainer.loggers.wandb_media import (
    download_artifact,
    histogram,
    import_wandb,
    offline_file_gone,
    per_item,
    snapshot,
    wandb_masks,
)

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

    from trainer.callbacks.checkpoint import ModelCheckpoint

STEP_METRIC = "trainer/global_step"


def _new_run_id() -> str:
    """A wandb-style id (8 lowercase letters and digits) made without importing wandb."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


class WandbLogger(Logger):
    """Logs to a wandb run, with Lightning's arguments; ``offline=True`` (or ``WANDB_MODE=offline``) writes a folder
    for ``wandb sync``. ``project`` defaults to ``WANDB_PROJECT``, else ``lightning_logs``, as in Lightning;
    ``version`` is ``id``; keyword arguments not listed (``entity``, ``tags``, ``group``, ...) go to ``wandb.init``;
    ``config`` is sent as the run's config.

    Every value is logged with ``trainer/global_step`` as its x-axis (``define_metric``) rather than
    ``step=``: wandb drops rows whose ``step`` goes backwards, which a resume from an older checkpoint
    does, and an offline resume restarts wandb's own step at 0.

    What is logged at one step (metrics, media, histograms) is sent as one ``wandb.log`` call, as a
    hand-written script sends one dict: each call costs ~0.5 ms, a step with 128 histograms would
    otherwise pay it 128 times. The row leaves when another step is logged, on ``flush``, at a
    checkpoint (``state_dict``), at ``finalize``, or when the process exits normally. What is logged
    without a step leaves at once, in a row of its own (wandb's own step), as in Lightning.

    ``log_model``: ``True`` uploads the checkpoints ``ModelCheckpoint`` keeps when the run ends successfully
    (each as it is saved with ``save_top_k=-1``), ``"all"`` each checkpoint as it is saved: one ``model``
    artifact version per file (``model.ckpt``, named ``checkpoint_name`` or ``model-<run id>``), with its score
    and the callback's settings, aliased ``latest`` (and ``best``), as Lightning's.
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] | None = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Run | None = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        **kwargs: Any,
    ) -> None:
        if log_model not in (True, False, "all"):
            raise MisconfigurationException(f"WandbLogger(log_model={log_model!r}): use True, False or 'all'.")
        if add_file_policy not in ("mutable", "immutable"):
            raise MisconfigurationException(
                f"WandbLogger(add_file_policy={add_file_policy!r}): use 'mutable' (copied when logged) or "
                "'immutable' (referenced: the file must not change until it is uploaded)."
            )
        if version is not None and id is not None and version != id:
            raise MisconfigurationException(f"WandbLogger(version={version!r}, id={id!r}): the same thing; give one.")
        folder = save_dir if save_dir is not None else dir
        self._save_dir = os.fspath(folder) if folder is not None else "."
        self._project = project or os.environ.get("WANDB_PROJECT", "lightning_logs")
        self._run_name = name
        self._offline = offline
        self._log_model = log_model
        self._prefix = prefix
        self._checkpoint_name = checkpoint_name
        self.add_file_policy = add_file_policy
        self._anonymous = anonymous
        self._config = sanitize_hparams(kwargs.pop("config", None) or {})
        given = version or id or os.environ.get("WANDB_RUN_ID")
        self._id = given or _new_run_id()
        self._id_made_here = not given  # its folder is claimed (see log_dir)
        self._claimed: str | None = None
        self._init_kwargs = kwargs
        self._sync_tensorboard = bool(kwargs.get("sync_tensorboard"))
        self._run: Run | None = experiment
        self._unsent = bool(self._config)  # hyper-parameters waiting for the run to start
        self._row = StepBuffer(self._send)
        self._flush_at_exit = FlushAtExit()
        self._checkpoint_callbacks: dict[int, ModelCheckpoint] = {}  # log_model=True: uploaded at the end
        self._logged_checkpoints: dict[str, float] = {}  # path -> modification time when uploaded

    @property
    def experiment(self) -> Run:
        """The wandb run, started on first use."""
        if self._run is None:
            self._run = self._start()
        return self._run

    @property
    @override
    def name(self) -> str:
        """The wandb project, as in Lightning."""
        return self._project

    @property
    @override
    def version(self) -> str:
        """The run's id, as in Lightning."""
        return self.id

    @property
    def id(self) -> str:
        return str(self._run.id) if self._run is not None else self._id

    @property
    @override
    def save_dir(self) -> str:
        return self._save_dir

    @property
    @override
    def log_dir(self) -> str:
        """``<save_dir>/<project>/<run id>``, known before the run starts (the id is made here).

        On global rank zero the folder of an id made here is claimed when first asked for (``os.mkdir``, which
        fails when it exists; then another id is drawn), so two runs never share it, as ``version_<n>``."""
        if self._id_made_here and self._claimed is None and self._run is None and global_rank() == 0:
            self._claimed = self._claim_folder()
        return os.path.join(self._save_dir, self._project, self.id)

    def _claim_folder(self) -> str:
        parent = os.path.join(self._save_dir, self._project)
        os.makedirs(parent, exist_ok=True)
        while True:
            try:
                os.mkdir(os.path.join(parent, self._id))
                return os.path.join(parent, self._id)
            except FileExistsError:
                self._id = _new_run_id()

    @override
    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        """Sent when the run starts, so a ``load_state_dict`` that comes later still picks the run."""
        params = sanitize_hparams(hparams_dict(params))
        self._config.update(params)
        self._unsent = self._run is None
        if self._run is not None:
            self._run.config.update(params, allow_val_change=True)

    @override
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Buffered until the step's row is sent (without a step: sent now); one-element tensors are read now,
        so that later in-place updates cannot change what is logged."""
        self._add(step, {key: snapshot(value) for key, value in metrics.items()})

    def log_table(
        self,
        key: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """A ``wandb.Table`` from ``columns`` and ``data`` rows, or from a pandas ``dataframe``."""
        self._add(step, {key: import_wandb().Table(columns=columns, data=data, dataframe=dataframe)})

    def log_text(
        self,
        key: str,
        columns: list[str] | None = None,
        data: list[list[str]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """Text samples, as a ``wandb.Table`` (Lightning's)."""
        self.log_table(key, columns, data, dataframe, step)

    @override
    def log_image(
        self,
        key: str,
        images: list[Any],
        step: int | None = None,
        class_labels: dict[int, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Images (CHW tensors, arrays, PIL images or files), with Lightning's keyword arguments: one list per
        argument, an item per image (``caption=[...]``, ``masks=[...]``, ``boxes=[...]``). A mask is a 2D array
        of class ids or wandb's ``{"mask_data": ..., "class_labels": ...}``, per image a dict such as
        ``{"predictions": mask, "ground_truth": mask}``; ``class_labels`` names the ids of every mask."""
        wandb = import_wandb()
        logged = []
        for image, extra in zip(images, per_item("images", images, kwargs), strict=True):
            if "masks" in extra:
                extra["masks"] = wandb_masks(extra["masks"], class_labels)
            logged.append(wandb.Image(to_image_array(image) if hasattr(image, "detach") else image, **extra))
        self._add(step, {key: logged})

    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Audio (arrays or files), with per-item keyword arguments for ``wandb.Audio`` (``sample_rate=[...]``)."""
        audio = import_wandb().Audio
        self._add(step, {key: [audio(a, **extra) for a, extra in zip(audios, per_item("audios", audios, kwargs))]})

    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Videos (arrays or files), with per-item keyword arguments for ``wandb.Video`` (``fps=[...]``)."""
        video = import_wandb().Video
        self._add(step, {key: [video(v, **extra) for v, extra in zip(videos, per_item("videos", videos, kwargs))]})

    @override
    def log_histogram(self, key: str, values: Any, step: int) -> None:
        """Binned now, in ``wandb.Histogram``'s 64 bins, and sent with the step's row; NaN and inf are left out."""
        counts = histogram(values)
        if counts is not None:
            self._add(step, {key: import_wandb().Histogram(np_histogram=counts)})

    def watch(
        self,
        model: Any,
        log: Literal["gradients", "parameters", "all"] | None = "gradients",
        log_freq: int = 100,
        log_graph: bool = True,
    ) -> None:
        """wandb's ``watch``: the model's gradients (and/or parameters) every ``log_freq`` steps."""
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    def use_artifact(self, artifact: str, artifact_type: str | None = None) -> Any:
        """An artifact this run uses (recorded as its input); ``.download()`` fetches its files."""
        return self.experiment.use_artifact(artifact, type=artifact_type)

    download_artifact = staticmethod(download_artifact)

    @override
    def start_early(self) -> None:
        """With ``sync_tensorboard``, the run starts before any logger writes: wandb copies the event files only of
        TensorBoard writers made after ``wandb.init`` (Lightning starts it first for the same reason)."""
        if self._sync_tensorboard and self._run is None:
            self._run = self._start()

    @override
    def flush(self) -> None:
        """Send the buffered step's row (one ``wandb.log`` call); nothing when nothing is buffered."""
        self._row.flush()

    @override
    def finalize(self, status: str) -> None:
        """Send the last row, upload the kept checkpoints (``log_model=True``, after a successful run), and finish
        the run. Offline, wandb's service completes the run folder shortly after this returns (at the latest by
        ``wandb.teardown()`` or process exit), before ``wandb sync`` can upload it.
        """
        if self._run is None and not self._unsent:
            return
        try:
            self.flush()
            if status == "success":
                for callback in self._checkpoint_callbacks.values():
                    self._upload_checkpoints(callback)
        finally:
            self.experiment.finish(exit_code=0 if status == "success" else 1)
            self._run = None
            self._flush_at_exit.unregister()

    @override
    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Lightning's rule: every checkpoint now with ``"all"`` (or ``True`` and ``save_top_k == -1``), else with
        ``True`` the ones kept at the end of the run."""
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._upload_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callbacks[id(checkpoint_callback)] = checkpoint_callback

    @override
    def state_dict(self) -> dict[str, Any]:
        """Sends the buffered row first: a resume restarts from this checkpoint, so its steps must be in the run."""
        self.flush()
        return {"id": self.id, "project": self._project}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the checkpointed run (``resume="allow"``); call it before logging anything."""
        if self._run is not None and self._run.id != state["id"]:
            warnings.warn(f"wandb run {self._run.id} already started; not switching to {state['id']}", stacklevel=2)
            return
        if self._claimed is not None and state["id"] != self._id:  # the resumed run's folder, not a new one
            with contextlib.suppress(OSError):
                os.rmdir(self._claimed)  # only if nothing was written there
        self._id, self._id_made_here = state["id"], False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the run (it holds wandb's connection): unpickled, the logger continues the same run by
        its id (``resume="allow"``)."""
        self.flush()
        state = self.__dict__.copy()
        state.update(_id=self.id, _run=None, _flush_at_exit=FlushAtExit(), _unsent=bool(self._config))
        return state

    def _start(self) -> Run:
        wandb = import_wandb()
        os.makedirs(self._save_dir, exist_ok=True)
        if wandb.run is not None:
            warnings.warn(
                "There is a wandb run already in progress and newly created instances of `WandbLogger` will reuse "
                "this run. If this is not desired, call `wandb.finish()` before instantiating `WandbLogger`.",
                stacklevel=3,
            )
            run = wandb.run
        else:
            run = wandb.init(**self._init_args())
            if self._sync_tensorboard:  # TensorBoard's own step is the x-axis
                run.define_metric("*", step_metric="global_step")
            else:
                run.define_metric(STEP_METRIC)
                run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
        if self._config:
            run.config.update(self._config, allow_val_change=True)
        self._unsent = False
        self._id = run.id
        # Registered after wandb.init, so it runs before wandb's own exit hook closes the run.
        self._flush_at_exit.register(self.flush)
        return run

    def _add(self, step: int | None, values: dict[str, Any]) -> None:
        """Buffer ``values`` in the step's row (with no step: flush, then send them now); starts the run on first
        use, so a missing wandb or a failing ``wandb.init`` is reported by the call that logged, not by a later
        flush."""
        if self._run is None:
            self._run = self._start()
        values = add_prefix(values, self._prefix, self.LOGGER_JOIN_CHAR)
        if step is None:
            self._row.flush()
            self._run.log(values)
        else:
            self._row.add(step, values)

    def _send(self, step: int, values: dict[str, Any]) -> None:
        gone = offline_file_gone(self._run)
        if gone is not None:
            raise gone
        self.experiment.log(values if self._sync_tensorboard else {**values, STEP_METRIC: step})

    def _init_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "name": self._run_name,
            "project": self._project,
            "dir": self._save_dir,
            "id": self._id,
            "resume": "allow",
            "anonymous": "allow" if self._anonymous else None,
        }
        if self._offline or os.environ.get("WANDB_MODE") in ("offline", "dryrun"):
            args["mode"] = "offline"
        return {**args, **self._init_kwargs}

    def _upload_checkpoints(self, callback: ModelCheckpoint) -> None:
        """The callback's checkpoints not uploaded yet (or rewritten since), oldest first, each as a version of the
        run's ``model`` artifact holding ``model.ckpt``, as Lightning's (a sharded checkpoint: its folder)."""
        wandb = import_wandb()
        for mtime, path in unlogged_checkpoints(callback, self._logged_checkpoints):
            metadata = checkpoint_metadata(callback, path, type(callback).__name__)
            name = self._checkpoint_name or f"model-{self.id}"
            artifact = wandb.Artifact(name=name, type="model", metadata=metadata)
            if os.path.isdir(path):
                from trainer.checkpoint.sharded import wait_pending

                wait_pending()
                artifact.add_dir(path, name="model.ckpt", policy=self.add_file_policy)
            else:
                artifact.add_file(path, name="model.ckpt", policy=self.add_file_policy)
            self.experiment.log_artifact(artifact, aliases=checkpoint_aliases(callback, path))
            self._logged_checkpoints[path] = mtime
