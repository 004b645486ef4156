"""FSDP against DDP on 2 CPU ranks (gloo), one run: per-rank memory, step time, checkpoint save blocking.

A 12-block MLP of width 2048 (50.4M parameters) with AdamW, batch 8 per rank, one thread per rank.
Memory is what each rank holds of parameters + gradients + optimizer state after a step (their peak:
they only grow during a run), counted from the tensors themselves (a DTensor's local shard); the
target is fsdp/ddp <= 0.55. Then FSDP saves a sharded checkpoint synchronously and asynchronously
(``FSDPStrategy(async_save=True)``) and we time how long the training loop is blocked by each.

    python benchmarks/fsdp.py [--steps 8] [--width 2048] [--blocks 12] [--out /tmp/fsdp-bench]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

import trainer
from trainer.checkpoint.sharded import wait_pending
from trainer.strategies.fsdp import FSDPStrategy


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class Net(trainer.Module):
    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(width) for _ in range(blocks)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.blocks(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Measure(trainer.Callback):
    """Step times, and the bytes of parameters, gradients and optimizer state this rank holds."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.bytes: dict[str, int] = {}
        self._start = 0.0

    def on_train_batch_start(self, trainer: trainer.Trainer, module: Any, batch: Any, i: int) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: trainer.Trainer, module: Any, outputs: Any, batch: Any, i: int) -> None:
        self.times.append(time.perf_counter() - self._start)
        optimizer = trainer.optimizers[0]
        params = list(module.parameters())
        states = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        self.bytes = {
            "params": _nbytes(params),
            "grads": _nbytes([p.grad for p in params if p.grad is not None]),
            "optimizer": _nbytes(states),
        }


def _nbytes(tensors: list[Any]) -> int:
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def run(strategy: Any, args: argparse.Namespace) -> tuple[trainer.Trainer, Net, Measure]:
    torch.manual_seed(0)
    module = Net(args.width, args.blocks)
    measure = Measure()
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=2,
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[measure],
    )
    data = TensorDataset(torch.randn(8 * 2 * args.steps, args.width))
    fit.fit(module, DataLoader(data, batch_size=8))
    return fit, module, measure


def save_blocking(fit: trainer.Trainer, strategy: FSDPStrategy, out: Path, asynchronous: bool) -> tuple[float, float]:
    """Seconds the loop waits in ``save_checkpoint``, and until the checkpoint is complete on disk."""
    strategy.async_save = asynchronous
    fit.strategy.barrier()
    start = time.perf_counter()
    fit.save_checkpoint(out / f"{'async' if asynchronous else 'sync'}.ckpt")
    blocked = time.perf_counter() - start
    wait_pending()
    fit.strategy.barrier()
    return blocked, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path("/tmp/fsdp-bench"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, ddp_module, ddp = run("ddp", args)
    strategy = FSDPStrategy()
    fit, _, fsdp = run(strategy, args)
    saves = [save_blocking(fit, strategy, args.out, asynchronous) for asynchronous in (False, True, False, True)]
    everyone = fit.strategy.gather_objects((ddp.bytes, fsdp.bytes, ddp.times, fsdp.times))
    if fit.is_global_zero:
        report(args, sum(p.numel() for p in ddp_module.parameters()), everyone, saves)


def report(args: argparse.Namespace, n_params: int, everyone: list[Any], saves: list[tuple[float, float]]) -> None:
    mib = 2**20
    print(f"model: {args.blocks} blocks of width {args.width}, {n_params / 1e6:.1f}M parameters, AdamW, 2 CPU ranks")
    peak = {}
    for index, name in ((0, "ddp"), (1, "fsdp")):
        per_rank = [sum(r[index].values()) for r in everyone]
        parts = everyone[per_rank.index(max(per_rank))][index]
        peak[name] = max(per_rank)
        step = statistics.median(t for r in everyone for t in r[index + 2][1:])
        detail = ", ".join(f"{k} {v / mib:.0f}" for k, v in parts.items())
        print(f"{name:5s} per-rank params+grads+optimizer: {peak[name] / mib:7.1f} MiB ({detail}); step {step:.3f}s")
    print(f"fsdp/ddp memory ratio: {peak['fsdp'] / peak['ddp']:.3f} (target <= 0.55)")
    for asynchronous in (False, True):
        runs = [s for i, s in enumerate(saves) if (i % 2 == 1) == asynchronous]
        blocked = statistics.median(b for b, _ in runs)
        total = statistics.median(t for _, t in runs)
        name = "async" if asynchronous else "sync"
        print(f"{name:5s} sharded save: loop blocked {blocked:.3f}s, complete on disk after {total:.3f}s")


if __name__ == "__main__":
    main()
