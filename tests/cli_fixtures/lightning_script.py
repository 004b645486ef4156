"""A LightningCLI script exactly as a Lightning user writes it (Lightning's imports).

tests/test_cli.py swaps its import lines, and only them, for steadytrain's and runs it:
``python lightning_script.py fit --config lightning_config.yaml``.
"""

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(LightningModule):
    def __init__(self, num_features: int = 2, num_classes: int = 2, hidden: int = 8, lr: float = 0.1):
        """A small MLP classifier.

        Args:
            num_features: Inputs per sample (linked from the data).
            num_classes: Output classes (linked from the data once it is built).
            hidden: Width of the hidden layer.
            lr: Learning rate of SGD.
        """
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(num_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Blobs(LightningDataModule):
    def __init__(self, num_features: int = 2, num_blobs: int = 2, size: int = 64, batch_size: int = 16):
        """Gaussian blobs, one class per blob.

        Args:
            num_features: Inputs per sample.
            num_blobs: Number of blobs (classes).
            size: Samples per split.
            batch_size: Samples per batch.
        """
        super().__init__()
        self.num_features = num_features
        self.num_classes = num_blobs
        self.size = size
        self.batch_size = batch_size

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        labels = torch.randint(self.num_classes, (self.size,), generator=generator)
        centres = torch.randn(self.num_classes, self.num_features, generator=generator) * 3
        points = centres[labels] + torch.randn(self.size, self.num_features, generator=generator)
        self.dataset = TensorDataset(points, labels)

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)


class ClassifierCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults({"early_stopping.monitor": "val_loss", "early_stopping.patience": 5})
        parser.link_arguments("data.num_features", "model.num_features", apply_on="parse")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")

    def before_fit(self):
        print(f"fitting {self.model.net[-1].out_features} classes, seed {self.config.fit.seed_everything}")

    def after_fit(self):
        val_loss = self.trainer.callback_metrics["val_loss"]
        print(f"done after {self.trainer.current_epoch} epochs, val_loss {float(val_loss):.4f}")


if __name__ == "__main__":
    ClassifierCLI(
        Classifier,
        Blobs,
        trainer_defaults={"max_epochs": 1, "limit_train_batches": 2, "enable_progress_bar": False},
        seed_everything_default=1234,
        save_config_kwargs={"overwrite": True},
    )
