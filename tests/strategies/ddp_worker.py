"""A small DDP job for the integration tests; every rank runs this file.

It plays the Trainer's part by hand (setup_environment, setup_module, steps, on_exception,
teardown) and rank 0 writes what it saw to a JSON file. Modes: ``check`` (same math,
collectives, no_sync, a second stage), ``syncbn`` (CUDA), and failure modes that raise or
SIGKILL on one rank while the other waits in a collective.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import signal
import time
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from trainer.strategies.ddp import DDPStrategy

Batch = tuple[torch.Tensor, torch.Tensor]


class Tiny(nn.Module):
    def __init__(self, batchnorm: bool = False) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(3) if batchnorm else nn.Identity()
        self.lin = nn.Linear(3, 1)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.lin(self.norm(x)), y)


def make_data(rows: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, 3, generator=g), torch.randn(rows, 1, generator=g)


def shard(batch: Batch, rank: int, world: int) -> Batch:
    per = len(batch[0]) // world
    x, y = batch
    return x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]


def to(batch: Batch, device: torch.device) -> Batch:
    return batch[0].to(device), batch[1].to(device)


def flat(tensors: Any) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).cpu() for t in tensors])


def rows_equal(gathered: torch.Tensor) -> bool:
    return all(torch.equal(gathered[0], row) for row in gathered[1:])


def train_both(strategy: DDPStrategy, module: Tiny, steps: int = 3, batch: int = 8) -> tuple[Tiny, Tiny]:
    """Train the DDP module on shards and (on every rank) a reference on the full batch."""
    reference = copy.deepcopy(module)  # before wrapping: rank 0's copy is what DDP broadcasts
    strategy.setup_module(module)
    data = make_data(steps * batch)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    device = strategy.root_device
    for step in range(steps):
        full = (data[0][step * batch : (step + 1) * batch], data[1][step * batch : (step + 1) * batch])
        local = shard(full, strategy.global_rank, strategy.world_size)
        opt.zero_grad()
        strategy.step_function("training")(to(local, device), step).backward()
        opt.step()
        ref_opt.zero_grad()
        reference.training_step(to(full, device), step).backward()
        ref_opt.step()
    return reference, module


def check_same_math(strategy: DDPStrategy) -> dict[str, Any]:
    torch.manual_seed(100 + strategy.global_rank)  # different init per rank: DDP must broadcast rank 0's
    module = Tiny()
    before = strategy.all_gather(flat(module.parameters()))
    reference, module = train_both(strategy, module)
    after = strategy.all_gather(flat(module.parameters()))
    diff = (flat(module.parameters()) - flat(reference.parameters())).abs().max().item()
    return {"init_differed": not rows_equal(before), "params_equal": rows_equal(after), "max_diff": diff}


def check_collectives(strategy: DDPStrategy) -> dict[str, Any]:
    rank, world = strategy.global_rank, strategy.world_size
    value = torch.tensor(float(rank + 1))
    int_sum = strategy.all_reduce(torch.tensor([rank + 1]), "sum")
    strategy.barrier()
    return {
        **{op: strategy.all_reduce(value, op).item() for op in ("sum", "mean", "max", "min")},
        "input_untouched": value.item() == rank + 1,
        "int_sum": int_sum.tolist(),
        "int_sum_dtype": str(int_sum.dtype),
        "int_mean": strategy.all_reduce(torch.tensor([rank + 1]), "mean").tolist(),
        "gather": strategy.all_gather(torch.tensor([rank, 2 * rank])).tolist(),
        "broadcast_first": strategy.broadcast({"from": rank}, src=0),
        "broadcast_last": strategy.broadcast({"from": rank}, src=world - 1),
        "samplers": strategy.broadcast(
            {"num_replicas": strategy.world_size, "rank": strategy.global_rank}, src=world - 1
        ),
        "global_zero": strategy.all_gather(torch.tensor(int(strategy.is_global_zero))).tolist(),
        "objects": strategy.gather_objects({"rank": rank}),
        "any_true": strategy.reduce_boolean_decision(rank == world - 1),
        "all_false": strategy.reduce_boolean_decision(False),
    }


def check_no_sync(strategy: DDPStrategy) -> dict[str, Any]:
    module = Tiny()
    strategy.setup_module(module)
    rank = strategy.global_rank
    batch = (torch.full((4, 3), float(rank + 1)), torch.full((4, 1), float(-rank)))
    grads = {}
    for skip in (True, False):
        module.zero_grad()
        with strategy.no_sync() if skip else contextlib.nullcontext():
            strategy.step_function("training")(batch, 0).backward()
        grads[skip] = rows_equal(strategy.all_gather(flat(p.grad for p in module.parameters())))
    return {
        "no_sync_grads_equal": grads[True],
        "synced_grads_equal": grads[False],
        "state_keys": sorted(strategy.module_state_dict()),
    }


def check_syncbn(strategy: DDPStrategy) -> dict[str, Any]:
    torch.manual_seed(0)
    module = Tiny(batchnorm=True)
    reference, module = train_both(strategy, module, steps=2, batch=8)
    return {
        "params_diff": (flat(module.parameters()) - flat(reference.parameters())).abs().max().item(),
        "buffers_diff": (flat(module.norm.buffers()) - flat(reference.norm.buffers())).abs().max().item(),
        "is_sync": type(module.norm).__name__,
    }


def second_stage(args: argparse.Namespace) -> float:
    """A later fit/test stage in the same script: a fresh strategy joins a fresh process group."""
    strategy = make_strategy(args)
    strategy.setup_environment()
    total = strategy.all_reduce(torch.tensor(1.0), "sum").item()
    strategy.teardown()
    return total


def fail(strategy: DDPStrategy, mode: str) -> None:
    """One rank fails while the other waits in a collective (or keeps busy)."""
    module = Tiny()
    strategy.setup_module(module)
    strategy.step_function("training")(make_data(4), 0).backward()
    if mode == "exit0":  # every rank leaves cleanly (as after an agreed signal); rank 1 takes longer
        if strategy.global_rank == 1:
            time.sleep(1)
            print("rank 1 clean exit", flush=True)
        raise SystemExit(0)
    victim = 1 if mode.endswith("1") or mode == "raise1_busy" else 0
    if strategy.global_rank == victim:
        print(f"RAISE_AT={time.time()}", flush=True)
        if mode.startswith("kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(f"boom from rank {victim}")
    if mode == "raise1_busy":
        time.sleep(60)  # not in a collective: only the watchdog can stop this rank
    strategy.barrier()
    time.sleep(60)


def make_strategy(args: argparse.Namespace) -> DDPStrategy:
    strategy = DDPStrategy(
        rendezvous_timeout=timedelta(seconds=args.rendezvous_timeout), sync_batchnorm=args.mode == "syncbn"
    )
    strategy.configure(args.accelerator, list(range(args.devices)), args.num_nodes)
    return strategy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--mode", default="check")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--rendezvous-timeout", type=float, default=60.0)
    args = parser.parse_args()  # would fail on a leftover --local-rank from the legacy launcher
    torch.set_num_threads(1)
    strategy = make_strategy(args)
    strategy.setup_environment()
    assert strategy.cluster is not None
    result: dict[str, Any] = {"world_size": strategy.world_size, "source": strategy.cluster.source}
    try:
        if args.mode == "check":
            result |= check_same_math(strategy) | check_collectives(strategy) | check_no_sync(strategy)
        elif args.mode == "syncbn":
            result |= check_syncbn(strategy)
        else:
            fail(strategy, args.mode)
    except BaseException as exc:
        strategy.on_exception(exc)
        raise
    finally:
        strategy.teardown()
    if args.mode == "check":
        result["second_stage_sum"] = second_stage(args)
    if strategy.is_global_zero:
        with open(args.out, "w") as f:
            json.dump(result, f)
    print(f"rank {strategy.global_rank} done", flush=True)


if __name__ == "__main__":
    main()
