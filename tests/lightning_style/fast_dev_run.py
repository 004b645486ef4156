"""Lightning's debugging docs: Trainer(fast_dev_run=True) runs one batch of training, validation and
test to find bugs fast, with no sanity check, logging or checkpoints; fast_dev_run=3 runs three.

Run: python fast_dev_run.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.seen = {"train": 0, "val": 0, "test": 0}

    def training_step(self, batch, batch_idx):
        self.seen["train"] += 1
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.seen["val"] += 1
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        self.seen["test"] += 1
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(args):
    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4)
    for fast_dev_run in (True, 3):
        model = LitModel()
        trainer = Trainer(
            accelerator=args.accelerator,
            devices=args.devices,
            strategy=args.strategy,
            fast_dev_run=fast_dev_run,
            enable_progress_bar=False,
        )
        trainer.fit(model, data, data)
        trainer.test(model, data, verbose=False)
        if trainer.is_global_zero:
            print(f"fast_dev_run={fast_dev_run} seen={model.seen} global_step={trainer.global_step}")
    if trainer.is_global_zero:
        print(f"files written: {sorted(os.listdir('.'))}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
