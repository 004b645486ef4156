"""A classifier with torchmetrics Accuracy logged through self.log, fed by a LightningDataModule,
checkpointed on the best validation accuracy and tested on it (trainer.test(ckpt_path="best")).

Run: python classifier_datamodule.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.callbacks import ModelCheckpoint
from argparse import ArgumentParser

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics import Accuracy

from trainer import DataModule as LightningDataModule, Module as LightningModule, Trainer, seed_everything
from trainer.callbacks import ModelCheckpoint


class BlobsDataModule(LightningDataModule):
    def __init__(self, num_samples: int = 1200, num_classes: int = 4, batch_size: int = 32):
        super().__init__()
        self.num_samples = num_samples
        self.num_classes = num_classes
        self.batch_size = batch_size

    def prepare_data(self):
        # download, tokenize, ... (nothing to do for synthetic data)
        pass

    def setup(self, stage: str):
        generator = torch.Generator().manual_seed(7)
        centers = 0.7 * torch.randn(self.num_classes, 16, generator=generator)
        y = torch.randint(0, self.num_classes, (self.num_samples,), generator=generator)
        x = centers[y] + torch.randn(self.num_samples, 16, generator=generator)
        full = TensorDataset(x, y)
        self.train_set, self.val_set, self.test_set = random_split(full, [0.7, 0.15, 0.15], generator=generator)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=self.batch_size)


class LitClassifier(LightningModule):
    def __init__(self, num_classes: int = 4, hidden_dim: int = 32, learning_rate: float = 1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(16, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, num_classes))
        self.train_acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.valid_acc = Accuracy(task="multiclass", num_classes=num_classes)
        self.test_acc = Accuracy(task="multiclass", num_classes=num_classes)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.valid_acc.update(logits, y)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True, sync_dist=True)
        self.log("valid_acc", self.valid_acc, on_step=False, on_epoch=True, prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.test_acc(self(x), y)
        self.log("test_acc", self.test_acc)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


def main(args):
    seed_everything(1234)
    dm = BlobsDataModule()
    model = LitClassifier(hidden_dim=args.hidden_dim)
    checkpoint_callback = ModelCheckpoint(monitor="valid_acc", mode="max", save_top_k=1)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=args.max_epochs,
        callbacks=[checkpoint_callback],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm)
    result = trainer.test(ckpt_path="best", datamodule=dm, verbose=False)
    if trainer.is_global_zero:
        print(f"best_model_score={checkpoint_callback.best_model_score:.4f}")
        print(f"best_model_path={checkpoint_callback.best_model_path}")
        print(f"test_acc={result[0]['test_acc']:.4f}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--max_epochs", type=int, default=4)
    parser.add_argument("--hidden_dim", type=int, default=32)
    main(parser.parse_args())
