"""A ShuffleNet-style classifier (grouped 1x1 convs + ``nn.ChannelShuffle``) on generated images.

Shows the same strategy swap and AMP as the flagship recipe, at a size that trains in seconds:

    python recipes/shufflenet_synthetic.py fit --trainer.max_epochs 2
    python recipes/shufflenet_synthetic.py fit --trainer.strategy ddp --trainer.devices 2
    python recipes/shufflenet_synthetic.py fit --trainer.precision bf16-mixed
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchmetrics.classification import MulticlassAccuracy

if __package__ in (None, ""):  # run as a script: make `recipes` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trainer
from recipes.shufflenet import ShuffleNet, SyntheticShapes


class ShuffleNetClassifier(trainer.Module):
    """Cross-entropy classifier; validation accuracy is a torchmetrics metric (exact under DDP)."""

    def __init__(
        self,
        n_classes: int = 10,
        groups: int = 3,
        lr: float = 0.05,
        stem: int = 24,
        widths: tuple[int, ...] = (60, 120, 240),
        depths: tuple[int, ...] = (2, 3, 2),
    ) -> None:
        """
        Args:
            n_classes: number of classes.
            groups: groups of the pointwise convolutions (and of the channel shuffle).
            lr: SGD learning rate (momentum 0.9, weight decay 5e-4).
            stem: channels of the first convolution.
            widths: channels of each stage (divisible by groups).
            depths: units per stage.
        """
        super().__init__()
        self.net = ShuffleNet(n_classes=n_classes, groups=groups, widths=widths, depths=depths, stem=stem)
        self.lr = lr
        self.val_acc = MulticlassAccuracy(num_classes=n_classes, average="micro")

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.cross_entropy(self.net(images), labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self.net(images)
        self.log("val_loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.val_acc.update(logits, labels)
        self.log("val_acc", self.val_acc, prog_bar=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9, weight_decay=5e-4)


class ShapesData(trainer.DataModule):
    """Generated class-dependent stripe images; nothing is stored, so ranks share no state."""

    def __init__(
        self,
        n_train: int = 2048,
        n_val: int = 512,
        size: int = 32,
        n_classes: int = 10,
        batch_size: int = 64,
        num_workers: int = 0,
    ) -> None:
        """
        Args:
            n_train: training images.
            n_val: validation images.
            size: image side in pixels.
            n_classes: number of classes.
            batch_size: per-rank batch size.
            num_workers: DataLoader workers per rank.
        """
        self.n_train, self.n_val, self.size, self.n_classes = n_train, n_val, size, n_classes
        self.batch_size, self.num_workers = batch_size, num_workers

    def train_dataloader(self) -> DataLoader[Any]:
        data = SyntheticShapes(self.n_train, self.size, self.n_classes, seed=0)
        return DataLoader(data, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader[Any]:
        data = SyntheticShapes(self.n_val, self.size, self.n_classes, seed=1)
        return DataLoader(data, batch_size=self.batch_size, num_workers=self.num_workers)


def main(args: list[str] | None = None) -> None:
    from trainer.cli import CLI

    cli = CLI(ShuffleNetClassifier, ShapesData, args=args)
    if cli.subcommand == "fit" and cli.trainer.is_global_zero:
        accuracy = cli.trainer.callback_metrics.get("val_acc")
        if accuracy is not None:
            print(f"validation accuracy: {float(accuracy):.4f}")


if __name__ == "__main__":
    main()
