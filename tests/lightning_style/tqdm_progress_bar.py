"""Lightning's progress bar docs: TQDMProgressBar(refresh_rate=10) as the Trainer's bar; the bar shows
what the module logs with prog_bar=True and, in a log file, ends every epoch at 100%.

Run: python tqdm_progress_bar.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer
# lightning: from lightning.pytorch.callbacks import TQDMProgressBar
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer
from trainer.callbacks import TQDMProgressBar


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(args):
    torch.manual_seed(0)
    x = torch.randn(100, 4)
    y = x.sum(dim=1, keepdim=True)
    train = DataLoader(TensorDataset(x, y), batch_size=4)
    val = DataLoader(TensorDataset(x[:24], y[:24]), batch_size=4)
    bar = TQDMProgressBar(refresh_rate=10)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=2,
        callbacks=[bar],
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(LitModel(), train, val)
    if trainer.is_global_zero:
        print(f"bar={type(trainer.progress_bar_callback).__name__} refresh_rate={bar.refresh_rate}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
