"""``DataModule``: the data side of a run (Lightning's ``LightningDataModule``), so a CLI can build it from flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from trainer.hparams import HyperparametersMixin


class DataModule(HyperparametersMixin):
    """Override ``setup`` and the ``*_dataloader`` methods you need; ``fit`` accepts it.

    ``setup(stage)`` is called on every rank before its loaders are asked for; stage is "fit",
    "validate", "test" or "predict". The batch-transfer hooks, where overridden, win over the
    module's.
    """

    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        weights_only: bool | None = None,
        *,
        trusted_classes: tuple[type, ...] = (),
        **kwargs: Any,
    ) -> Self:
        """Rebuild the DataModule a fit used from the hyper-parameters its checkpoint saved (``kwargs`` override
        them; ``hparams_file`` replaces them), then its ``load_state_dict``: Lightning's
        ``LightningDataModule.load_from_checkpoint``. Read with ``weights_only=True`` unless told otherwise."""
        from trainer.checkpoint.rebuild import load_datamodule

        return load_datamodule(cls, checkpoint_path, map_location, hparams_file, weights_only, trusted_classes, kwargs)

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
