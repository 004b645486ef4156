"""A ``Trainer(strategy=...)`` job whose ranks this process starts (ddp_spawn / ddp_fork); see test_spawn.py.

``fit`` mode: 2 CPU ranks fit a linear model on 2x4 samples per step; the main process then holds the fitted
weights and writes them, the single-device weights on 1x8 samples, and the initial weights to a JSON file.
``fail`` mode: rank 1 raises in its third step; the main process must get the error within seconds.
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer as st


class Linear(st.Module):
    def __init__(self, fail_rank: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 1)
        self.fail_rank = fail_rank

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.fail_rank is not None and batch_idx == 2 and self.global_rank == self.fail_rank:
            print(f"RAISED_AT={time.time()}", flush=True)
            raise ValueError(f"boom on rank {self.global_rank}")
        x, y = batch
        return nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(batch_size: int) -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(1)
    dataset = TensorDataset(torch.randn(32, 3, generator=g), torch.randn(32, 1, generator=g))
    return DataLoader(dataset, batch_size=batch_size, shuffle=False)


def fit(strategy: str, devices: int, batch_size: int, root: str, fail_rank: int | None = None) -> Linear:
    module = Linear(fail_rank)
    trainer = st.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(module, data(batch_size))
    return module


def main() -> None:
    mode, strategy, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "fail":
        fit(strategy, 2, 4, out, fail_rank=1)
        return
    initial = [p.tolist() for p in Linear().parameters()]
    ranks = fit(strategy, 2, 4, out + ".runs")
    single = fit("auto", 1, 8, out + ".single")
    result = {
        "initial": initial,
        "ranks": [p.tolist() for p in ranks.parameters()],
        "single": [p.tolist() for p in single.parameters()],
        "max_diff": max((a - b).abs().max().item() for a, b in zip(ranks.parameters(), single.parameters())),
    }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
