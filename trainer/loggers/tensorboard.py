"""TensorBoard event files; ``torch.utils.tensorboard`` (or ``tensorboardX``) is imported on first write (it is slow
to import)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from trainer.exceptions import MisconfigurationException
from trainer.loggers.base import (
    FlushAtExit,
    StepBuffer,
    add_prefix,
    disk_error,
    finite_values,
    hparams_dict,
    sanitize_hparams,
    to_image_array,
)
from trainer.loggers.dummy import DummyExperiment, on_global_zero
from trainer.loggers.folder import FolderLogger, RunFolder

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


@functools.cache
def _backend() -> str:
    """``torch.utils.tensorboard`` where tensorboard is installed, else ``tensorboardX`` (Lightning's rule), checked
    once per process (the check costs ~2 ms)."""
    from lightning_utilities.core.imports import RequirementCache

    if RequirementCache("tensorboard"):
        return "torch.utils.tensorboard"
    if RequirementCache("tensorboardX"):
        return "tensorboardX"
    raise ImportError("TensorBoardLogger needs tensorboard (or tensorboardX): pip install steadytrain[tensorboard]")


def _tensorboard() -> Any:
    """The writer's module, with its ``summary`` module: imported on first use, looked up at each (a test may
    replace ``SummaryWriter`` on it)."""
    module = importlib.import_module(_backend())
    importlib.import_module(f"{module.__name__}.summary")
    return module


class TensorBoardLogger(FolderLogger):
    """Writes event files to ``<save_dir>/<name>/version_<n>[/<sub_dir>]``, the CSV logger's layout, with
    Lightning's arguments: ``log_graph`` (the module's graph at fit start, traced on its
    ``example_input_array``), ``default_hp_metric`` (``hp_metric`` -1 beside the hyper-parameters), ``prefix``
    (``<prefix>-<name>``), ``sub_dir``, and keyword arguments for the ``SummaryWriter`` (``flush_secs``,
    ``max_queue``). Written with tensorboard, else with tensorboardX, as in Lightning.

    A resumed run reopens the same folder with ``purge_step``, so TensorBoard hides what the crashed
    run logged after its last checkpoint instead of drawing those steps twice.

    What is logged at one step goes to the writer as one event (a summary with every value), sent
    when another step is logged, on ``flush``, at a checkpoint, at ``finalize`` or at a normal
    exit: each event is a hand-off to the writer's thread, ~0.2 ms, which one event per scalar paid
    for every key.

    An event file deleted while the run logs to it (a cleanup job, ``rm -r`` of the run folder) is
    started anew in the same folder, hyper-parameters first, with a warning: TensorBoard reads every
    event file of a folder, so the steps logged from then on are shown with the run's.
    """

    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(
        self,
        save_dir: str | os.PathLike[str] = "runs",
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        for flag, value in (("log_graph", log_graph), ("default_hp_metric", default_hp_metric)):
            if not isinstance(value, bool):
                raise MisconfigurationException(f"TensorBoardLogger({flag}={value!r}): True or False.")
        if "log_dir" in kwargs or "purge_step" in kwargs:
            bad = "log_dir" if "log_dir" in kwargs else "purge_step"
            raise MisconfigurationException(
                f"TensorBoardLogger({bad}=...): the logger sets the SummaryWriter's {bad} itself (the run's folder; "
                "a resumed run's first step). Pass save_dir, name, version or sub_dir instead."
            )
        self._name = name or ""
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._folder = RunFolder(os.fspath(save_dir), self._name, version)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._kwargs = kwargs  # for the SummaryWriter
        self._writer: SummaryWriter | None = None
        self._hparams: tuple[dict[str, Any], dict[str, Any] | None, int] | None = None  # logged, not written yet
        self.hparams: dict[str, Any] = {}  # every one logged, for hparams.yaml (Lightning's attribute)
        self._last_step: int | None = None
        self._purge_step: int | None = None
        self._event = StepBuffer(self._write_event)  # tag -> one summary value
        self._flush_at_exit = FlushAtExit()
        self._failed = False  # a write failed (a full disk): reported once, nothing more is written

    @property
    @override
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    def experiment(self) -> SummaryWriter:
        """The ``SummaryWriter``, opened on first use; on the other ranks one that does nothing (Lightning's
        ``rank_zero_experiment``), so ``self.logger.experiment.add_image(...)`` in a step writes once."""
        if not on_global_zero() or self._failed:
            return DummyExperiment()  # type: ignore[return-value]
        if self._writer is None:
            log_dir = self.log_dir  # picks the run folder, which says itself why it cannot
            with self._disk_writes():
                writer = _tensorboard().SummaryWriter
                self._writer = writer(log_dir=log_dir, purge_step=self._purge_step, **self._kwargs)
            self._write_hparams()  # first in the file, as Lightning writes them at the start of fit
        return self._writer

    @override
    def log_hyperparams(
        self, params: Any = None, metrics: dict[str, Any] | float | None = None, step: int | None = None
    ) -> None:
        """Written now, as Lightning writes them: to ``hparams.yaml``, and to the HPARAMS tab with ``metrics``
        (a number is ``hp_metric``), or ``hp_metric`` -1 when none are given and ``default_hp_metric``; without
        either, TensorBoard gets nothing (Lightning's rule)."""
        if not on_global_zero():
            return
        params = sanitize_hparams(hparams_dict(params))
        self.hparams.update(params)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else None
        elif not isinstance(metrics, dict):
            metrics = {"hp_metric": metrics}
        if metrics:
            self._hparams = (params, metrics, 0 if step is None else step)
            self._write_hparams()  # opens the writer, which writes them first
        self._write_hparams_yaml(always=True)

    @override
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Scalars at ``step`` (None: 0); a dict value is ``add_scalars``' group of lines, written now."""
        step = 0 if step is None else step
        summary = _tensorboard().summary
        values = {}
        for key, value in add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, dict):
                self.experiment.add_scalars(key, value, step)
                continue
            try:
                values[key] = summary.scalar(key, float(value)).value[0]
            except (TypeError, ValueError, RuntimeError) as err:
                raise ValueError(
                    f"TensorBoardLogger: {key}={value!r} is not a number; log a number, a one-element tensor or a "
                    "dict of them."
                ) from err
        self._add(step, values)
        self._last_step = step

    @override
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """The module's graph (``add_graph``), traced on ``input_array`` or its ``example_input_array`` moved as a
        batch is (its transfer hooks); with ``log_graph=True`` only, as in Lightning, which the Trainer calls at
        fit start. An input that cannot be traced is skipped with Lightning's warning."""
        if not self._log_graph or not on_global_zero():
            return
        example = getattr(model, "example_input_array", None) if input_array is None else input_array
        if example is None:
            warnings.warn(
                "Could not log computational graph to TensorBoard: The `model.example_input_array` attribute is not "
                "set or `input_array` was not given.",
                stacklevel=2,
            )
            return
        if not isinstance(example, torch.Tensor | tuple):
            warnings.warn(
                "Could not log computational graph to TensorBoard: The `input_array` or `model.example_input_array` "
                f"has type {type(example)} which can't be traced by TensorBoard. Make the input array a tuple "
                "representing the positional arguments to the model's `forward()` implementation.",
                stacklevel=2,
            )
            return
        if callable(getattr(model, "transfer_batch_to_device", None)):
            example = model.on_before_batch_transfer(example, 0)
            example = model.transfer_batch_to_device(example, model.device, 0)
            example = model.on_after_batch_transfer(example, 0)
        self.flush()  # the graph after what was logged before it
        owner = next((cls for cls in type(model).__mro__ if "_scripting" in vars(cls)), None)  # steadytrain's Module
        if owner is not None:  # tracing reads every attribute: `trainer` of a module not fitted yet reads None
            setattr(owner, "_scripting", True)  # noqa: B010
        try:
            self.experiment.add_graph(model, example)
        finally:
            if owner is not None:
                setattr(owner, "_scripting", False)  # noqa: B010

    @override
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Encoded now (PNG), sent with the step's event; one image is ``key``, several ``key/<i>``."""
        summary = _tensorboard().summary
        encoded = {}
        for i, image in enumerate(images):
            array = to_image_array(image)
            tag = key if len(images) == 1 else f"{key}/{i}"
            encoded[tag] = summary.image(tag, array, dataformats="HW" if array.ndim == 2 else "HWC").value[0]
        self._add(0 if step is None else step, encoded)

    @override
    def log_histogram(self, key: str, values: Any, step: int) -> None:
        """Binned now, with ``add_histogram``'s default bins; sent with the step's event."""
        values = finite_values(values)
        if values.size and not self._failed:
            bins = self.experiment.default_bins
            self._add(step, {key: _tensorboard().summary.histogram(key, values, bins).value[0]})

    @override
    def flush(self) -> None:
        """Hand the buffered step to the writer as one event; its thread writes it to disk within
        ``flush_secs`` (checkpoints, ``finalize`` and exit force that)."""
        self._event.flush()

    @override
    def finalize(self, status: str) -> None:
        """Flush and close the writer; after a successful run, an ``hparams.yaml`` (empty when none were logged)
        in a run folder that exists, as Lightning's."""
        self.flush()
        self._write_hparams()
        if status == "success":
            self._write_hparams_yaml(always=False)
        if self._writer is not None:
            with self._disk_writes():
                self._writer.flush()
                self._writer.close()
            self._writer = None
        self._flush_at_exit.unregister()

    @override
    def state_dict(self) -> dict[str, Any]:
        """On disk first: a resume purges from the step after this one."""
        self._flush_to_disk()
        return {"version": self.version, "step": self._last_step}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue in the checkpointed run's folder; call it before logging metrics. Hyper-parameters logged
        before are written there again."""
        moved = self._folder.picked and state["version"] != self._folder.version
        if moved and self._writer is not None:
            self._flush_to_disk()
            self._writer.close()
            self._writer = None
        if moved and self.hparams:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE))
            self._hparams = (dict(self.hparams), {"hp_metric": -1} if self._default_hp_metric else None, 0)
        self._folder.version = state["version"]
        if moved and self.hparams:
            self._write_hparams_yaml(always=True)
        step = state.get("step")
        self._purge_step = None if step is None else step + 1

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the writer (it holds a thread), as Lightning's: reopened on first use."""
        self.flush()
        state = self.__dict__.copy()
        state["_writer"] = None
        state["_flush_at_exit"] = FlushAtExit()
        return state

    def _add(self, step: int, values: dict[str, Any]) -> None:
        self._flush_at_exit.register(self._flush_to_disk)
        self._event.add(step, values)

    def _write_event(self, step: int, values: dict[str, Any]) -> None:
        self._start_again_if_deleted(step)
        writer = self.experiment
        if not self._failed:
            event = _tensorboard().summary.Summary(value=list(values.values()))  # tensorboard's or tensorboardX's
            with self._disk_writes():
                writer._get_file_writer().add_summary(event, step)

    def _flush_to_disk(self) -> None:
        self.flush()
        self._start_again_if_deleted(self._last_step)
        if self._writer is not None:
            with self._disk_writes():
                self._writer.flush()

    def _start_again_if_deleted(self, step: int | None) -> None:
        """The open event file was deleted: drop its writer (what it still held is lost with the file) and let
        the next write open a new one, with the hyper-parameters first."""
        if self._writer is None or self._failed or os.path.exists(self._event_file()):
            return
        warnings.warn(
            f"TensorBoardLogger: {self._event_file()} was deleted while this run logged to it (a cleanup job? rm -r "
            f"of the run folder?); a new event file is started in {self.log_dir} from step {step} on. What was "
            "logged before is gone with the deleted file.",
            stacklevel=2,
        )
        writer, self._writer = self._writer, None
        with contextlib.suppress(Exception):  # its thread fails to write into the vanished folder
            writer.close()
        if self.hparams and self._hparams is None:  # the new event file starts with them, as the first did
            self._hparams = (dict(self.hparams), {"hp_metric": -1} if self._default_hp_metric else None, 0)
        self._purge_step = None  # a resume's purge was for the deleted file

    def _event_file(self) -> str:
        """The event file the writer appends to (the folder, where tensorboard keeps the name to itself)."""
        event_writer = getattr(getattr(self._writer, "file_writer", None), "event_writer", None)
        return str(getattr(event_writer, "_file_name", None) or self.log_dir)

    @contextlib.contextmanager
    def _disk_writes(self) -> Iterator[None]:
        """An ``OSError`` from the writer or its thread, reported once with the folder and the free space.

        The writer's thread re-raises its error on every later call, so the writer is dropped unclosed
        and nothing more is written: ``finalize`` and the exit hook do not fail on it again.
        """
        try:
            yield
        except OSError as err:
            self._failed, self._writer, self._event.values = True, None, {}
            raise OSError(err.errno, disk_error(os.path.join(self.log_dir, "events.out.tfevents.*"), err)) from err

    def _write_hparams(self) -> None:
        """The logged hyper-parameters as Lightning writes them: their metrics (``hp_metric``) and the HParams
        plugin's summaries at their step (shown in TensorBoard's HPARAMS tab), in this run's event file."""
        pending, self._hparams = self._hparams, None  # taken first: opening the writer calls this again
        if pending is None:
            return
        params, metrics, step = pending
        summary = _tensorboard().summary
        experiment = self.experiment
        if self._failed or metrics is None:
            return
        with self._disk_writes():
            writer = experiment._get_file_writer()
            for key, value in metrics.items():
                writer.add_summary(summary.scalar(key, float(value)), step)
            for part in summary.hparams(_flat_hparams(params), dict(metrics)):
                writer.add_summary(part, step)

    def _write_hparams_yaml(self, always: bool) -> None:
        """``hparams.yaml`` with every hyper-parameter logged; ``always=False``: only in a run folder that exists
        and has none (a run that never picked its folder has none: asking for ``log_dir`` would claim one)."""
        if not always and not self._folder.picked:
            return
        path = os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)
        if always or (os.path.isdir(self.log_dir) and not os.path.isfile(path)):
            import yaml

            os.makedirs(self.log_dir, exist_ok=True)
            with open(path, "w") as f:
                yaml.safe_dump(self.hparams, f, sort_keys=False)


def _flat_hparams(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``outer/inner`` keys; anything but a number, bool or str as its text (Lightning's rule)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(_flat_hparams(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, bool | int | float | str) else str(value)
    return flat
