"""A tiny Module and DataModule for the CLI tests; the optimizer and scheduler come from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer
from trainer.cli import LRSchedulerCallable, OptimizerCallable

Batch = tuple[torch.Tensor, torch.Tensor]


class Model(trainer.Module):
    """Two-layer regression net."""

    def __init__(
        self,
        hidden: int = 8,
        optimizer: OptimizerCallable = lambda p: torch.optim.AdamW(p, lr=1e-3),
        scheduler: LRSchedulerCallable | None = None,
        report: str | None = None,
    ) -> None:
        """Build the net; the optimizer is built later, from ``optimizer(self.parameters())``.

        Args:
            hidden: Width of the hidden layer.
            optimizer: Makes the optimizer from the parameters (``--model.optimizer torch.optim.SGD``).
            scheduler: Makes an LR scheduler from the optimizer; none by default.
            report: When set, each rank writes ``<report>.rank<N>.json`` at fit start (what it trains with).
        """
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.report = report

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])

    def configure_optimizers(self) -> object:
        optimizer = self.optimizer(self.parameters())
        if self.scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler(optimizer)}

    def on_fit_start(self) -> None:
        if self.report is None:
            return
        optimizer = self.trainer.optimizers[0]
        facts = {
            "optimizer": type(optimizer).__name__,
            "lr": optimizer.param_groups[0]["lr"],
            "scheduler": [type(c.scheduler).__name__ for c in self.trainer.lr_schedulers],
            "world_size": self.world_size,
        }
        Path(f"{self.report}.rank{self.global_rank}.json").write_text(json.dumps(facts))


class Data(trainer.DataModule):
    """Fixed random regression data: every split is the same ``size`` samples."""

    def __init__(self, size: int = 32, batch_size: int = 8) -> None:
        """Keep the sizes; the tensors are made in ``setup``.

        Args:
            size: Number of samples.
            batch_size: Samples per batch.
        """
        self.size = size
        self.batch_size = batch_size
        self.dataset: TensorDataset | None = None

    def setup(self, stage: str) -> None:
        x = torch.randn(self.size, 4, generator=torch.Generator().manual_seed(0))
        self.dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def _loader(self) -> DataLoader[Batch]:
        assert self.dataset is not None
        return DataLoader(self.dataset, batch_size=self.batch_size)  # type: ignore[arg-type]

    def train_dataloader(self) -> DataLoader[Batch]:
        return self._loader()

    def val_dataloader(self) -> DataLoader[Batch]:
        return self._loader()

    def test_dataloader(self) -> DataLoader[Batch]:
        return self._loader()

    def predict_dataloader(self) -> DataLoader[Batch]:
        return self._loader()
