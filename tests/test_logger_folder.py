"""Where a run's checkpoints go with a logger of the user's own that has no ``log_dir``: Lightning's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.loggers import Logger


class _RemoteLogger(Logger):
    """A user's logger, as Lightning's docs write one: it names a local ``save_dir``, a name and a version."""

    def __init__(self, save_dir: Path, version: int | str) -> None:
        super().__init__()
        self._save_dir, self._version = save_dir, version

    @property
    def name(self) -> str:
        return "remote"

    @property
    def version(self) -> int | str:
        return self._version

    @property
    def save_dir(self) -> str:
        return str(self._save_dir)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def _fit_with(tmp_path: Path, logger: Logger) -> Path:
    t = quiet(tmp_path / "root", logger=logger, enable_checkpointing=True, max_epochs=1, limit_train_batches=1)
    t.fit(Regressor(), loader(regression_data(8)))
    assert t.checkpoint_callback is not None
    return Path(t.checkpoint_callback.dirpath)  # type: ignore[arg-type]


def test_checkpoints_go_under_save_dir_name_version_as_lightnings(tmp_path: Path) -> None:
    assert (
        _fit_with(tmp_path, _RemoteLogger(tmp_path / "logs", 3))
        == tmp_path / "logs" / "remote" / "version_3" / "checkpoints"
    )
    assert list((tmp_path / "logs" / "remote" / "version_3" / "checkpoints").glob("*.ckpt"))
    assert (
        _fit_with(tmp_path, _RemoteLogger(tmp_path / "logs", "run-a"))
        == tmp_path / "logs" / "remote" / "run-a" / "checkpoints"
    )


def test_a_file_logger_keeps_its_own_folder(tmp_path: Path) -> None:
    csv = trainer.loggers.CSVLogger(tmp_path / "csv", name="exp", version=1)
    assert _fit_with(tmp_path, csv) == Path(csv.log_dir) / "checkpoints"
