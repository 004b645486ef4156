"""Lightning's basic examples' shape (autoencoder.py, backbone_image_classifier.py): ``cli_lightning_logo()``,
then a ``LightningCLI(..., run=False)`` with ``trainer_defaults`` holding a callback, ``fit``, then ``test``
and ``predict`` from the best checkpoint. The callback comes from ``lightning.pytorch.callbacks`` imported as a
module (``from lightning.pytorch import callbacks``); the data from ``lightning.pytorch.demos``.

Run: python cli_logo.py [--trainer.devices 2 --trainer.strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningDataModule, LightningModule, Trainer, callbacks, cli_lightning_logo
# lightning: from lightning.pytorch.cli import LightningCLI
# lightning: from lightning.pytorch.demos.boring_classes import RandomDataset
# lightning: from lightning.pytorch.utilities import rank_zero_only
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, random_split

from trainer import DataModule as LightningDataModule, Module as LightningModule, Trainer, callbacks, cli_lightning_logo
from trainer.cli import CLI as LightningCLI
from trainer.demos import RandomDataset
from trainer.utilities import rank_zero_only


class SampleReport(callbacks.Callback):
    def __init__(self, num_samples: int = 3) -> None:
        super().__init__()
        self.num_samples = num_samples

    @rank_zero_only
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        batch = next(iter(DataLoader(trainer.datamodule.val_set, batch_size=self.num_samples)))
        with torch.no_grad():
            pl_module.eval()
            error = F.mse_loss(pl_module(batch), batch)
            pl_module.train()
        print(f"epoch={trainer.current_epoch} reconstruction_error={error:.6f}")


class LitAutoEncoder(LightningModule):
    def __init__(self, hidden_dim: int = 16, learning_rate: float = 1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(32, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
        self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 32))

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        return self._common_step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._common_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._common_step(batch, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=None):
        return self(batch)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    def _common_step(self, batch, stage: str):
        loss = F.mse_loss(self(batch), batch)
        self.log(f"{stage}_loss", loss, on_step=True)
        return loss


class RandomDataModule(LightningDataModule):
    def __init__(self, batch_size: int = 16):
        super().__init__()
        dataset = RandomDataset(32, 256)
        self.test_set = RandomDataset(32, 64)
        self.train_set, self.val_set = random_split(dataset, [192, 64], generator=torch.Generator().manual_seed(42))
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)


def cli_main():
    cli = LightningCLI(
        LitAutoEncoder,
        RandomDataModule,
        seed_everything_default=1234,
        run=False,
        trainer_defaults={
            "callbacks": SampleReport(),
            "max_epochs": 3,
            "accelerator": "cpu",
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
        save_config_kwargs={"overwrite": True},
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.test(ckpt_path="best", datamodule=cli.datamodule)
    predictions = cli.trainer.predict(ckpt_path="best", datamodule=cli.datamodule)
    if cli.trainer.is_global_zero:
        print(predictions[0])


if __name__ == "__main__":
    cli_lightning_logo()
    cli_main()
