"""Trainer-level DDP scenarios for tests/test_ddp_trainer.py (self-launched: 2 CPU ranks).

    python ddp_job.py OUT MODE [--devices N] [--strategy ddp|single] [--resume CKPT]

Every rank writes ``OUT/<mode>-rank<r>.pt`` with what the test checks.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import BinaryAccuracy

import trainer
from trainer.strategies.ddp import DDPStrategy


def data(n: int, features: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    return TensorDataset(x, (x.sum(dim=1, keepdim=True) > 0).float())


class Net(trainer.Module):
    def __init__(self, batchnorm: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        norm: torch.nn.Module = torch.nn.BatchNorm1d(16) if batchnorm else torch.nn.Identity()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), norm, torch.nn.Tanh(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
        )
        self.acc = BinaryAccuracy()
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.binary_cross_entropy_with_logits(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.acc.update(logits.sigmoid(), y)
        self.log("val_acc", self.acc)
        self.log("val_acc_mean", ((logits > 0).float() == y).float().mean(), sync_dist=True)
        self.log("val_seen", float(len(x)), reduce_fx="sum", sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class RecordOrder(trainer.Callback):
    """The sample indices of the first batch each rank sees in each epoch."""

    def __init__(self) -> None:
        self.first: dict[int, list[float]] = {}

    def on_train_batch_start(self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, i: int) -> None:
        if i == 0:
            self.first[trainer.current_epoch] = batch[0][:, 0].tolist()


def after_fit(fit: trainer.Trainer, module: Net, val: DataLoader, out: Path) -> None:
    """What scripts do after fit, in the same process: validate, test, predict, save, fit again."""
    module.test_step = module.validation_step  # type: ignore[method-assign]
    module.predict_step = lambda batch, batch_idx: module.net(batch[0])  # type: ignore[method-assign]
    result: dict[str, Any] = {
        "validate": fit.validate(module, val),
        "test": fit.test(module, val),
        "predicted": sum(len(p) for p in fit.predict(module, val)),
    }
    fit.save_checkpoint(out / "after-fit.ckpt")
    again = trainer.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=2,
        max_epochs=4,
        logger=False,
        enable_progress_bar=False,
        default_root_dir=out,  # its checkpoints/ in the test's folder, not the working directory
    )
    again.fit(module, val, ckpt_path=out / "after-fit.ckpt")
    result["second_fit_steps"] = again.global_step
    torch.save(result, out / f"after-fit-ddp-rank{fit.global_rank}.pt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("mode", choices=["parity", "syncbn", "eval", "order", "resume", "after-fit"])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--resume", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer.seed_everything(0)
    ddp = args.strategy == "ddp"
    per_rank = {"parity": 32, "syncbn": 4, "eval": 16, "order": 8, "resume": 8, "after-fit": 16}[args.mode]
    batch = per_rank if ddp else per_rank * 2
    strategy: Any = DDPStrategy(sync_batchnorm=True) if ddp and args.mode == "syncbn" else args.strategy
    order = RecordOrder()
    every_step = trainer.ModelCheckpoint(
        dirpath=args.out / "ckpts",
        filename="step{step}",
        auto_insert_metric_name=False,
        save_top_k=-1,
        every_n_train_steps=1,
    )
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=args.devices if ddp else 1,
        max_epochs=3,
        enable_progress_bar=False,
        default_root_dir=args.out / "runs",
        num_sanity_val_steps=0,
        callbacks=[order, every_step] if args.mode == "resume" else [order],
        enable_checkpointing=args.mode in ("resume", "order"),
    )
    module = Net(batchnorm=args.mode == "syncbn", dropout=0.2 if args.mode == "resume" else 0.0)
    shuffle = args.mode in ("order", "resume")
    train = DataLoader(data(128), batch_size=batch, shuffle=shuffle, num_workers=1 if args.mode == "resume" else 0)
    val = DataLoader(data(101), batch_size=per_rank)
    fit.fit(module, train, val, ckpt_path=args.resume)
    if args.mode == "after-fit":
        after_fit(fit, module, val, args.out)
        return
    result = {
        "params": [p.detach() for p in module.parameters()],
        "metrics": {k: float(v) for k, v in fit.callback_metrics.items()},
        "first": order.first,
        "world_size": fit.world_size,
        "global_step": fit.global_step,
    }
    torch.save(result, args.out / f"{args.mode}-{args.strategy}-rank{fit.global_rank}.pt")


if __name__ == "__main__":
    main()
