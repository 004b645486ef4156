"""A training job with DataLoader workers, for the tests that prove such jobs end by themselves.

    python worker_job.py OUT_DIR --case good|raise|kill-worker|nan|sigterm [--strategy ddp --devices 2]
        [--workers N] [--persistent] [--resume] [--epochs E]

``raise``: training_step raises at step 3 (on the last rank under DDP); ``kill-worker``: a worker
SIGKILLs itself inside ``__getitem__`` (as the OOM killer would); ``nan``: the loss becomes NaN;
``sigterm``: the job announces ``STEP=<n>`` lines and sleeps per step, for a signal from outside.
A finished run saves its parameters to ``OUT_DIR/final-rank<r>.pt``.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import trainer


class Augmented(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random augmentation drawn in ``__getitem__`` (inside the workers)."""

    def __init__(self, n: int = 192, kill_at: int | None = None) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 16, generator=g), torch.randn(n, 1, generator=g)
        self.kill_at = kill_at

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.kill_at is not None and i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.x[i] + 0.1 * torch.randn(16), self.y[i]


class Net(trainer.Module):
    def __init__(self, case: str = "good", sleep: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.case = case
        self.sleep = sleep

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.body(x), y)
        last_rank = self.global_rank == self.world_size - 1
        if self.case == "raise" and self.global_step == 3 and last_rank:
            raise RuntimeError("boom in training_step")
        if self.case == "nan" and self.global_step == 3:
            loss = loss * float("nan")
        if self.sleep:
            print(f"STEP={self.global_step}", flush=True)
            time.sleep(self.sleep)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", default="good")
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer.seed_everything(0)
    sleep = 0.05 if args.case == "sigterm" else 0.0
    dataset = Augmented(kill_at=40 if args.case == "kill-worker" else None)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.persistent and args.workers > 0,
    )
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=args.strategy,
        devices=args.devices,
        max_epochs=args.epochs,
        logger=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        default_root_dir=args.out,
        callbacks=[trainer.ModelCheckpoint(dirpath=args.out / "ckpts", save_top_k=0)],
    )
    module = Net(args.case, sleep)
    fit.fit(module, loader, ckpt_path=str(args.out / "ckpts" / "interrupted.ckpt") if args.resume else None)
    torch.save([p.detach() for p in module.parameters()], args.out / f"final-rank{fit.global_rank}.pt")
    print(f"done rank {fit.global_rank} step {fit.global_step}", flush=True)


if __name__ == "__main__":
    main()
