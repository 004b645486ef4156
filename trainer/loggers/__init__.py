"""Loggers; each in its own file, none importing its backend (wandb, tensorboard, mlflow) until used."""

from __future__ import annotations

import importlib
from typing import Any

from trainer.loggers.base import Logger

_LAZY = {
    "CSVLogger": "trainer.loggers.csv",
    "DummyExperiment": "trainer.loggers.dummy",
    "DummyLogger": "trainer.loggers.dummy",
    "ExperimentWriter": "trainer.loggers.csv_experiment",
    "MLFlowLogger": "trainer.loggers.mlflow",
    "TensorBoardLogger": "trainer.loggers.tensorboard",
    "WandbLogger": "trainer.loggers.wandb",
}

__all__ = [
    "CSVLogger",
    "DummyExperiment",
    "DummyLogger",
    "ExperimentWriter",
    "Logger",
    "MLFlowLogger",
    "TensorBoardLogger",
    "WandbLogger",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trainer.loggers' has no attribute {name!r}")
