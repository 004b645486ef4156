"""Weights & Biases: wandb is imported and the run started on first use, so neither costs anything before."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import secrets
import string
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np  # already loaded by torch
from typing_extensions import override

from trainer.loggers.base import (
    FlushAtExit,
    Logger,
    StepBuffer,
    finite_values,
    sanitize_hparams,
    to_image_array,
    to_numpy,
)
from trainer.loggers.folder import global_rank

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

STEP_METRIC = "trainer/global_step"
WANDB_BINS = 64  # wandb.Histogram's default


@functools.cache
def _import_wandb() -> Any:
    """wandb, checked once per process: the check (a fresh ``RequirementCache``) costs ~2 ms, and a
    validation that logs 128 histograms would pay it on each. A failure is not cached: it raises again."""
    from lightning_utilities.core.imports import RequirementCache

    if not RequirementCache("wandb"):
        raise ImportError("WandbLogger needs wandb: pip install steadytrain[wandb]")
    import wandb

    return wandb


def _new_run_id() -> str:
    """A wandb-style id (8 lowercase letters and digits) made without importing wandb."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


class WandbLogger(Logger):
    """Logs to a wandb run; ``offline=True`` (or ``WANDB_MODE=offline``) writes a folder for ``wandb sync``.

    Every value is logged with ``trainer/global_step`` as its x-axis (``define_metric``) rather than
    ``step=``: wandb drops rows whose ``step`` goes backwards, which a resume from an older checkpoint
    does, and an offline resume restarts wandb's own step at 0.

    What is logged at one step (metrics, images, histograms) is sent as one ``wandb.log`` call, as a
    hand-written script sends one dict: each call costs ~0.5 ms, a step with 128 histograms would
    otherwise pay it 128 times. The row leaves when another step is logged, on ``flush``, at a
    checkpoint (``state_dict``), at ``finalize``, or when the process exits normally.
    """

    name = "wandb"

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        entity: str | None = None,
        save_dir: str = ".",
        offline: bool = False,
        log_model: bool = False,
        tags: list[str] | None = None,
        config: dict[str, Any] | None = None,
        id: str | None = None,
        **init_kwargs: Any,
    ) -> None:
        self.project = project
        self.save_dir = save_dir
        self.log_model = log_model
        self._run_name = name
        self._entity = entity
        self._offline = offline
        self._tags = tags
        self._config = sanitize_hparams(config or {})
        self._id = id or os.environ.get("WANDB_RUN_ID") or _new_run_id()
        self._id_made_here = not (id or os.environ.get("WANDB_RUN_ID"))  # its folder is claimed (see log_dir)
        self._claimed: str | None = None
        self._init_kwargs = init_kwargs
        self._run: Run | None = None
        self._unsent = bool(self._config)  # hyper-parameters waiting for the run to start
        self._row = StepBuffer(self._send)
        self._flush_at_exit = FlushAtExit()

    @property
    def experiment(self) -> Run:
        """The wandb run, started on first use."""
        if self._run is None:
            self._run = self._start()
        return self._run

    @property
    def id(self) -> str:
        return self._id

    @property
    @override
    def log_dir(self) -> str:
        """``<save_dir>/<project>/<run id>``, known before the run starts (the id is made here).

        On global rank zero the folder of an id made here is claimed when first asked for (``os.mkdir``, which
        fails when it exists; then another id is drawn), so two runs never share it, as ``version_<n>``."""
        if self._id_made_here and self._claimed is None and global_rank() == 0:
            self._claimed = self._claim_folder()
        return os.path.join(self.save_dir, self.project or "steadytrain", self._id)

    def _claim_folder(self) -> str:
        parent = os.path.join(self.save_dir, self.project or "steadytrain")
        os.makedirs(parent, exist_ok=True)
        while True:
            try:
                os.mkdir(os.path.join(parent, self._id))
                return os.path.join(parent, self._id)
            except FileExistsError:
                self._id = _new_run_id()

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Sent when the run starts, so a ``load_state_dict`` that comes later still picks the run."""
        self._config.update(sanitize_hparams(dict(params)))
        self._unsent = self._run is None
        if self._run is not None:
            self._run.config.update(self._config, allow_val_change=True)

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Buffered until the step's row is sent; one-element tensors are read now, so that later
        in-place updates cannot change what is logged."""
        self._add(step, {key: _snapshot(value) for key, value in metrics.items()})

    @override
    def log_image(
        self,
        key: str,
        images: list[Any],
        step: int,
        masks: list[dict[str, Any]] | None = None,
        caption: list[str] | None = None,
        class_labels: dict[int, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Images with optional segmentation masks, one ``{"predictions": mask, "ground_truth": mask}``
        per image; a mask is a 2D array of class ids or wandb's ``{"mask_data": ..., "class_labels": ...}``.
        Other keyword arguments (``boxes``, ``classes``, ``mode``) go to ``wandb.Image``.
        """
        wandb = _import_wandb()
        logged = []
        for i, image in enumerate(images):
            image_masks = _wandb_masks(masks[i], class_labels) if masks else None
            text = caption[i] if caption else None
            logged.append(wandb.Image(to_image_array(image), caption=text, masks=image_masks, **kwargs))
        self._add(step, {key: logged})

    @override
    def log_histogram(self, key: str, values: Any, step: int) -> None:
        """Binned now, in ``wandb.Histogram``'s 64 bins, and sent with the step's row; NaN and inf are left out.

        The range is computed here and handed to ``np.histogram``, which would otherwise compute it
        itself: a finite range means every value is finite, so a diverging run is caught at no cost
        (a separate ``isfinite`` pass added ~5% to each histogram, and a UNet logs 128 of them).
        """
        array = to_numpy(values).reshape(-1)
        if not array.size:
            return
        low, high = array.min(), array.max()
        if not (math.isfinite(low) and math.isfinite(high)):
            array = finite_values(array)
            if not array.size:
                return
            low, high = array.min(), array.max()
        counts = np.histogram(array, bins=WANDB_BINS, range=(low, high))
        self._add(step, {key: _import_wandb().Histogram(np_histogram=counts)})

    @override
    def flush(self) -> None:
        """Send the buffered step's row (one ``wandb.log`` call); nothing when nothing is buffered."""
        self._row.flush()

    @override
    def finalize(self, status: str) -> None:
        """Send the last row and finish the run. Offline, wandb's service completes the run folder shortly
        after this returns (at the latest by ``wandb.teardown()`` or process exit), before ``wandb sync``
        can upload it.
        """
        if self._run is None and not self._unsent:
            return
        try:
            self.flush()
            if self.log_model:
                self._log_checkpoints()
        finally:
            self.experiment.finish(exit_code=0 if status == "success" else 1)
            self._run = None
            self._flush_at_exit.unregister()

    @override
    def state_dict(self) -> dict[str, Any]:
        """Sends the buffered row first: a resume restarts from this checkpoint, so its steps must be in the run."""
        self.flush()
        return {"id": self._id, "project": self.project}

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

    def _start(self) -> Run:
        wandb = _import_wandb()
        os.makedirs(self.save_dir, exist_ok=True)
        run = wandb.run or wandb.init(**self._init_args())
        run.define_metric(STEP_METRIC)
        run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
        if self._config:
            run.config.update(self._config, allow_val_change=True)
        self._unsent = False
        self._id = run.id
        # Registered after wandb.init, so it runs before wandb's own exit hook closes the run.
        self._flush_at_exit.register(self.flush)
        return run

    def _add(self, step: int, values: dict[str, Any]) -> None:
        """Buffer ``values`` in the step's row; starts the run on first use, so a missing wandb or a
        failing ``wandb.init`` is reported by the call that logged, not by a later flush."""
        if self._run is None:
            self._run = self._start()
        self._row.add(step, values)

    def _send(self, step: int, values: dict[str, Any]) -> None:
        self.experiment.log({**values, STEP_METRIC: step})

    def _init_args(self) -> dict[str, Any]:
        offline = self._offline or os.environ.get("WANDB_MODE") in ("offline", "dryrun")
        args: dict[str, Any] = {
            "project": self.project,
            "name": self._run_name,
            "entity": self._entity,
            "dir": self.save_dir,
            "tags": self._tags,
            "id": self._id,
            "resume": "allow",
        }
        if offline:
            args["mode"] = "offline"
        return {**args, **self._init_kwargs}

    def _log_checkpoints(self) -> None:
        """Record ``<log_dir>/checkpoints/*`` as a model artifact (uploaded now, or by ``wandb sync``).

        Files are referenced, not copied (``immutable``): checkpoints can be large; keep them until synced.
        """
        folder = os.path.join(self.log_dir, "checkpoints")
        files = sorted(e.path for e in os.scandir(folder) if e.is_file()) if os.path.isdir(folder) else []
        if not files:
            return
        artifact = _import_wandb().Artifact(f"model-{self._id}", type="model")
        for path in files:
            artifact.add_file(path, policy="immutable")
        self.experiment.log_artifact(artifact, aliases=["latest"])


def _snapshot(value: Any) -> Any:
    """A one-element tensor as a Python number, read now; anything else as it is (wandb converts it)."""
    if isinstance(value, (float, int)):  # what the Trainer sends; hasattr on a float raises inside
        return value
    return value.item() if hasattr(value, "detach") and value.numel() == 1 else value


def _wandb_masks(masks: dict[str, Any], class_labels: dict[int, str] | None) -> dict[str, dict[str, Any]]:
    """Accept bare 2D arrays or tensors as well as wandb's ``{"mask_data": ...}`` dicts."""
    out = {}
    for name, mask in masks.items():
        spec = dict(mask) if isinstance(mask, dict) else {"mask_data": mask}
        spec["mask_data"] = to_numpy(spec["mask_data"])
        if class_labels is not None:
            spec.setdefault("class_labels", class_labels)
        out[name] = spec
    return out
