"""``DataModule``: the data side of a run (Lightning's ``LightningDataModule``), so a CLI can build it from flags."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Any, Self

from trainer.hparams import HyperparametersMixin

_LOADERS = (
    ("Train dataloader", "train_dataloader"),
    ("Validation dataloader", "val_dataloader"),
    ("Test dataloader", "test_dataloader"),
    ("Predict dataloader", "predict_dataloader"),
)


class DataModule(HyperparametersMixin):
    """Override ``setup`` and the ``*_dataloader`` methods you need; ``fit`` accepts it.

    ``setup(stage)`` is called on every rank before its loaders are asked for; stage is "fit",
    "validate", "test" or "predict". The batch-transfer hooks, where overridden, win over the
    module's.
    """

    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    trainer: Any = None  # the Trainer running it, from the first stage on
    name: str | None = None

    def __init__(self) -> None:
        self.trainer = None

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

    # ---- Lightning's constructors and loading ------------------------------------------------------------------
    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> DataModule:
        """A DataModule whose loaders serve these datasets (or collections of them): shuffled for training,
        ``batch_size`` and ``num_workers`` each, also passed to ``__init__`` where it takes them."""
        params = inspect.signature(cls.__init__).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        given = {"batch_size": batch_size, "num_workers": num_workers}
        extra = {k: v for k, v in given.items() if takes_any or k in params}
        datamodule = cls(**datamodule_kwargs, **extra)
        for method, dataset in zip(
            ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader"),
            (train_dataset, val_dataset, test_dataset, predict_dataset),
        ):
            if dataset is not None:
                shuffle = method == "train_dataloader"
                setattr(datamodule, method, _loaders_of(dataset, batch_size, num_workers, shuffle))
        return datamodule

    def __str__(self) -> str:
        """Each loader's dataset size, as Lightning prints a DataModule: ``{Train dataloader: size=64}``, one line
        per loader (None where it is not available yet)."""
        return os.linesep.join(f"{{{title}: {_loader_info(self, method)}}}" for title, method in _LOADERS)


def _loaders_of(dataset: Any, batch_size: int, num_workers: int, shuffle: bool) -> Callable[[], Any]:
    """A ``*_dataloader`` method serving ``dataset`` (or each dataset of a collection) in a DataLoader."""
    from lightning_utilities.core.apply_func import apply_to_collection
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    def loader(ds: Dataset[Any]) -> DataLoader[Any]:
        mix = shuffle and not isinstance(ds, IterableDataset)
        return DataLoader(ds, batch_size=batch_size, shuffle=mix, num_workers=num_workers, pin_memory=True)

    return lambda: apply_to_collection(dataset, Dataset, loader)


def _loader_info(datamodule: DataModule, method: str) -> str:
    try:
        loader = getattr(datamodule, method)()
    except Exception:  # not defined, or its datasets are not set up yet
        return "None"
    if loader is None:
        return "None"

    def size(one: Any) -> str:
        dataset = getattr(one, "dataset", None)
        return str(len(dataset)) if isinstance(dataset, Sized) else "NA"

    if hasattr(loader, "dataset"):
        return f"size={size(loader)}"
    loaders = list(loader.values()) if isinstance(loader, dict) else list(loader)
    return " ; ".join(f"{i}. size={size(one)}" for i, one in enumerate(loaders, start=1))
