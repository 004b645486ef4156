"""Two validation loaders and two test loaders: the steps take dataloader_idx and self.log adds
"/dataloader_idx_N" to each key, as in Lightning's "multiple dataloaders" docs.

Run: python several_val_loaders.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer
from argparse import ArgumentParser

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer


def make_loader(n, shift, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator) + shift
    y = x.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(x, y), batch_size=16)


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 1)
        self.val_batches = [0, 0]

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        if not self.trainer.sanity_checking:
            self.val_batches[dataloader_idx] += 1
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(args):
    model = LitModel()
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
    near, far = make_loader(64, 0.0, 1), make_loader(32, 3.0, 2)
    trainer.fit(model, train_dataloaders=make_loader(128, 0.0, 0), val_dataloaders=[near, far])
    validated = trainer.validate(model, dataloaders=[near, far], verbose=False)
    tested = trainer.test(model, dataloaders=[near, far], verbose=False)
    if trainer.is_global_zero:
        print(f"callback_metrics={sorted(trainer.callback_metrics)}")
        print(f"val_batches={model.val_batches}")
        for i, (val, test) in enumerate(zip(validated, tested)):
            print(f"loader {i}: validate={sorted(val)} test={sorted(test)}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
