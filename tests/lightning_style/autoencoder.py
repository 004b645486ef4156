"""The autoencoder of Lightning's "Lightning in 15 minutes", on MNIST-like synthetic digits.

Run: python autoencoder.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
from argparse import ArgumentParser

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

from trainer import Module as LightningModule, Trainer, seed_everything


def fake_mnist(n):
    """Ten blurry "digits": a fixed 28x28 template per class plus noise."""
    generator = torch.Generator().manual_seed(0)
    templates = torch.rand(10, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (n,), generator=generator)
    images = (templates[labels] + 0.1 * torch.randn(n, 1, 28, 28, generator=generator)).clamp(0, 1)
    return TensorDataset(images, labels)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))

    def forward(self, x):
        return self.l1(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def forward(self, x):
        return self.l1(x)


class LitAutoEncoder(LightningModule):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def training_step(self, batch, batch_idx):
        # training_step defines the train loop.
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        # this is the validation loop
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        val_loss = F.mse_loss(x_hat, x)
        self.log("val_loss", val_loss, sync_dist=True)

    def test_step(self, batch, batch_idx):
        # this is the test loop
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        test_loss = F.mse_loss(x_hat, x)
        self.log("test_loss", test_loss, sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer


def main(args):
    seed_everything(42)
    train_set = fake_mnist(1024)
    test_set = fake_mnist(256)

    # use 20% of training data for validation
    train_set_size = int(len(train_set) * 0.8)
    valid_set_size = len(train_set) - train_set_size

    # split the train set into two
    seed = torch.Generator().manual_seed(42)
    train_set, valid_set = random_split(train_set, [train_set_size, valid_set_size], generator=seed)

    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    valid_loader = DataLoader(valid_set, batch_size=64)
    test_loader = DataLoader(test_set, batch_size=64)

    autoencoder = LitAutoEncoder(Encoder(), Decoder())
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=args.max_epochs,
        enable_progress_bar=False,
    )
    trainer.fit(model=autoencoder, train_dataloaders=train_loader, val_dataloaders=valid_loader)
    val_loss = trainer.callback_metrics["val_loss"]  # each stage starts with no metrics: read it before test
    results = trainer.test(autoencoder, dataloaders=test_loader, verbose=False)
    if trainer.is_global_zero:
        print(f"world_size={trainer.world_size} val_loss={val_loss:.4f}")
        print(f"test_loss={results[0]['test_loss']:.4f}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--max_epochs", type=int, default=3)
    main(parser.parse_args())
