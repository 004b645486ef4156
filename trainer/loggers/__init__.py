"""Loggers; each in its own file, none importing its backend (wandb, tensorboard, mlflow) until used."""

from __future__ import annotations

import importlib
from typing import Any

from trainer.loggers.base import Logger

_LAZY = {
    "CometLogger": "trainer.loggers.unsupported",
    "CSVLogger": "trainer.loggers.csv",
    "DummyExperiment": "trainer.loggers.dummy",
    "DummyLogger": "trainer.loggers.dummy",
    "ExperimentWriter": "trainer.loggers.csv_experiment",
    "LitLogger": "trainer.loggers.unsupported",
    "MLFlowLogger": "trainer.loggers.mlflow",
    "NeptuneLogger": "trainer.loggers.unsupported",
    "TensorBoardLogger": "trainer.loggers.tensorboard",
    "WandbLogger": "trainer.loggers.wandb",
}

__all__ = [
    "CSVLogger",
    "CometLogger",
    "DummyExperiment",
    "DummyLogger",
    "ExperimentWriter",
    "LitLogger",
    "Logger",
    "MLFlowLogger",
    "NeptuneLogger",
    "TensorBoardLogger",
    "WandbLogger",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trainer.loggers' has no attribute {name!r}")
