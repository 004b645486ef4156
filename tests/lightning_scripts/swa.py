"""StochasticWeightAveraging as in Lightning's docs (training tricks)."""

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import StochasticWeightAveraging
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model = LitModel()
    swa = StochasticWeightAveraging(swa_lrs=1e-2)
    trainer = Trainer(max_epochs=5, callbacks=[swa])
    trainer.fit(model, data)
    assert swa.n_averaged == 2  # the weights at the starts of epochs 4 and 5 (0.8 * 5 = epoch 4 on)
    assert 1e-2 < trainer.optimizers[0].param_groups[0]["lr"] < 0.1  # annealing towards swa_lrs
