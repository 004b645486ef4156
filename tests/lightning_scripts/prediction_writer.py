"""BasePredictionWriter as in Lightning's docs: per-batch and per-epoch writers."""

import os

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class CustomWriter(BasePredictionWriter):
    def __init__(self, output_dir, write_interval):
        super().__init__(write_interval)
        self.output_dir = output_dir

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        os.makedirs(os.path.join(self.output_dir, str(dataloader_idx)), exist_ok=True)
        torch.save(prediction, os.path.join(self.output_dir, str(dataloader_idx), f"{batch_idx}.pt"))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        # this will create N (num processes) files in `output_dir` each containing
        # the predictions of it's respective rank
        torch.save(predictions, os.path.join(self.output_dir, f"predictions_{trainer.global_rank}.pt"))
        # optionally, you can also save `batch_indices` to get the information about the data index
        # from your prediction data
        torch.save(batch_indices, os.path.join(self.output_dir, f"batch_indices_{trainer.global_rank}.pt"))


class BoringModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)

    def predict_step(self, batch, batch_idx):
        return self(batch[0])


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(20, 4)), batch_size=8)
    model = BoringModel()
    os.makedirs("pred_path", exist_ok=True)
    trainer = Trainer(callbacks=[CustomWriter(output_dir="pred_path", write_interval="epoch")])
    trainer.predict(model, data, return_predictions=False)
    predictions = torch.load("pred_path/predictions_0.pt")
    assert [p.shape[0] for p in predictions] == [8, 8, 4]
    assert torch.load("pred_path/batch_indices_0.pt") == [[list(range(8)), list(range(8, 16)), list(range(16, 20))]]

    trainer = Trainer(callbacks=[CustomWriter(output_dir="batches", write_interval="batch")])
    trainer.predict(model, data, return_predictions=False)
    assert sorted(os.listdir("batches/0")) == ["0.pt", "1.pt", "2.pt"]
    assert torch.equal(torch.load("batches/0/2.pt"), predictions[2])
