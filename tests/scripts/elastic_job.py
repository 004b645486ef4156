"""A 2-rank job for the elastic-restart test, run under ``torchrun --max-restarts=1``.

    torchrun --standalone --nproc_per_node 2 --max-restarts 1 elastic_job.py OUT_DIR [--kill] [--strategy fsdp]

With ``--kill``, on the first attempt only, rank 0 leaves the temporaries of a save that never
finished (a file and a sharded-checkpoint directory) and SIGKILLs itself right after the 3rd
checkpoint is written, mid-epoch. The script never passes ``ckpt_path``: the restarted ranks must
find the checkpoint themselves. Rank 0 writes the final parameters to ``OUT_DIR/final.pt``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.utils.data import DataLoader, TensorDataset

import trainer
from trainer.strategies.fsdp import FSDPStrategy

KILL_AFTER_SAVES = 3


class Net(trainer.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1))
        self.head = torch.nn.Linear(32, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.body(x)), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class KillAfterSaves(trainer.Callback):
    """Rank 0 dies (SIGKILL, no cleanup) at the first batch after the n-th checkpoint was written."""

    def __init__(self, dirpath: Path) -> None:
        self.dirpath = dirpath
        self.saves = 0

    def on_save_checkpoint(self, trainer: trainer.Trainer, module: trainer.Module, checkpoint: dict[str, Any]) -> None:
        self.saves += 1  # called while the checkpoint is built, before it is written

    def on_train_batch_start(
        self, trainer: trainer.Trainer, module: trainer.Module, batch: Any, batch_idx: int
    ) -> None:
        if self.saves < KILL_AFTER_SAVES or not trainer.is_global_zero:
            return
        pid, host = os.getpid(), socket.gethostname()
        step = trainer.global_step
        (self.dirpath / f".step={step + 2}.ckpt.tmp-{pid}-{host}").write_bytes(b"PK\x03\x04 cut off")
        torn_dir = self.dirpath / f".sharded-step={step + 2}.ckpt.tmp-{pid}-{host}"
        torn_dir.mkdir()
        (torn_dir / "__0_0.distcp").write_bytes(b"half a shard")
        print(f"KILLED_AT_STEP={step}\nKILL={time.time()}", flush=True)
        os.kill(pid, signal.SIGKILL)


def full_weights(module: Net) -> dict[str, torch.Tensor]:
    """The whole weights on every rank, whichever strategy sharded them."""
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
    return {k: v.detach().clone() for k, v in get_model_state_dict(module, options=options).items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--strategy", default="ddp", choices=["ddp", "fsdp"])
    args = parser.parse_args()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if os.environ.get("RANK") == "0":
        print(f"ATTEMPT{attempt}={time.time()}", flush=True)
    torch.set_num_threads(1)
    trainer.seed_everything(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g))
    ckpts = args.out / "ckpts"
    callbacks: list[trainer.Callback] = [trainer.ModelCheckpoint(dirpath=ckpts, every_n_train_steps=2)]
    if args.kill and attempt == 0:
        callbacks.append(KillAfterSaves(ckpts))
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=FSDPStrategy(min_params_to_shard=100) if args.strategy == "fsdp" else "ddp",
        devices=2,
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=args.out,
        callbacks=callbacks,
    )
    module = Net()
    fit.fit(module, DataLoader(data, batch_size=4, shuffle=True))  # 8 steps per epoch on 2 ranks
    weights = full_weights(module)  # every rank: under fsdp a collective
    if fit.is_global_zero:
        torch.save(weights, args.out / "final.pt")
        print(f"done at step {fit.global_step}", flush=True)


if __name__ == "__main__":
    main()
