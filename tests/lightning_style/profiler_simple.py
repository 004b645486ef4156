"""Lightning's basic profiler docs: Trainer(profiler="simple") prints a report of where the time went
after fit; SimpleProfiler(dirpath=".", filename="perf_logs") writes it to fit-perf_logs.txt instead.

Run: python profiler_simple.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer
# lightning: from lightning.pytorch.profilers import SimpleProfiler
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer
from trainer.profilers import SimpleProfiler


class BoringModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        loss = self(batch[0]).sum()
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self(batch[0]).sum())

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)


def main(args):
    train = DataLoader(TensorDataset(torch.randn(64, 32)), batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(16, 32)), batch_size=8)
    trainer_kwargs = dict(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=1,
        enable_progress_bar=False,
        enable_model_summary=False,
    )

    trainer = Trainer(profiler="simple", **trainer_kwargs)
    trainer.fit(BoringModel(), train, val)

    profiler = SimpleProfiler(dirpath=".", filename="perf_logs")
    trainer = Trainer(profiler=profiler, **trainer_kwargs)
    trainer.fit(BoringModel(), train, val)
    if trainer.is_global_zero:
        print(f"report files: {sorted(f for f in os.listdir('.') if 'perf_logs' in f)}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
