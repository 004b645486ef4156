"""Fine-tuning that unfreezes a backbone while training, for the DDP test.

    python finetune_ddp.py OUT_DIR {epoch,batch} [--strategy ddp --devices 2]

``epoch``: ``BackboneFinetuning`` unfreezes at the start of epoch 1. ``batch``: the module unfreezes
itself in ``on_train_batch_start`` in the middle of epoch 0. DDP fixes the parameters it reduces when
it wraps the module, so the strategy must notice and wrap again, or the unfrozen layers train on
each rank's half of the batch alone. Saves each rank's parameters to ``OUT_DIR/params-rank<r>.pt``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer
from trainer.callbacks import BackboneFinetuning

GLOBAL_BATCH = 16


class Transfer(trainer.Module):
    def __init__(self, unfreeze_at_batch: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.head = nn.Linear(16, 1)
        self.unfreeze_at_batch = unfreeze_at_batch
        if unfreeze_at_batch is not None:
            self.backbone.requires_grad_(False)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.unfreeze_at_batch is not None and self.global_step == self.unfreeze_at_batch:
            self.backbone.requires_grad_(True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)  # every parameter: a frozen one has no grad, no step


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True).sin())


def run(out: Path, mode: str, strategy: str = "auto", devices: int = 1) -> trainer.Trainer:
    module = Transfer(unfreeze_at_batch=2 if mode == "batch" else None)
    callbacks = [BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda e: 1.0)] if mode == "epoch" else []
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=devices,
        max_epochs=3,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
    )
    fit.fit(module, DataLoader(data(), batch_size=GLOBAL_BATCH // devices))
    params = [p.detach().clone() for p in module.parameters()]
    torch.save({"params": params}, out / f"params-rank{fit.global_rank}.pt")
    return fit


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("mode", choices=["epoch", "batch"])
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()
    run(args.out, args.mode, args.strategy, args.devices)
