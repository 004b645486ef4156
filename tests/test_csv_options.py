"""CSVLogger's Lightning arguments (``prefix``, ``flush_logs_every_n_steps``), the loggers steadytrain does not
support, and Lightning's Logger calls on ours."""

from __future__ import annotations

import argparse
import csv
import os
import pickle
from pathlib import Path

import pytest
import yaml

from tests.models import Regressor, loader, quiet, regression_data
from trainer.exceptions import MisconfigurationException
from trainer.loggers import CometLogger, CSVLogger, LitLogger, NeptuneLogger


def _rows(logger: CSVLogger) -> list[dict[str, str]]:
    with open(os.path.join(logger.log_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_prefix_goes_before_every_metric_name(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=tmp_path, prefix="finetune")
    logger.log_metrics({"loss": 0.5}, step=3)
    logger.save()  # Lightning's name for flush
    assert _rows(logger) == [{"finetune-loss": "0.5", "step": "3"}]


def test_rows_reach_the_file_every_n_steps(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=tmp_path, flush_logs_every_n_steps=3)
    for step in range(2):
        logger.log_metrics({"loss": float(step)}, step=step)
    assert not os.path.exists(os.path.join(logger.log_dir, "metrics.csv"))  # two rows buffered
    logger.log_metrics({"loss": 2.0}, step=2)
    assert [row["step"] for row in _rows(logger)] == ["0", "1", "2"]


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_a_bad_flush_interval_is_named(tmp_path: Path, bad: object) -> None:
    with pytest.raises(MisconfigurationException, match=rf"flush_logs_every_n_steps={bad!r}\): a number of rows"):
        CSVLogger(save_dir=tmp_path, flush_logs_every_n_steps=bad)  # type: ignore[arg-type]


def test_hyperparameters_from_a_namespace_are_written_at_once_and_merged(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=tmp_path, name=None)  # no name: version folders right under save_dir
    logger.log_hyperparams(argparse.Namespace(lr=0.1))
    logger.log_hyperparams({"layers": 2})
    assert logger.log_dir == str(tmp_path / "version_0")
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as f:
        assert yaml.safe_load(f) == {"lr": 0.1, "layers": 2}


def test_a_fit_with_prefix_and_flush_interval(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=tmp_path, prefix="a", flush_logs_every_n_steps=1)
    quiet(tmp_path, logger=logger, max_steps=4, log_every_n_steps=1).fit(Regressor(), loader(regression_data(32)))
    assert [row["a-train_loss"] != "" for row in _rows(logger)] == [True] * 4


def test_a_logger_pickles_with_its_rows_written(tmp_path: Path) -> None:
    logger = CSVLogger(save_dir=tmp_path)
    logger.log_metrics({"loss": 1.0}, step=0)
    copy = pickle.loads(pickle.dumps(logger))
    assert _rows(logger) == [{"loss": "1.0", "step": "0"}] and copy.log_dir == logger.log_dir


@pytest.mark.parametrize("cls", [CometLogger, LitLogger])
def test_unsupported_services_import_and_refuse_to_build(cls: type) -> None:
    with pytest.raises(MisconfigurationException, match=rf"{cls.__name__}: steadytrain does not support .*WandbLogger"):
        cls(api_key="key", project="p")


def test_neptune_logger_says_neptune_is_gone_as_lightning_does() -> None:
    with pytest.raises(RuntimeError, match=r"NeptuneLogger is no longer supported.*WandbLogger") as raised:
        NeptuneLogger(project="p")
    assert isinstance(raised.value, MisconfigurationException)
