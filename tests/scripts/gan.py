"""A small GAN with manual optimization, and the same training written by hand in plain PyTorch.

    python gan.py OUT_DIR [--strategy ddp --devices 2] [--epochs E] [--resume CKPT] [--every-step]

Run as a script (the 2-rank DDP test) it trains with the Trainer on a global batch of 16 and saves
each rank's final parameters to ``OUT_DIR/params-rank<r>.pt``. The noise ``z`` comes with the data,
so every strategy sees the same samples and the same noise.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer

GLOBAL_BATCH = 16
CLIP = 0.5


def gan_data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    real = torch.randn(n, 8, generator=g) * 0.5 + 1.0
    return TensorDataset(real, torch.randn(n, 4, generator=g))


def networks() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    discriminator = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    return generator, discriminator


def optimizers(g: nn.Module, d: nn.Module) -> tuple[list[torch.optim.Optimizer], list[Any]]:
    opt_g = torch.optim.Adam(g.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=1e-3, betas=(0.5, 0.999))
    return [opt_g, opt_d], [torch.optim.lr_scheduler.StepLR(opt_g, 3, 0.5), torch.optim.lr_scheduler.StepLR(opt_d, 3)]


def losses(g: nn.Module, d: nn.Module, real: torch.Tensor, z: torch.Tensor) -> tuple[Any, Any]:
    bce = nn.functional.binary_cross_entropy_with_logits
    fake = g(z)

    def g_loss() -> torch.Tensor:
        return bce(d(fake), torch.ones(len(z), 1))

    def d_loss() -> torch.Tensor:
        return (bce(d(real), torch.ones(len(real), 1)) + bce(d(fake.detach()), torch.zeros(len(z), 1))) / 2

    return g_loss, d_loss


class GAN(trainer.Module):
    """What a Lightning user writes: toggle, manual_backward, clip, step, schedulers by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.discriminator = networks()

    def training_step(self, batch: Any, batch_idx: int) -> None:
        real, z = batch
        opt_g, opt_d = self.optimizers()
        g_loss, d_loss = losses(self.generator, self.discriminator, real, z)
        self.toggle_optimizer(opt_g)
        loss_g = g_loss()
        opt_g.zero_grad()
        self.manual_backward(loss_g)
        self.clip_gradients(opt_g, gradient_clip_val=CLIP, gradient_clip_algorithm="norm")
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        self.toggle_optimizer(opt_d)
        loss_d = d_loss()
        opt_d.zero_grad()
        self.manual_backward(loss_d)
        opt_d.step()
        self.untoggle_optimizer(opt_d)
        if self.trainer.is_last_batch:
            for scheduler in self.lr_schedulers():
                scheduler.step()
        self.log_dict({"g_loss": loss_g, "d_loss": loss_d}, prog_bar=True)

    def configure_optimizers(self) -> Any:
        return optimizers(self.generator, self.discriminator)


def hand_written(epochs: int, batch_size: int = GLOBAL_BATCH) -> list[torch.Tensor]:
    """The same GAN in plain PyTorch: what the Trainer must equal bit for bit on one device."""
    g, d = networks()
    (opt_g, opt_d), schedulers = optimizers(g, d)
    loader = DataLoader(gan_data(), batch_size=batch_size)
    for _ in range(epochs):
        for i, (real, z) in enumerate(loader):
            g_loss, d_loss = losses(g, d, real, z)
            for p in d.parameters():
                p.requires_grad = False
            loss_g = g_loss()
            opt_g.zero_grad()
            loss_g.backward()
            torch.nn.utils.clip_grad_norm_([p for p in g.parameters() if p.grad is not None], CLIP)
            opt_g.step()
            for p in d.parameters():
                p.requires_grad = True
            for p in g.parameters():
                p.requires_grad = False
            loss_d = d_loss()
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            for p in g.parameters():
                p.requires_grad = True
            if i == len(loader) - 1:
                for scheduler in schedulers:
                    scheduler.step()
    return [p.detach().clone() for p in [*g.parameters(), *d.parameters()]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=args.strategy,
        devices=args.devices,
        max_epochs=args.epochs,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    module = GAN()
    fit.fit(module, DataLoader(gan_data(), batch_size=GLOBAL_BATCH // args.devices))
    params = [p.detach().clone() for p in [*module.generator.parameters(), *module.discriminator.parameters()]]
    torch.save({"params": params, "global_step": fit.global_step}, args.out / f"params-rank{fit.global_rank}.pt")


if __name__ == "__main__":
    main()
