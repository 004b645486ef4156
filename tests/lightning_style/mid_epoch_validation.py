"""Validation four times per training epoch (val_check_interval=0.25) and a ReduceLROnPlateau
scheduler configured as a dict with monitor / interval / frequency, as in Lightning's
configure_optimizers docs.

Run: python mid_epoch_validation.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer, seed_everything


class LitRegressor(LightningModule):
    def __init__(self, lr: float = 0.2):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.validations = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y), prog_bar=True, sync_dist=True)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.validations.append((self.current_epoch, self.global_step))

    def on_train_epoch_end(self):
        # the val_loss the scheduler is about to see: the last validation's, at the end of this epoch
        self.print(f"epoch={self.current_epoch} val_loss={self.trainer.callback_metrics['val_loss']:.6f}")

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0),
                "monitor": "val_loss",
                "interval": "epoch",
                "frequency": 1,
            },
        }


def main(args):
    seed_everything(3)
    x = torch.randn(320, 8)
    y = x @ torch.randn(8, 1) + 0.3 * torch.randn(320, 1)
    train_loader = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[256:], y[256:]), batch_size=32)

    model = LitRegressor()
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=4,
        val_check_interval=0.25,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train_loader, val_loader)
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    if trainer.is_global_zero:
        print(f"validations={model.validations}")
        print(f"scheduler_best={scheduler.best:.6f} last_epoch={scheduler.last_epoch}")
        print(f"lr={trainer.optimizers[0].param_groups[0]['lr']}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
