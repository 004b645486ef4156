"""A regressor logged to MLflow with Lightning's MLFlowLogger: hyper-parameters, metrics, the best
checkpoint as an artifact (log_model=True), then read back through logger.experiment (an MlflowClient).

MLflow 3 refuses new runs in its file store (Lightning's default ``file:./mlruns``), so the script
names a SQLite store, as MLflow's docs advise.

Run: python mlflow_logger.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.callbacks import ModelCheckpoint
# lightning: from lightning.pytorch.loggers import MLFlowLogger
from argparse import ArgumentParser
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer, seed_everything
from trainer.callbacks import ModelCheckpoint
from trainer.loggers import MLFlowLogger


class Regressor(LightningModule):
    def __init__(self, hidden_dim: int = 32, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main(args):
    seed_everything(7)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(320, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(320, 1, generator=generator)
    train_loader = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[256:], y[256:]), batch_size=16)

    mlf_logger = MLFlowLogger(
        experiment_name="lightning_logs",
        run_name="regressor",
        tracking_uri="sqlite:///mlflow.db",
        log_model=True,
    )
    checkpoint_callback = ModelCheckpoint(monitor="val_loss", save_top_k=1)
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=3,
        logger=mlf_logger,
        callbacks=[checkpoint_callback],
        log_every_n_steps=5,
        enable_progress_bar=False,
    )
    trainer.fit(Regressor(), train_dataloaders=train_loader, val_dataloaders=val_loader)

    if trainer.is_global_zero:
        client = mlf_logger.experiment
        run = client.get_run(mlf_logger.run_id)
        runs = client.search_runs([mlf_logger.experiment_id])
        steps = [m.step for m in client.get_metric_history(mlf_logger.run_id, "train_loss")]
        artifacts = sorted(a.path for a in client.list_artifacts(mlf_logger.run_id))
        print(f"world_size={trainer.world_size} runs={len(runs)} status={run.info.status}")
        print(f"run_name={run.data.tags['mlflow.runName']} lr={run.data.params['lr']}")
        print(f"global_step={trainer.global_step} train_loss_steps={','.join(map(str, steps))}")
        logged, seen = run.data.metrics["val_loss"], trainer.callback_metrics["val_loss"]
        print(f"val_loss={logged:.5f} callback_val_loss={seen:.5f}")
        print(f"artifacts={','.join(artifacts)} best={Path(checkpoint_callback.best_model_path).stem}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
