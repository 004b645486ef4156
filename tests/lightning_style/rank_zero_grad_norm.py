"""Rank-zero helpers and gradient norms, as Lightning's docs use them: ``@rank_zero_only`` on a function
that reports, ``rank_zero_info``/``rank_zero_warn`` for messages, and ``grad_norm`` logged from
``on_before_optimizer_step`` (Lightning's recipe for tracking gradient norms).

Run: python rank_zero_grad_norm.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.utilities import grad_norm, rank_zero_info, rank_zero_only
# lightning: from lightning.pytorch.utilities.rank_zero import rank_zero_warn
import logging
import os
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer, seed_everything
from trainer.utilities import grad_norm, rank_zero_info, rank_zero_only
from trainer.utilities import rank_zero_warn


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer):
        norms = grad_norm(self.net, norm_type=2)
        self.log_dict(norms)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


@rank_zero_only
def report(trainer):
    norm = trainer.callback_metrics["grad_2.0_norm_total"]
    print(f"report from pid={os.getpid()} global_step={trainer.global_step} grad_norm_total={norm:.4f}")


def main(args):
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seed_everything(7)
    x = torch.randn(64, 8)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    model = LitModel()
    trainer.fit(model, data)
    rank_zero_info(f"info: rank_zero_only.rank={rank_zero_only.rank} world_size={trainer.world_size}")
    rank_zero_warn("warning: printed once")
    keys = sorted(k for k in trainer.callback_metrics if k.startswith("grad_"))
    print(f"rank={trainer.global_rank} rank_zero_only.rank={rank_zero_only.rank} grad_keys={keys}")
    report(trainer)


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
