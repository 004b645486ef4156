"""LearningRateMonitor as in Lightning's docs: a named scheduler, logged every step."""

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import LearningRateMonitor
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=0.1)
        lr_scheduler = {
            "scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step),
            "name": "my_logging_name",
            "interval": "step",
        }
        return [optimizer], [lr_scheduler]


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    lr_monitor = LearningRateMonitor(logging_interval="step")
    trainer = Trainer(max_epochs=2, log_every_n_steps=1, callbacks=[lr_monitor])
    trainer.fit(LitModel(), data)
    logged = lr_monitor.lrs["my_logging_name"]
    assert len(logged) == 8 and abs(logged[-1] - 0.1 * 0.9**7) < 1e-9, logged
    print("logged learning rates:", [round(lr, 4) for lr in logged])
