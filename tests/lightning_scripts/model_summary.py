"""ModelSummary as in Lightning's docs, with an example input for the shapes."""

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 512), nn.BatchNorm1d(512))
        self.head = nn.Linear(512, 1)
        self.example_input_array = torch.zeros(10, 256)  # optional

    def forward(self, x):
        return self.head(self.net(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(16, 256), torch.randn(16, 1)), batch_size=8)
    trainer = Trainer(max_epochs=1, callbacks=[ModelSummary(max_depth=-1)])
    trainer.fit(LitModel(), data)
