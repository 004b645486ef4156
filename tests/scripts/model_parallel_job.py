"""ModelParallelStrategy scenarios for tests/strategies/test_model_parallel.py (self-launched CPU ranks on gloo).

    python model_parallel_job.py OUT TAG [--devices N] [--num-nodes M] [--dp D] [--tp T] [--single] [--full-state]
                                 [--save-at STEP] [--resume CKPT] [--steps S] [--empty-init]

``configure_model`` splits a SwiGLU feed-forward block across the tensor-parallel group (ColwiseParallel w1/w2,
RowwiseParallel w3), and with ``--dp`` > 1 shards it over the data-parallel dimension (``fully_shard``).
``--single`` trains the same module on one device without any parallelism; ``--empty-init`` builds it under
``trainer.init_module(empty_init=True)`` (on the meta device: each rank's shards get memory in setup). Rank r writes
``OUT/<TAG>-rank<r>.pt``: the full weights (by name), the losses, the global step, the mesh it saw.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import DataLoader, TensorDataset

import trainer
from tests.scripts.fsdp_job import SaveAt, full_weights
from trainer.strategies import ModelParallelStrategy

GLOBAL_BATCH = 8


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    return TensorDataset(x, x[:, :4].sum(dim=1, keepdim=True).tanh())


class FeedForward(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Linear(16, 32)
        self.w2 = torch.nn.Linear(16, 32)
        self.w3 = torch.nn.Linear(32, 16)
        self.head = torch.nn.Linear(16, 1)  # replicated: not in the tensor-parallel plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.w3(torch.nn.functional.silu(self.w1(x)) * self.w2(x)))


class Net(trainer.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = FeedForward()
        self.losses: list[float] = []
        self.mesh: list[Any] = []

    def configure_model(self) -> None:
        mesh = self.device_mesh
        if mesh is None or isinstance(self.model.w1.weight, DTensor):
            return  # one device, or a stage after fit: already parallel
        self.mesh = [list(mesh.mesh_dim_names or ()), list(mesh.shape)]
        plan = {"w1": ColwiseParallel(), "w2": ColwiseParallel(), "w3": RowwiseParallel()}
        parallelize_module(self.model, mesh["tensor_parallel"], plan)
        if mesh["data_parallel"].size() > 1:
            for layer in (self.model.w1, self.model.w2, self.model.w3, self.model.head):
                fully_shard(layer, mesh=mesh["data_parallel"])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=0.02, weight_decay=0.1)


def local_numel(tensor: torch.Tensor) -> int:
    """Elements this rank holds: its shard of a DTensor."""
    return tensor.to_local().numel() if isinstance(tensor, DTensor) else tensor.numel()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("tag")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--dp", default="auto")
    parser.add_argument("--tp", default="auto")
    parser.add_argument("--single", action="store_true")
    parser.add_argument("--full-state", action="store_true")
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--empty-init", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    size = {k: v if v == "auto" else int(v) for k, v in (("dp", args.dp), ("tp", args.tp))}
    strategy: Any = "single"
    if not args.single:
        strategy = ModelParallelStrategy(
            data_parallel_size=size["dp"],
            tensor_parallel_size=size["tp"],
            save_distributed_checkpoint=not args.full_state,
        )
    callbacks: list[trainer.Callback] = []
    if args.save_at:
        callbacks.append(SaveAt(args.save_at, args.out / f"{args.tag}-step{args.save_at}.ckpt"))
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=1 if args.single else args.devices,
        num_nodes=args.num_nodes,
        max_steps=args.steps,
        accumulate_grad_batches=2,  # FSDP's reduce-scatter skipped on the window's first micro-batch
        gradient_clip_val=0.1,  # small: it clips most steps, a norm over every shard
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    with fit.init_module(empty_init=args.empty_init):
        module = Net()
    built_on_meta = all(p.is_meta for p in module.parameters())
    replicas = 1 if args.single else fit.strategy.distributed_sampler_kwargs["num_replicas"]
    train = DataLoader(data(64, 0), batch_size=GLOBAL_BATCH // replicas, shuffle=True)
    fit.fit(module, train, ckpt_path=args.resume)
    result = {
        "params": full_weights(module),
        "losses": module.losses,
        "global_step": fit.global_step,
        "world_size": fit.world_size,
        "mesh": module.mesh,
        "built_on_meta": built_on_meta,
        "local_numel": {n: local_numel(p) for n, p in module.named_parameters()},
        "meta_left": [n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta],
    }
    torch.save(result, args.out / f"{args.tag}-rank{fit.global_rank}.pt")


if __name__ == "__main__":
    main()
