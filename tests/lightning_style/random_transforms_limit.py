"""``limit_train_batches`` with a dataset that draws a random augmentation per sample, as Lightning's
fine-tuning and ImageNet templates do (RandomHorizontalFlip, RandomResizedCrop): the loop must not load a
batch it will not train on, or the extra batch's draws move the random stream and the next epoch's shuffle
and augmentations differ. The dataset counts its ``__getitem__`` calls.

Run: python random_transforms_limit.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
from argparse import ArgumentParser

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from trainer import Module as LightningModule, Trainer, seed_everything


class Augmented(Dataset):
    """64 samples; each read flips its image at random and adds noise, as a training transform does."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.rand(64, 1, 8, 8, generator=generator)
        self.labels = (self.images.mean(dim=(1, 2, 3)) > 0.5).long()
        self.reads = 0

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        self.reads += 1
        image = self.images[index]
        if torch.rand(1) < 0.5:
            image = image.flip(-1)
        return image + 0.05 * torch.randn_like(image), self.labels[index]


class Classifier(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    args = parser.parse_args()

    seed_everything(7)
    dataset = Augmented()
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=2,
        limit_train_batches=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Classifier()
    trainer.fit(model, DataLoader(dataset, batch_size=4, shuffle=True))
    weight = model.net[1].weight
    print(f"rank={trainer.global_rank} reads={dataset.reads} global_step={trainer.global_step}")
    if trainer.is_global_zero:
        print(f"train_loss={trainer.callback_metrics['train_loss']:.6f} weight_sum={weight.sum():.6f}")
