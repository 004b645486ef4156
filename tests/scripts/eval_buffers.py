"""BatchNorm statistics at validation under DDP, for the 2-rank test in tests/strategies/test_ddp_integration.py.

    python eval_buffers.py OUT [ddp|fsdp]

Each rank trains on its own samples, so its last training forward leaves its BatchNorm running
statistics apart from the other rank's. Every validation then records, on each rank, the running
mean it evaluates with; rank 0 writes them (one row per validation, one column per rank) to OUT
as JSON, with the running mean in the last checkpoint (a file under ddp, a sharded folder under fsdp).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer


class Normed(trainer.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
        self.seen: list[list[float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))
        if batch_idx == 0:
            self.seen.append(self.net[1].running_mean.tolist())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("strategy", nargs="?", default="ddp")
    args = parser.parse_args()
    out = args.out
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g) * torch.arange(1, 65).unsqueeze(1) / 16  # ranks' samples differ in scale
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    module = Normed()
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=args.strategy,
        devices=2,
        max_epochs=2,
        default_root_dir=str(out.parent),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    fit.fit(module, DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    seen = fit.strategy.gather_objects(module.seen)
    if fit.is_global_zero:
        saved = fit.strategy.load_checkpoint(Path(fit.checkpoint_callback.last_model_path))["state_dict"]
        rows = [[per_rank[i] for per_rank in seen] for i in range(len(seen[0]))]
        out.write_text(json.dumps({"seen": rows, "saved": saved["net.1.running_mean"].tolist()}))


if __name__ == "__main__":
    main()
