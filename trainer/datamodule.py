"""``DataModule``: the data side of a run, so a CLI can build it from flags."""

from __future__ import annotations

from typing import Any


class DataModule:
    """Override ``setup`` and the ``*_dataloader`` methods you need; ``fit`` accepts it.

    ``setup(stage)`` is called on every rank before its loaders are asked for; stage is
    "fit", "validation", "test" or "predict".
    """

    def prepare_data(self) -> None:
        """Download or generate data once: global rank zero runs it while the others wait."""

    def setup(self, stage: str) -> None:
        """Build datasets (every rank calls this)."""

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader().")

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader().")

    def predict_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader().")
