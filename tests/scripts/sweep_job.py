"""One run of a sweep whose runs start together in one folder (tests/test_run_claims.py).

    python sweep_job.py FOLDER TAG --jobs N [--ddp] [--dirpath D] [--logger csv|default|tensorboard|mlflow] [--resume]

Every run waits on a file barrier (``FOLDER/barrier``: each run adds its file, then waits until ``N``
are there) right before its Trainer is built, so the runs choose their folders and checkpoint names at
the same moment, every time. ``TAG`` (a number) is this run's identity: its hyper-parameter, a metric
logged at every step, and the model's weights (filled with it before the first step). At the end,
global rank zero prints ``RESULT <json>`` with where the run says its files are.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer

STEPS = 6


class Tagged(trainer.Module):
    def __init__(self, tag: float) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.log("tag", self.hparams.tag)  # every row of this run's metrics says whose it is
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)  # the weights keep the tag they were given

    def on_fit_start(self) -> None:
        if self.global_step == 0:
            torch.nn.init.constant_(self.net.weight, self.hparams.tag)


def barrier(folder: Path, jobs: int, tag: str, timeout: float = 120.0) -> None:
    """Wait until every one of ``jobs`` runs has arrived (each leaves a file named by its tag)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / tag).touch()
    deadline = time.monotonic() + timeout
    while len(list(folder.iterdir())) < jobs:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(list(folder.iterdir()))} of {jobs} runs reached the barrier")
        time.sleep(0.001)


def build_logger(kind: str, root: Path) -> Any:
    if kind == "default":
        return True  # Lightning's rule: TensorBoard where it is installed, else CSV
    if kind == "tensorboard":
        return trainer.loggers.TensorBoardLogger(save_dir=str(root))
    if kind == "mlflow":
        return trainer.loggers.MLFlowLogger(save_dir=str(root), experiment_name="lightning_logs")
    return trainer.loggers.CSVLogger(save_dir=str(root))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("tag")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--dirpath")
    parser.add_argument("--logger", default="csv")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.chdir(args.folder)
    if int(os.environ.get("RANK", "0")) == 0 and not args.resume:  # a self-launched rank starts after the race
        barrier(Path("barrier"), args.jobs, args.tag)
    callbacks = [trainer.ModelCheckpoint(dirpath=args.dirpath, every_n_train_steps=2, save_top_k=1)]
    fit = trainer.Trainer(
        accelerator="cpu",
        max_steps=STEPS,
        default_root_dir="runs",
        logger=build_logger(args.logger, Path("runs")),
        callbacks=callbacks,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        **({"strategy": "ddp", "devices": 2} if args.ddp else {}),
    )
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    fit.fit(Tagged(float(args.tag)), loader, ckpt_path="last" if args.resume else None)
    print(f"LOGDIR rank={fit.global_rank} {fit.log_dir}", flush=True)  # every rank: the folder rank zero claimed
    if fit.is_global_zero:
        callback = fit.checkpoint_callback
        result = {"tag": float(args.tag), "log_dir": fit.log_dir, "last": callback.last_model_path}
        result.update(best=callback.best_model_path, resumed=fit.ckpt_path, step=fit.global_step)
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
