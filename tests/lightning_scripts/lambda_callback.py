"""LambdaCallback as in Lightning's docs (setup gets `stage=` by keyword, as Lightning passes it)."""

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import LambdaCallback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    epochs = []
    callback = LambdaCallback(
        setup=lambda trainer, pl_module, stage: print("setup", stage),
        on_train_epoch_end=lambda trainer, pl_module: epochs.append(trainer.current_epoch),
    )
    trainer = Trainer(max_epochs=3, callbacks=[callback])
    trainer.fit(LitModel(), data)
    assert epochs == [0, 1, 2], epochs
