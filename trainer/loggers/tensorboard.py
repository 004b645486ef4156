"""TensorBoard event files; ``torch.utils.tensorboard`` is imported on first write (it is slow to import)."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from trainer.loggers.base import (
    FlushAtExit,
    StepBuffer,
    disk_error,
    finite_values,
    sanitize_hparams,
    to_image_array,
)
from trainer.loggers.dummy import DummyExperiment, on_global_zero
from trainer.loggers.folder import FolderLogger, RunFolder

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


@functools.cache
def _tensorboard() -> Any:
    """``torch.utils.tensorboard`` with its ``summary`` module, checked once per process (the check costs ~2 ms)."""
    from lightning_utilities.core.imports import RequirementCache

    if not RequirementCache("tensorboard"):
        raise ImportError("TensorBoardLogger needs tensorboard: pip install steadytrain[tensorboard]")
    import torch.utils.tensorboard
    import torch.utils.tensorboard.summary

    return torch.utils.tensorboard


class TensorBoardLogger(FolderLogger):
    """Writes event files to ``<save_dir>/<name>/version_<n>``, the CSV logger's layout.

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

    def __init__(self, save_dir: str = "runs", name: str = "default", version: int | str | None = None) -> None:
        self.name = name
        self._folder = RunFolder(save_dir, name, version)
        self._writer: SummaryWriter | None = None
        self._hparams: dict[str, Any] | None = None  # logged, not written yet
        self._yaml_hparams: dict[str, Any] = {}  # every one logged, for hparams.yaml
        self._last_step: int | None = None
        self._purge_step: int | None = None
        self._event = StepBuffer(self._write_event)  # tag -> one summary value
        self._flush_at_exit = FlushAtExit()
        self._failed = False  # a write failed (a full disk): reported once, nothing more is written

    @property
    def experiment(self) -> SummaryWriter:
        """The ``SummaryWriter``, opened on first use; on the other ranks one that does nothing (Lightning's
        ``rank_zero_experiment``), so ``self.logger.experiment.add_image(...)`` in a step writes once."""
        if not on_global_zero() or self._failed:
            return DummyExperiment()  # type: ignore[return-value]
        if self._writer is None:
            log_dir = self.log_dir  # picks the run folder, which says itself why it cannot
            with self._disk_writes():
                self._writer = _tensorboard().SummaryWriter(log_dir=log_dir, purge_step=self._purge_step)
            self._write_hparams()  # first in the file, as Lightning writes them at the start of fit
        return self._writer

    @override
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Kept until the first metrics, so a ``load_state_dict`` that comes later still picks the folder."""
        self._hparams = sanitize_hparams(dict(params))

    @override
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._write_hparams()
        summary = _tensorboard().summary
        self._add(step, {key: summary.scalar(key, float(value)).value[0] for key, value in metrics.items()})
        self._last_step = step

    @override
    def log_image(self, key: str, images: list[Any], step: int, **kwargs: Any) -> None:
        """Encoded now (PNG), sent with the step's event; one image is ``key``, several ``key/<i>``."""
        summary = _tensorboard().summary
        encoded = {}
        for i, image in enumerate(images):
            array = to_image_array(image)
            tag = key if len(images) == 1 else f"{key}/{i}"
            encoded[tag] = summary.image(tag, array, dataformats="HW" if array.ndim == 2 else "HWC").value[0]
        self._add(step, encoded)

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
        self.flush()
        self._write_hparams()
        if status == "success":
            self._write_hparams_yaml()
        if self._writer is not None:
            with self._disk_writes():
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
        """Continue in the checkpointed run's folder; call it before logging anything."""
        self._folder.version = state["version"]
        step = state.get("step")
        self._purge_step = None if step is None else step + 1

    def _add(self, step: int, values: dict[str, Any]) -> None:
        self._flush_at_exit.register(self._flush_to_disk)
        self._event.add(step, values)

    def _write_event(self, step: int, values: dict[str, Any]) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._start_again_if_deleted(step)
        writer = self.experiment
        if not self._failed:
            with self._disk_writes():
                writer._get_file_writer().add_summary(Summary(value=list(values.values())), step)

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
        self._hparams = dict(self._yaml_hparams) if self._yaml_hparams else self._hparams
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
        """As Lightning writes them: ``hp_metric`` -1 and the HParams plugin's summaries at step 0 (shown in
        TensorBoard's HPARAMS tab), in this run's event file."""
        params, self._hparams = self._hparams, None  # taken first: opening the writer calls this again
        if params is None:
            return
        summary = _tensorboard().summary
        self._yaml_hparams.update(params)
        experiment = self.experiment
        if self._failed:
            return
        with self._disk_writes():
            writer = experiment._get_file_writer()
            writer.add_summary(summary.scalar("hp_metric", -1.0), 0)
            for part in summary.hparams(_flat_hparams(params), {"hp_metric": -1}):
                writer.add_summary(part, 0)

    def _write_hparams_yaml(self) -> None:
        """``hparams.yaml`` in a run folder that exists (empty when none were logged), as Lightning's; a run
        that never picked its folder has none (asking for ``log_dir`` would claim one)."""
        if not self._folder.picked:
            return
        path = os.path.join(self.log_dir, "hparams.yaml")
        if os.path.isdir(self.log_dir) and not os.path.isfile(path):
            import yaml

            with open(path, "w") as f:
                yaml.safe_dump(self._yaml_hparams, f, sort_keys=False)


def _flat_hparams(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``outer/inner`` keys; anything but a number, bool or str as its text (Lightning's rule)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(_flat_hparams(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, bool | int | float | str) else str(value)
    return flat
