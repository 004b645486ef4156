"""``self.all_gather`` and ``self.print`` under 2-rank DDP (gloo, self-launched) for tests/test_module_api.py.

    python module_api_job.py OUT

Every rank writes ``OUT/rank<r>.pt`` with what it gathered.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainer


class Gathering(trainer.Module):
    def __init__(self, out: str) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))
        self.out = out

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        rank = self.global_rank
        plain = self.all_gather(torch.tensor([rank, 10 + rank]))
        nested = self.all_gather({"n": 1.5 + rank, "t": [torch.tensor(float(rank))]})
        with_grad = self.all_gather(self.w * (rank + 1), sync_grads=True)
        (grad,) = torch.autograd.grad(with_grad.sum(), self.w)  # not .backward(): DDP's hooks wait for that
        self.print(f"printed by rank {rank}")
        result = {
            "plain": plain,
            "n": nested["n"],
            "t": nested["t"][0],
            "requires_grad": with_grad.requires_grad,
            "grad": grad,
            "local_rank": self.local_rank,
        }
        torch.save(result, Path(self.out) / f"rank{rank}.pt")
        return (self.w * batch[0]).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=2,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    fit.fit(Gathering(sys.argv[1]), DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2))
