"""A Lightning DataModule's surface: its trainer, from_datasets, its printout, its state and hparams in checkpoints,
its hooks in the profiler, and which of it and the module moves a batch."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import trainer
from tests.models import Regressor, loader, quiet, regression_data


class Data(trainer.DataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.restored: dict[str, Any] | None = None

    def train_dataloader(self) -> DataLoader:
        return loader(regression_data(32), batch_size=self.hparams.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"seen": 1}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.restored = state_dict


def test_a_datamodule_knows_its_trainer_and_its_state_goes_into_checkpoints_and_back(tmp_path: Path) -> None:
    data = Data()
    assert data.trainer is None
    run = quiet(tmp_path, max_steps=2, enable_checkpointing=True, profiler="simple")
    run.fit(Regressor(), datamodule=data)
    assert data.trainer is run
    path = run.checkpoint_callback.last_model_path or run.checkpoint_callback.best_model_path  # type: ignore[union-attr]
    assert torch.load(path, weights_only=True)["Data"] == {"seen": 1}  # Lightning's key: the class name
    assert "[LightningDataModule]Data.state_dict" in run.profiler.recorded_durations  # type: ignore[union-attr]
    resumed = Data()
    quiet(tmp_path, max_steps=3).fit(Regressor(), datamodule=resumed, ckpt_path=path)
    assert resumed.restored == {"seen": 1}
    assert Data.load_from_checkpoint(path, batch_size=4).restored == {"seen": 1}


def test_from_datasets_builds_the_loaders_and_passes_what_init_takes() -> None:
    data = Data.from_datasets(regression_data(32), val_dataset=[regression_data(8), regression_data(4)], batch_size=4)
    assert data.hparams.batch_size == 4
    train = data.train_dataloader()
    assert isinstance(train, DataLoader) and train.batch_size == 4
    assert [len(v.dataset) for v in data.val_dataloader()] == [8, 4]
    assert str(data) == os.linesep.join(
        [
            "{Train dataloader: size=32}",
            "{Validation dataloader: 1. size=8 ; 2. size=4}",
            "{Test dataloader: None}",
            "{Predict dataloader: None}",
        ]
    )


def test_setup_gets_stage_by_keyword_and_the_hooks_are_profiled(tmp_path: Path) -> None:
    stages: list[Any] = []

    class Keywords(Data):
        def prepare_data(self) -> None:
            stages.append("prepare_data")

        def setup(self, **kwargs: Any) -> None:
            stages.append(kwargs)

        def teardown(self, **kwargs: Any) -> None:
            stages.append(kwargs)

    run = quiet(tmp_path, max_steps=1, profiler="simple")
    run.fit(Regressor(), datamodule=Keywords())
    assert stages == ["prepare_data", {"stage": "fit"}, {"stage": "fit"}]
    recorded = run.profiler.recorded_durations  # type: ignore[union-attr]
    assert {"[LightningDataModule]Keywords.setup", "[LightningDataModule]Keywords.prepare_data"} <= set(recorded)


def test_a_wrapped_datamodule_hook_is_what_it_wraps(tmp_path: Path) -> None:
    """Lightning decides between the DataModule's and the module's transfer hooks by what is written, so a wrapper
    (``functools.wraps``, ``partial``) around the DataModule's default does not take the batch from the module's."""
    moved: list[str] = []

    class Moving(Regressor):
        def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
            moved.append("module")
            return super().transfer_batch_to_device(batch, device, dataloader_idx)

    data = Data()
    default = data.transfer_batch_to_device
    data.transfer_batch_to_device = functools.wraps(default)(lambda *args: moved.append("datamodule") or default(*args))
    quiet(tmp_path, max_steps=1).fit(Moving(), datamodule=data)
    assert moved == ["module"]


def test_seed_everything_exports_lightnings_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    before = set(os.environ)
    trainer.seed_everything(7, workers=True)
    assert set(os.environ) - before == {"PL_GLOBAL_SEED", "PL_SEED_WORKERS"}
    assert (os.environ["PL_GLOBAL_SEED"], os.environ["PL_SEED_WORKERS"]) == ("7", "1")
