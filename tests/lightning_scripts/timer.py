"""Timer as in Lightning's docs: a time budget, then each stage's time queried."""

from datetime import timedelta

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Timer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    # stop training after 12 hours
    timer = Timer(duration="00:12:00:00")
    # or provide a datetime.timedelta
    timer = Timer(duration=timedelta(weeks=1))
    # or provide a dictionary
    timer = Timer(duration=dict(weeks=4, days=2))
    # force training to stop after given time limit
    trainer = Trainer(max_epochs=3, callbacks=[timer])
    model = LitModel()
    trainer.fit(model, data, data)
    trainer.test(model, data)
    # query training/validation/test time (in seconds)
    print("train", timer.time_elapsed("train"), "validate start", timer.start_time("validate"))
    assert 0 < timer.time_elapsed("train") < 600 and timer.end_time("test") is not None
    assert timer.time_remaining() > timedelta(weeks=4).total_seconds() and trainer.current_epoch == 3

    # a budget already spent stops training at the first check
    stopped = Trainer(max_epochs=3, callbacks=[Timer(duration=dict(seconds=0))])
    stopped.fit(LitModel(), data)
    assert stopped.current_epoch == 0, stopped.current_epoch
