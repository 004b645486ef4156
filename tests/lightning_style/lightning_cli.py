"""A LightningCLI script in the style of Lightning's CLI docs: the model and data come from a YAML
config, and so do the optimizer and scheduler (LightningCLI's automatic configure_optimizers);
trainer_defaults and seed_everything_default set what the config leaves out.

Run: python lightning_cli.py fit --config lightning_cli.yaml [--trainer.devices 2 --trainer.strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningDataModule, LightningModule
# lightning: from lightning.pytorch.cli import LightningCLI
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import DataModule as LightningDataModule, Module as LightningModule
from trainer.cli import CLI as LightningCLI


class DemoModel(LightningModule):
    def __init__(self, out_dim: int = 10, hidden_dim: int = 32):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(32, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y), sync_dist=True)


class RandomDataModule(LightningDataModule):
    def __init__(self, num_samples: int = 256, num_classes: int = 10, batch_size: int = 32):
        super().__init__()
        self.num_samples = num_samples
        self.num_classes = num_classes
        self.batch_size = batch_size

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.num_samples, 32, generator=generator)
        y = x[:, : self.num_classes].argmax(dim=1)
        self.train_set = TensorDataset(x[: self.num_samples // 2], y[: self.num_samples // 2])
        self.val_set = TensorDataset(x[self.num_samples // 2 :], y[self.num_samples // 2 :])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


def cli_main():
    cli = LightningCLI(
        DemoModel,
        RandomDataModule,
        trainer_defaults={"enable_progress_bar": False, "enable_model_summary": False},
        seed_everything_default=1234,
        save_config_kwargs={"overwrite": True},
    )
    log_dir = cli.trainer.log_dir  # on every rank: Lightning's log_dir is a collective under DDP
    if cli.trainer.is_global_zero:
        optimizer = cli.trainer.optimizers[0]
        scheduler = cli.trainer.lr_scheduler_configs[0].scheduler
        print(f"hparams={dict(cli.model.hparams)}")
        print(f"optimizer={type(optimizer).__name__} lr={optimizer.param_groups[0]['lr']:.6f}")
        print(f"scheduler={type(scheduler).__name__} epochs={cli.trainer.current_epoch}")
        print(f"val_loss={cli.trainer.callback_metrics['val_loss']:.4f} log_dir={log_dir}")


if __name__ == "__main__":
    cli_main()
