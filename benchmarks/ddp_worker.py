"""One DDP benchmark run, launched by torchrun (see benchmarks/ddp.py).

``--mode raw`` is the hand-written DDP script users write; ``--mode trainer`` is the same job
through ``Trainer(strategy="ddp")`` under torchrun; ``--mode self`` is that job run as
``python ddp_worker.py``, the Trainer starting the second rank itself (how users swap strategies
with one flag). Rank 0 prints ``per_step_us=<float>``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import trainer


def make_net(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 1),
    )


def dataset(steps: int, world: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    n = steps * 32 * world
    return TensorDataset(torch.randn(n, 64, generator=g), torch.randn(n, 1, generator=g))


def raw(width: int, steps: int) -> float:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.parallel.DistributedDataParallel(make_net(width))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = dataset(steps, world)
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data, world, rank, shuffle=False))
    dist.barrier()
    start = time.perf_counter()
    for x, y in loader:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    dist.destroy_process_group()
    return elapsed / steps


class MLP(trainer.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = make_net(width)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Clock(trainer.Callback):
    """Times the training epoch only (set-up and teardown are not per-step costs)."""

    def on_train_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        trainer.strategy.barrier()
        self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        trainer.strategy.barrier()
        self.elapsed = time.perf_counter() - self.start


def ours(width: int, steps: int) -> float:
    world = int(os.environ.get("WORLD_SIZE", "2"))  # self-launched: the Trainer starts the 2nd rank
    clock = Clock()
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=world,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[clock],
    )
    fit.fit(MLP(width), DataLoader(dataset(steps, world), batch_size=32))
    return clock.elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("raw", "trainer", "self"), required=True)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    per_step = (raw if args.mode == "raw" else ours)(args.width, args.steps)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"per_step_us={per_step * 1e6:.2f}", flush=True)


if __name__ == "__main__":
    main()
