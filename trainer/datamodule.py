"""``DataModule``: the data side of a run (Lightning's ``LightningDataModule``), so a CLI can build it from flags."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import trainer.hparams as hparams_lib
from trainer.hparams import AttributeDict, HParams


class DataModule:
    """Override ``setup`` and the ``*_dataloader`` methods you need; ``fit`` accepts it.

    ``setup(stage)`` is called on every rank before its loaders are asked for; stage is "fit",
    "validate", "test" or "predict". The batch-transfer hooks, where overridden, win over the
    module's.
    """

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: Sequence[str] | str | None = None,
        frame: types.FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """As ``Module.save_hyperparameters``: ``self.hparams`` holds the ``__init__`` arguments (or those
        named); the loggers get them at fit start, beside the module's."""
        hparams_lib.save_hyperparameters(self, args, ignore, frame, logger)

    @property
    def hparams(self) -> AttributeDict:
        """What ``save_hyperparameters`` saved (``self.hparams.batch_size``); empty before."""
        return self._hparams_state().values

    @property
    def hparams_initial(self) -> AttributeDict:
        return hparams_lib.frozen(self._hparams_state().initial)

    def _hparams_state(self) -> HParams:
        return hparams_lib.state_of(self)

    prepare_data_per_node: bool = True  # False: prepare_data on global rank zero only (a shared file system)

    def prepare_data(self) -> None:
        """Download or generate data once per machine: local rank zero runs it while the others wait."""

    def setup(self, stage: str) -> None:
        """Build datasets (every rank calls this)."""

    def teardown(self, stage: str) -> None:
        """Every rank, at the end of ``stage``."""

    def train_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader().")

    def val_dataloader(self) -> Any:
        return None

    def test_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader().")

    def predict_dataloader(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader().")

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        from trainer.move import move_to_device

        return move_to_device(batch, device)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def on_exception(self, exception: BaseException) -> None:
        """A stage failed with ``exception``."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this DataModule."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass
