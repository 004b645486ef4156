"""``CSVLogger.experiment``: the calls Lightning's CSV experiment takes (``log_metrics``, ``log_hparams``,
``save``, ``metrics_file_path``); TensorBoard's drawing calls (``add_image``, ...) fail naming how to get them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.loggers.csv import CSVLogger


class CSVExperiment:
    """What ``self.logger.experiment`` is under a ``CSVLogger``: rows of numbers, nothing drawn."""

    NAME_METRICS_FILE = "metrics.csv"
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(self, logger: CSVLogger) -> None:
        self._logger = logger

    @property
    def metrics(self) -> list[dict[str, float]]:
        """The rows buffered, not written yet (each with its ``step``)."""
        return self._logger._rows

    @property
    def hparams(self) -> dict[str, Any]:
        """Every hyper-parameter logged, as in ``hparams.yaml``."""
        return self._logger.hparams

    @property
    def log_dir(self) -> str:
        return self._logger.log_dir

    @property
    def metrics_file_path(self) -> str:
        return os.path.join(self._logger.log_dir, "metrics.csv")

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        """One row at ``step`` (None: the number of rows buffered, Lightning's rule)."""
        self._logger.log_metrics(metrics_dict, step)

    def log_hparams(self, params: dict[str, Any]) -> None:
        self._logger.log_hyperparams(params)

    def save(self) -> None:
        """Write what is buffered."""
        self._logger.save()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(
            f"CSVLogger's experiment has no {name}(): it writes numbers to metrics.csv only. For TensorBoard's "
            "calls (add_image, add_histogram, add_figure, ...) install tensorboard (pip install "
            "steadytrain[tensorboard]): then Trainer(logger=True), the default, is a TensorBoardLogger, as in "
            "Lightning; or pass logger=TensorBoardLogger(...)."
        )


ExperimentWriter = CSVExperiment  # Lightning's name (``loggers.csv_logs.ExperimentWriter``)
