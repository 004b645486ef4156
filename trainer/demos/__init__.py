"""Lightning's demo models and data sets (``lightning.pytorch.demos``), by their names, so a bug report or
an example script that imports them ports by its import lines alone and draws the same numbers.

Nothing is downloaded at import: ``WikiText2`` and ``MNIST`` fetch their files when constructed (as
Lightning's do) unless the files are already there. Each class loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "boring": (
        "BoringDataModule",
        "BoringDataModuleNoLen",
        "BoringModel",
        "DemoModel",
        "IterableBoringDataModule",
        "ManualOptimBoringModel",
        "Net",
        "RandomDataset",
        "RandomDictDataset",
        "RandomIterableDataset",
        "RandomIterableDatasetWithLen",
    ),
    "transformer": ("Dictionary", "LightningTransformer", "PositionalEncoding", "Transformer", "WikiText2", "tokenize"),
    "lstm": ("LightningLSTM", "SequenceSampler", "SimpleLSTM"),
    "mnist": ("MNIST", "MNISTDataModule"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"trainer.demos.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'trainer.demos' has no attribute {name!r}")
