"""Small models and data shared by the tests."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import trainer


def regression_data(n: int = 96, features: int = 8, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = x @ torch.randn(features, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def make_net(features: int = 8, dropout: float = 0.0) -> torch.nn.Sequential:
    return torch.nn.Sequential(
        torch.nn.Linear(features, 16), torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
    )


class Regressor(trainer.Module):
    """MSE regression with SGD/Adam; ``dropout`` makes RNG matter."""

    def __init__(self, features: int = 8, lr: float = 0.05, dropout: float = 0.0, adam: bool = False) -> None:
        super().__init__()
        self.net = make_net(features, dropout)
        self.lr = lr
        self.adam = adam

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.adam:
            return torch.optim.Adam(self.parameters(), lr=self.lr)
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def every_step_checkpoints(folder: str | os.PathLike[str]) -> trainer.ModelCheckpoint:
    """A checkpoint after every optimizer step, each kept as ``<folder>/step<N>.ckpt``: the resume tests' source."""
    return trainer.ModelCheckpoint(
        dirpath=folder, filename="step{step}", auto_insert_metric_name=False, save_top_k=-1, every_n_train_steps=1
    )


class LoggedRegressor(Regressor):
    """What a captured step must replay: the loss on the bar, an epoch mean and the gradient norm logged, an
    output beside the loss, an LR scheduler stepped per step (``tests/test_graph_step.py``, on a GPU
    ``tests/test_cuda_graph.py``)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("loss_mean", loss, on_step=False, on_epoch=True)
        return {"loss": loss, "pred_mean": self.net(x).mean().detach()}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        from trainer.utilities.grads import grad_norm

        self.log("grad_norm", grad_norm(self, 2)["grad_2.0_norm_total"])

    def configure_optimizers(self) -> Any:
        return self.scheduled(torch.optim.Adam(self.parameters(), lr=0.01))

    @staticmethod
    def scheduled(opt: torch.optim.Optimizer) -> dict[str, Any]:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class BatchValues(trainer.Callback):
    """Every training batch's callback metrics and outputs, copied to the CPU (on a GPU a synchronization:
    fine in a test)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        found = {k: v.detach().cpu().clone() for k, v in trainer.callback_metrics.items()}
        found.update({f"out/{k}": v.detach().cpu().clone() for k, v in outputs.items()})
        self.seen.append(found)


class NoisyDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random augmentation from torch's global RNG in __getitem__ (for resume tests)."""

    def __init__(self, base: TensorDataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.base[i]
        return x + 0.01 * torch.randn_like(x), y


def loader(ds: Dataset, batch_size: int = 8, shuffle: bool = False, **kwargs: object) -> DataLoader:
    return DataLoader(ds, batch_size=batch_size, shuffle=shuffle, **kwargs)  # type: ignore[arg-type]


def params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def assert_bitwise_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y), f"max difference {(x - y).abs().max().item()}"


def quiet(tmp_path: object, **kwargs: object) -> trainer.Trainer:
    """A CPU Trainer that writes nothing and skips the sanity check unless told otherwise."""
    defaults: dict[str, object] = dict(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    defaults.update(kwargs)
    return trainer.Trainer(**defaults)  # type: ignore[arg-type]
