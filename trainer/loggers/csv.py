"""The default logger: plain files that need nothing installed and open anywhere."""

from __future__ import annotations

import contextlib
import csv
import os
import warnings
from typing import Any, TextIO

from typing_extensions import override

from trainer.exceptions import MisconfigurationException
from trainer.loggers.base import FlushAtExit, add_prefix, disk_error, hparams_dict, sanitize_hparams
from trainer.loggers.csv_experiment import CSVExperiment
from trainer.loggers.dummy import DummyExperiment, on_global_zero
from trainer.loggers.folder import FolderLogger, RunFolder

STEP = "step"


class MetricsFile:
    """A CSV file whose header grows: a new column rewrites the file with the sorted union, as Lightning does.

    Rows with known columns are appended through a handle kept open between appends: opening the
    file for each one cost ~0.1 ms, paid at every logging point when the Trainer flushes there. A
    rewrite replaces the file, so it closes the handle; the next append reopens it. A file deleted
    while the run logs to it (a cleanup job, ``rm -r`` of the run folder) is started anew with a
    warning, not written on unseen through the open handle (one ``fstat`` per append tells).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.columns: list[str] | None = None  # None until the file on disk (if any) has been read
        self.num_rows = 0
        self.recreated = False  # the last append found the file deleted and started it again
        self._handle: TextIO | None = None
        self._writer: csv.DictWriter[str] | None = None
        self._written = False  # this run has written the file: its disappearance is news

    @property
    def rows(self) -> int:
        """Data rows on disk."""
        self._load()
        return self.num_rows

    def append(self, rows: list[dict[str, float]], keep: int | None = None) -> None:
        """Write ``rows`` after the first ``keep`` rows already on disk (after all of them when None)."""
        columns = self._load()
        self.recreated = self._deleted()
        if self.recreated:
            self._start_again(rows)
        new = [key for key in _ordered_keys(rows) if key not in columns]
        if new or (keep is not None and keep < self.num_rows):
            kept = self._read()[1][:keep]
            self._rewrite(sorted(columns + new), kept + rows)  # Lightning's order: sorted (epoch, step, ...)
            self.num_rows = len(kept) + len(rows)
        else:
            self._appender(columns).writerows(rows)
            assert self._handle is not None
            self._handle.flush()  # in the OS's hands: a crash of this process keeps the rows
            self.num_rows += len(rows)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = self._writer = None

    def _deleted(self) -> bool:
        if self._handle is not None:
            return os.fstat(self._handle.fileno()).st_nlink == 0
        return self._written and not os.path.exists(self.path)

    def _start_again(self, rows: list[dict[str, float]]) -> None:
        step = rows[0].get(STEP, "?") if rows else "?"
        warnings.warn(
            f"CSVLogger: {self.path} was deleted while this run logged to it (a cleanup job? rm -r of the run "
            f"folder?); a new one is started there from step {step} on. The {self.num_rows} row(s) written before "
            "are gone with the deleted file.",
            stacklevel=5,
        )
        self.close()
        self.num_rows = 0

    def _appender(self, columns: list[str]) -> csv.DictWriter[str]:
        if self._writer is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._handle = open(self.path, "a", newline="")  # noqa: SIM115  # closed by close()
            self._writer = csv.DictWriter(self._handle, fieldnames=columns, restval="")
            if self._handle.tell() == 0:
                self._writer.writeheader()
            self._written = True
        return self._writer

    def _load(self) -> list[str]:
        """Header and row count of the file on disk, read once (a resumed run appends to it)."""
        if self.columns is None:
            self.columns, old = self._read()
            self.num_rows = len(old)
            self._written = not _is_empty(self.path)  # a resumed run's file
        return self.columns

    def _read(self) -> tuple[list[str], list[dict[str, str]]]:
        if _is_empty(self.path):
            return [STEP], []
        with open(self.path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            return list(reader.fieldnames or [STEP]), rows

    def _rewrite(self, columns: list[str], rows: list[Any]) -> None:
        """Write a temporary file and rename it, so a crash mid-rewrite keeps the old rows."""
        self.close()
        self.columns = columns
        self._write(self.path + ".tmp", rows, mode="w", header=True)
        os.replace(self.path + ".tmp", self.path)
        self._written = True

    def _write(self, path: str, rows: list[Any], mode: str, header: bool) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, mode, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns or [STEP], restval="")
            if header:
                writer.writeheader()
            writer.writerows(rows)


def _is_empty(path: str) -> bool:
    return not os.path.exists(path) or os.path.getsize(path) == 0


def _ordered_keys(rows: list[dict[str, float]]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


class CSVLogger(FolderLogger):
    """Writes ``metrics.csv`` and ``hparams.yaml`` to ``<save_dir>/<name>/version_<n>`` (``<save_dir>/version_<n>``
    when ``name`` is ``""`` or None), Lightning's arguments.

    Rows are buffered and written every ``flush_logs_every_n_steps`` rows, on ``flush``/``save``, at each
    checkpoint (``state_dict``), at ``finalize`` and when the process exits normally (the Trainer flushes at
    every logging point). ``hparams.yaml`` is written when hyper-parameters are logged. Metric names get
    ``<prefix>-`` in front with a ``prefix``. A resumed run appends to the same folder and drops the rows the
    crashed run wrote after its last checkpoint, so every step appears once. ``save_dir`` is a local folder:
    a URL (``s3://``, ``memory://``) is refused.
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str] = "runs",
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if "://" in os.fspath(save_dir):
            raise MisconfigurationException(
                f"CSVLogger(save_dir={os.fspath(save_dir)!r}): a URL; CSVLogger writes to a local folder (it rewrites "
                "metrics.csv by renaming a temporary file, which object stores cannot do). Give a local folder and "
                "copy it where you need it."
            )
        if not isinstance(flush_logs_every_n_steps, int) or flush_logs_every_n_steps < 1:
            raise MisconfigurationException(
                f"CSVLogger(flush_logs_every_n_steps={flush_logs_every_n_steps!r}): a number of rows, 1 or more."
            )
        self._name = name or ""
        self._prefix = prefix
        self.flush_logs_every_n_steps = flush_logs_every_n_steps
        self._folder = RunFolder(os.fspath(save_dir), self._name, version)
        self._file: MetricsFile | None = None
        self._rows: list[dict[str, float]] = []
        self.hparams: dict[str, Any] = {}  # every hyper-parameter logged, as written to hparams.yaml
        self._hparams_pending = False
        self._keep: int | None = None  # rows of the checkpointed run to keep, set on resume
        self._fresh = True  # nothing written or resumed yet: a given version's old files are checked once
        self._flush_at_exit = FlushAtExit()

    @property
    def experiment(self) -> CSVExperiment:
        """Lightning's ``ExperimentWriter`` calls (``log_metrics``, ``save``, ``metrics``); TensorBoard's fail, saying
        how to get them. The first use checks a given version's folder for an earlier run's logs, as Lightning's."""
        if not on_global_zero():
            return DummyExperiment()  # type: ignore[return-value]
        self._start_fresh()
        return CSVExperiment(self)

    @override
    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        """Merged with those logged before and written to ``hparams.yaml`` now, as in Lightning (global rank
        zero only)."""
        if not on_global_zero():
            return
        self.hparams.update(sanitize_hparams(hparams_dict(params)))
        self._hparams_pending = True
        self._flush_at_exit.register(self.flush)
        self._write_hparams()

    @override
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """A row at ``step`` (None: the number of rows buffered, Lightning's rule); ``save`` once
        ``flush_logs_every_n_steps`` rows are buffered."""
        if self._hparams_pending:
            self._write_hparams()
        self._flush_at_exit.register(self.flush)
        if step is None:
            step = len(self._rows)
        metrics = add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
        self._rows.append({STEP: step, **{k: _number(v) for k, v in metrics.items() if k != STEP}})
        if len(self._rows) >= self.flush_logs_every_n_steps:
            self.save()

    @override
    def flush(self) -> None:
        """Write pending hyper-parameters and buffered rows; an append to the open file unless a column is new.

        A write that fails (a full disk) is reported once, naming the file and the free space; the rows
        it could not write are dropped so that finalize and the exit hook do not fail on them again.
        """
        try:
            if self._hparams_pending:
                self._write_hparams()
            if self._rows or self._keep is not None:
                metrics = self._metrics_file()
                metrics.append(self._rows, keep=self._keep)
                self._rows, self._keep = [], None
                if metrics.recreated and self.hparams:  # the folder went with it: hparams.yaml too
                    self._write_hparams()
        except OSError as err:
            self._rows, self._keep, self._hparams_pending = [], None, False
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None
            raise OSError(err.errno, disk_error(os.path.join(self.log_dir, "metrics.csv"), err)) from err

    @override
    def finalize(self, status: str) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
        self._flush_at_exit.unregister()

    @override
    def state_dict(self) -> dict[str, Any]:
        """Flushes first: a checkpoint is the point a resume restarts from, so its rows must be on disk."""
        self.flush()
        return {"version": self.version, "rows": self._metrics_file().rows}

    @override
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue in the checkpointed run's folder; call it before logging metrics. Hyper-parameters logged
        before move there (the folder this run claimed is given back)."""
        if self.hparams and self._folder.picked and state["version"] != self._folder.version:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.log_dir, "hparams.yaml"))
            self._hparams_pending = True
        self._folder.version = state["version"]
        self._fresh = False  # the checkpointed run's own folder: its files are this run's
        if self._file is not None:
            self._file.close()
        self._file = None
        self._keep = state.get("rows")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its rows written and without the open file (reopened on the next write)."""
        self.flush()
        state = self.__dict__.copy()
        state.update(_file=None, _flush_at_exit=FlushAtExit())
        return state

    def _metrics_file(self) -> MetricsFile:
        if self._file is None:
            self._start_fresh()
            self._file = MetricsFile(os.path.join(self.log_dir, "metrics.csv"))
        return self._file

    def _write_hparams(self) -> None:
        import yaml

        self._start_fresh()
        os.makedirs(self.log_dir, exist_ok=True)
        with open(os.path.join(self.log_dir, "hparams.yaml"), "w") as f:
            yaml.safe_dump(self.hparams, f, sort_keys=False)
        self._hparams_pending = False

    def _start_fresh(self) -> None:
        """Lightning's rule for a version given by the user whose folder holds an earlier run's logs: warn, and
        start ``metrics.csv`` over, so two runs' rows never mix. A claimed folder is new, a resumed one ours.
        Checked before this logger first writes; the checkpoints this run may have saved there already are
        not an earlier run's logs."""
        if not self._fresh:
            return
        self._fresh = False
        earlier = [os.path.join(self.log_dir, name) for name in ("metrics.csv", "hparams.yaml")]
        if self._folder.given and any(os.path.exists(path) for path in earlier):
            warnings.warn(
                f"Experiment logs directory {self.log_dir} exists and is not empty. Previous log files in this "
                "directory will be deleted when the new ones are saved!",
                stacklevel=4,
            )
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.log_dir, "metrics.csv"))


def _number(value: Any) -> int | float:
    """Counts (epoch) stay integers in the file; everything else is a float."""
    return value if isinstance(value, int) and not isinstance(value, bool) else float(value)
