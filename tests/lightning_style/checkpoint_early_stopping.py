"""ModelCheckpoint and EarlyStopping on a monitored metric, hyper-parameters saved with
save_hyperparameters() (in the module and in the LightningDataModule), the best checkpoint tested
with trainer.test(ckpt_path="best") and reloaded with load_from_checkpoint.

Run: python checkpoint_early_stopping.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import DataModule as LightningDataModule, Module as LightningModule, Trainer, seed_everything
from trainer.callbacks import EarlyStopping, ModelCheckpoint


class NoisyLineDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 16, noise: float = 0.5):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(320, 4, generator=generator)
        y = x.sum(dim=1, keepdim=True) + self.hparams.noise * torch.randn(320, 1, generator=generator)
        self.train_set = TensorDataset(x[:256], y[:256])
        self.val_set = TensorDataset(x[256:], y[256:])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class LitModel(LightningModule):
    def __init__(self, hidden_dim: int = 64, learning_rate: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(4, self.hparams.hidden_dim), nn.ReLU(), nn.Linear(self.hparams.hidden_dim, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y), prog_bar=True, sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)


def main(args):
    seed_everything(42)
    dm = NoisyLineDataModule()
    model = LitModel(hidden_dim=args.hidden_dim)
    checkpoint_callback = ModelCheckpoint(
        monitor="val_loss", mode="min", save_top_k=2, filename="{epoch}-{val_loss:.3f}"
    )
    early_stop_callback = EarlyStopping(monitor="val_loss", min_delta=0.01, patience=2, mode="min")
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=50,
        callbacks=[checkpoint_callback, early_stop_callback],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm)
    test_result = trainer.test(ckpt_path="best", datamodule=dm, verbose=False)

    best = LitModel.load_from_checkpoint(checkpoint_callback.best_model_path)
    if trainer.is_global_zero:
        print(f"stopped_epoch={early_stop_callback.stopped_epoch} current_epoch={trainer.current_epoch}")
        print(f"best_model_score={checkpoint_callback.best_model_score:.4f}")
        print(f"test_loss={test_result[0]['test_loss']:.4f}")
        print(f"reloaded hidden_dim={best.hparams.hidden_dim} learning_rate={best.hparams.learning_rate}")
        print(f"datamodule hparams={dict(dm.hparams)}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--hidden_dim", type=int, default=64)
    main(parser.parse_args())
