"""One DataModule shared by two models, as Lightning's GAN template does with its MNISTDataModule: the GAN
has no validation_step (Lightning skips validation and the sanity check, with a warning, though the
DataModule has a val_dataloader) and draws with ``self.logger.experiment`` (the default logger, TensorBoard
where it is installed); the classifier validates. Names from Lightning's examples: ``cli_lightning_logo``,
``lightning.pytorch.core``, ``lightning.pytorch.trainer``, ``demos.mnist_datamodule.MNISTDataModule``,
``strategies.ParallelStrategy`` and ``utilities.imports._TORCHVISION_AVAILABLE``. The MNIST files are
synthetic, in the layout of the copy Lightning hosts (``PL_USE_MOCKED_MNIST``), so nothing is downloaded.

Run: python shared_datamodule.py [--devices 2 --strategy ddp]
"""

# parity: native default logger
# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import cli_lightning_logo
# lightning: from lightning.pytorch.core import LightningModule
# lightning: from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule
# lightning: from lightning.pytorch.strategies import ParallelStrategy
# lightning: from lightning.pytorch.trainer import Trainer
# lightning: from lightning.pytorch.utilities.imports import _TORCHVISION_AVAILABLE
import os
import warnings
from argparse import ArgumentParser

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer import cli_lightning_logo
from trainer import Module as LightningModule
from trainer.demos import MNISTDataModule
from trainer.strategies import ParallelStrategy
from trainer import Trainer
from trainer.utilities import _TORCHVISION_AVAILABLE

if _TORCHVISION_AVAILABLE:
    import torchvision

os.environ.setdefault("PL_USE_MOCKED_MNIST", "1")  # the hosted copy's layout, written below


def write_mnist(root: str) -> None:
    """320 training and 64 test images of MNIST's shape, where MNIST(root) looks for the hosted copy."""
    folder = os.path.join(root, "MNIST", "complete")
    os.makedirs(folder, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    for name, n in (("training.pt", 320), ("test.pt", 64)):
        images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=generator)
        torch.save((images, torch.randint(0, 10, (n,), generator=generator)), os.path.join(folder, name))


class GAN(LightningModule):
    def __init__(self, latent_dim: int = 16, lr: float = 0.0002):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, 784), nn.Tanh())
        self.discriminator = nn.Sequential(nn.Linear(784, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
        self.validation_z = torch.randn(8, latent_dim)

    def forward(self, z):
        return self.generator(z).view(-1, 1, 28, 28)

    def training_step(self, batch):
        imgs, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)
        valid = torch.ones(imgs.size(0), 1).type_as(imgs)
        fake = torch.zeros(imgs.size(0), 1).type_as(imgs)

        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z).flatten(1)), valid)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real_loss = F.binary_cross_entropy_with_logits(self.discriminator(imgs.flatten(1)), valid)
        fake_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z).detach().flatten(1)), fake)
        d_loss = (real_loss + fake_loss) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr, betas=(0.5, 0.999))
        return opt_g, opt_d

    def on_train_epoch_end(self):
        sample_imgs = self(self.validation_z.type_as(self.generator[0].weight))
        grid = torchvision.utils.make_grid(sample_imgs) if _TORCHVISION_AVAILABLE else sample_imgs[0]
        for logger in self.loggers:
            logger.experiment.add_image("generated_images", grid, self.current_epoch)
            logger.experiment.add_histogram("generator_output", self.generator[-2].weight, self.current_epoch)
            logger.experiment.add_scalar("sample_mean", sample_imgs.mean(), self.current_epoch)


class Classifier(LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))

    def setup(self, stage):
        if isinstance(self.trainer.strategy, ParallelStrategy) and self.trainer.is_global_zero:
            print(f"parallel: num_processes={self.trainer.strategy.num_processes}")

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def fit(model, dm, args):
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=2,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, dm)
    skipped = sorted({str(w.message) for w in caught if "Skipping val loop" in str(w.message)})
    if trainer.is_global_zero:
        metrics = {k: round(float(v), 4) for k, v in sorted(trainer.callback_metrics.items())}
        print(f"{type(model).__name__}: global_step={trainer.global_step} metrics={metrics}")
        print(f"logger={type(trainer.logger).__name__} warnings={skipped}")
    return trainer


if __name__ == "__main__":
    cli_lightning_logo()
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    args = parser.parse_args()

    write_mnist("data")
    dm = MNISTDataModule(data_dir="data", val_split=64, num_workers=0, batch_size=32)
    fit(GAN(), dm, args)
    fit(Classifier(), dm, args)
