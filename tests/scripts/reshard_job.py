"""Train with a global batch of 32 on 1 or 2 ranks, saving a checkpoint at every step.

    python reshard_job.py OUT_DIR --devices 1|2 [--resume CKPT] [--epochs E] [--shuffle] [--noise] [--workers N]

Saves the final parameters to ``OUT_DIR/final-rank<r>.pt``. No dropout: one device and two ranks
do the same math on the same global batches, up to float summation order. ``--noise`` adds random
augmentation in ``__getitem__`` (``NoisyDataset``), drawn in ``--workers`` worker processes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import trainer
from tests.models import NoisyDataset, Regressor, loader, regression_data

GLOBAL_BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--shuffle", action="store_true")
    parser.add_argument("--per-rank-batch", type=int, default=None)
    parser.add_argument("--noise", action="store_true")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer.seed_everything(0)
    every = trainer.ModelCheckpoint(
        dirpath=args.out / "ckpts", filename="{step}", save_top_k=-1, every_n_train_steps=1, save_last=False
    )
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy="ddp" if args.devices > 1 else "single",
        devices=args.devices,
        max_epochs=args.epochs,
        logger=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=[every],
    )
    module = Regressor(lr=0.05)
    per_rank = args.per_rank_batch or GLOBAL_BATCH // args.devices
    dataset = NoisyDataset(regression_data(128)) if args.noise else regression_data(128)
    data = loader(dataset, batch_size=per_rank, shuffle=args.shuffle, num_workers=args.workers)
    fit.fit(module, data, ckpt_path=args.resume)
    torch.save([p.detach() for p in module.parameters()], args.out / f"final-rank{fit.global_rank}.pt")


if __name__ == "__main__":
    main()
