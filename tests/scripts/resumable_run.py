"""A deterministic training job for the kill / signal tests.

    python resumable_run.py OUT_DIR [--resume] [--strategy single|ddp|fsdp] [--devices N] [--sleep S]

Saves a checkpoint after every step (``last.ckpt``) and, when it finishes, the final
parameters to ``OUT_DIR/final-rank<r>.pt``. Global rank zero announces its progress on stdout
(see ``Announce``), so a test can kill it at a chosen step instead of after a guessed delay.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

import trainer


class Net(trainer.Module):
    def __init__(self, sleep: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(16, 256),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.1),
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 1),
        )
        self.sleep = sleep

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.sleep:
            time.sleep(self.sleep)
        x, y = batch
        return torch.nn.functional.mse_loss(self.body(x), y)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 5, 0.9), "interval": "step"},
        }


class Announce(trainer.Callback):
    """Flushed progress lines from global rank zero, each printed just before the work it names.

    ``START=<n>``: the run begins (or resumes) at global step n. ``STEP=<n>``: a training batch begins
    after n optimizer steps (the step then sleeps first: a kill here lands mid-step). ``SAVE=<n>``: the
    checkpoint of step n is about to be written (a kill here lands mid-save).
    """

    def _say(self, trainer: trainer.Trainer, what: str) -> None:
        if trainer.is_global_zero:
            print(f"{what}={trainer.global_step}", flush=True)

    def on_fit_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        self._say(trainer, "START")

    def on_train_batch_start(
        self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, batch_idx: int
    ) -> None:
        self._say(trainer, "STEP")

    def on_save_checkpoint(self, trainer: trainer.Trainer, module: trainer.Module, checkpoint: dict[str, Any]) -> None:
        self._say(trainer, "SAVE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(160, 16, generator=g), torch.randn(160, 1, generator=g))
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=args.strategy,
        devices=args.devices,
        max_epochs=args.epochs,
        logger=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        default_root_dir=args.out,
        callbacks=[
            trainer.ModelCheckpoint(dirpath=args.out / "ckpts", every_n_train_steps=1, save_top_k=0),
            Announce(),
        ],
    )
    module = Net(args.sleep)
    fit.fit(
        module,
        DataLoader(data, batch_size=16, shuffle=True, num_workers=1),
        ckpt_path="last" if args.resume else None,
    )
    full = [p.full_tensor() if isinstance(p, DTensor) else p.detach() for p in module.parameters()]  # fsdp: gathered
    torch.save(full, args.out / f"final-rank{fit.global_rank}.pt")
    print(f"done rank {fit.global_rank} step {fit.global_step}", flush=True)


if __name__ == "__main__":
    main()
