"""Lightning's Tuner before a fit, as its docs show it: ``scale_batch_size`` finds the largest batch size
(read by the DataModule from ``self.batch_size``), ``lr_find`` sets the module's ``lr`` to its
suggestion, and the fit trains with both. Batch scaling is single-device only, in Lightning too.

Run: python tuner.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.tuner import Tuner
import importlib.util
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import DataModule as LightningDataModule, Module as LightningModule, Trainer, seed_everything
from trainer.tuner import Tuner


class RegressionData(LightningDataModule):
    def __init__(self, batch_size: int = 4):
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size

    def setup(self, stage):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(128, 8, generator=g)
        self.data = TensorDataset(x, x @ torch.randn(8, 1, generator=g))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=True)


class LitRegressor(LightningModule):
    def __init__(self, lr: float = 1e-4):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main(args):
    seed_everything(42)
    model, data = LitRegressor(), RegressionData()
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=30,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    tuner = Tuner(trainer)
    if trainer.world_size == 1:
        found = tuner.scale_batch_size(model, datamodule=data, mode="binsearch", steps_per_trial=1)
        print(f"batch_size={found} datamodule.batch_size={data.batch_size}")
    lr_finder = tuner.lr_find(model, datamodule=data, min_lr=1e-5, max_lr=1.0, num_training=60)
    if importlib.util.find_spec("matplotlib") is not None:
        lr_finder.plot(suggest=True).savefig("lr_find.png")
    trainer.fit(model, datamodule=data)
    if trainer.is_global_zero:
        suggestion = lr_finder.suggestion()
        shown = "none" if suggestion is None else f"{suggestion:.3e}"  # too few points: no suggestion, lr unchanged
        print(f"points={len(lr_finder.results['lr'])} suggestion={shown} model_lr={model.hparams.lr:.3e}")
        print(f"global_step={trainer.global_step} train_loss={trainer.callback_metrics['train_loss']:.4f}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
