"""Loading as Lightning's users call it: ``load_from_checkpoint(checkpoint_path=, hparams_file=, weights_only=)``
on a Module and a DataModule, and ``fit/validate(weights_only=)``; safe (``weights_only=True``) reading by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import trainer
from tests.models import loader, quiet, regression_data
from trainer.checkpoint.io import CheckpointError


class Net(trainer.Module):
    def __init__(self, features: int = 8, lr: float = 0.05, **kwargs: Any) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(features, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Data(trainer.DataModule):
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> Any:
        return loader(regression_data(8), batch_size=self.hparams.batch_size)


class Opaque:
    """Not on torch's weights_only allowlist: a checkpoint holding one is a pickle payload."""


def fitted(tmp_path: Path, module: trainer.Module | None = None, **fit: Any) -> Path:
    run = quiet(tmp_path, max_steps=1)
    run.fit(module or Net(), **(fit or {"train_dataloaders": loader(regression_data(8))}))
    path = tmp_path / "model.ckpt"
    run.save_checkpoint(path)
    return path


def test_checkpoint_path_by_keyword_and_loader_options_do_not_reach_init(tmp_path: Path) -> None:
    path = fitted(tmp_path, Net(lr=0.2))
    module = Net.load_from_checkpoint(checkpoint_path=path, map_location="cpu", strict=True, weights_only=True)
    assert module.hparams == {"features": 8, "lr": 0.2}  # Net takes **kwargs: weights_only/strict were not passed on
    assert torch.load(path, weights_only=True)["hparams_name"] == "kwargs"  # Lightning's name for arguments saved


def test_hparams_file_replaces_the_saved_hyper_parameters(tmp_path: Path) -> None:
    path = fitted(tmp_path, Net(lr=0.2))
    hparams_file = tmp_path / "hparams.yaml"
    hparams_file.write_text(yaml.safe_dump({"features": 8, "lr": 0.7}))
    assert Net.load_from_checkpoint(path, hparams_file=hparams_file).hparams.lr == 0.7
    with pytest.raises(
        ValueError, match=r"\.csv, \.yml or \.yaml is required for `hparams_file`; got '.*hparams\.txt'"
    ):
        Net.load_from_checkpoint(path, hparams_file=tmp_path / "hparams.txt")


def test_a_pickle_payload_is_refused_unless_weights_only_false(tmp_path: Path) -> None:
    path = fitted(tmp_path)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["payload"] = Opaque()
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="Opaque"):
        Net.load_from_checkpoint(path)
    assert isinstance(Net.load_from_checkpoint(path, weights_only=False), Net)
    run = quiet(tmp_path, max_steps=2)
    with pytest.raises(CheckpointError, match="Opaque"):
        run.fit(Net(), loader(regression_data(8)), ckpt_path=path)
    run = quiet(tmp_path, max_steps=2)
    run.fit(Net(), loader(regression_data(8)), ckpt_path=path, weights_only=False)
    assert run.global_step == 2


def test_datamodule_is_rebuilt_from_its_saved_hyper_parameters(tmp_path: Path) -> None:
    path = fitted(tmp_path, datamodule=Data(batch_size=2))
    assert torch.load(path, weights_only=True)["datamodule_hyper_parameters"] == {"batch_size": 2}
    assert Data.load_from_checkpoint(path).hparams.batch_size == 2
    assert Data.load_from_checkpoint(checkpoint_path=path, batch_size=8).hparams.batch_size == 8


class Recorder:
    """Logs as a Logger does without subclassing it (Lightning takes one); has no state_dict."""

    save_dir = None
    log_dir = None
    name = "recorder"
    version = 0

    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.append(dict(metrics))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def save(self) -> None:
        pass

    def finalize(self, status: str) -> None:
        pass


def test_a_logger_that_does_not_subclass_logger_is_taken_and_checkpointed(tmp_path: Path) -> None:
    recorder = Recorder()
    run = quiet(tmp_path, max_steps=1, logger=recorder)
    assert run.loggers == [recorder]
    run.fit(Net(), loader(regression_data(8)))
    run.save_checkpoint(tmp_path / "with_recorder.ckpt")
    assert torch.load(tmp_path / "with_recorder.ckpt", weights_only=True)["loggers"] == [{}]
