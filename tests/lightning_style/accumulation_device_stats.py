"""A gradient-accumulation schedule and device statistics, as Lightning's docs configure them: more
micro-batches per step in later epochs (``GradientAccumulationScheduler``) and the device's (and
host's) memory and utilisation in the logger's metrics (``DeviceStatsMonitor``).

Run: python accumulation_device_stats.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.callbacks import DeviceStatsMonitor, GradientAccumulationScheduler
# lightning: from lightning.pytorch.loggers import CSVLogger
import csv
from argparse import ArgumentParser
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer, seed_everything
from trainer.callbacks import DeviceStatsMonitor, GradientAccumulationScheduler
from trainer.loggers import CSVLogger


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def on_train_epoch_end(self):
        self.print(f"epoch={self.current_epoch} accumulate_grad_batches={self.trainer.accumulate_grad_batches}")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(args):
    seed_everything(1)
    x = torch.randn(64, 8)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=3,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=CSVLogger("logs"),
        callbacks=[GradientAccumulationScheduler(scheduling={1: 2, 2: 4}), DeviceStatsMonitor(cpu_stats=True)],
    )
    trainer.fit(LitModel(), data)
    if trainer.is_global_zero:
        with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
            columns = next(csv.reader(f))
        stats = sorted(c for c in columns if c.startswith("DeviceStatsMonitor."))
        print(f"global_step={trainer.global_step} device_stats={stats}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
