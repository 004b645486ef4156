"""Manual optimization that clips in ``training_step``, for the 2-rank test in tests/test_manual_optimization.py.

    python manual_clip.py OUT [--strategy single|ddp|fsdp] [--devices N]

It trains ``ClippedByHand`` twice, clipping by norm and then by value (``self.clip_gradients``
between ``manual_backward`` and ``opt.step()``, Lightning's pattern), at limits small enough
that clipping acts on most steps. The global batch is 16, split over the ranks. Rank r writes
``OUT/<algorithm>-rank<r>.pt``: the final full weights, and what ``training_step`` read from
``p.grad`` right after ``manual_backward`` at each step (the gradient's norm, or its largest
entry), which on several ranks must already be the global batch's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer

GLOBAL_BATCH = 16
EPOCHS = 2
CLIP = {"norm": 0.3, "value": 0.05}  # the gradients' norm is ~0.9-1.4 here, their largest entry ~0.2-0.8


def clip_data(n: int = 64) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())


class ClippedByHand(trainer.Module):
    """One optimizer stepped by hand, its gradients clipped first; records what it reads from ``p.grad``."""

    def __init__(self, algorithm: str) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.algorithm = algorithm
        torch.manual_seed(0)
        self.net = nn.Sequential(
            nn.Linear(8, 32),  # 288 parameters: FSDP shards it on its own (threshold 100)
            nn.Tanh(),
            nn.Linear(32, 32),  # 1056: sharded on its own
            nn.Tanh(),
            nn.Linear(32, 1),  # 33: the root's
        )
        self.seen: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(nn.functional.mse_loss(self.net(x), y))
        self.seen.append(gradient_size([p.grad for p in self.parameters() if p.grad is not None], self.algorithm))
        self.clip_gradients(opt, gradient_clip_val=CLIP[self.algorithm], gradient_clip_algorithm=self.algorithm)
        opt.step()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5, momentum=0.9)


def gradient_size(grads: list[torch.Tensor], algorithm: str) -> float:
    """The total norm ("norm") or the largest absolute entry ("value") of the full gradients (FSDP's gathered)."""
    full = [g.full_tensor() if hasattr(g, "full_tensor") else g for g in grads]
    if algorithm == "norm":
        return float(torch.nn.utils.get_total_norm(full))
    return float(max(g.abs().max() for g in full))


def full_weights(fit: trainer.Trainer, module: nn.Module) -> dict[str, torch.Tensor]:
    if fit.strategy.name == "fsdp":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
        state = get_model_state_dict(module, options=options)
        return {k: v.clone() for k, v in state.items() if isinstance(v, torch.Tensor)}
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def train(algorithm: str, strategy: Any = "single", devices: int = 1, **flags: Any) -> dict[str, Any]:
    """Fit ``ClippedByHand`` and return its final full weights, what it read from ``p.grad``, and the step."""
    module = ClippedByHand(algorithm)
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=devices,
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        **flags,
    )
    fit.fit(module, DataLoader(clip_data(), batch_size=GLOBAL_BATCH // devices))
    return {
        "params": full_weights(fit, module),
        "seen": module.seen,
        "global_step": fit.global_step,
        "rank": fit.global_rank,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--strategy", default="single")
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for algorithm in CLIP:
        strategy: Any = args.strategy
        if args.strategy == "fsdp":
            from trainer.strategies.fsdp import FSDPStrategy

            strategy = FSDPStrategy(min_params_to_shard=100)  # every Linear but the last is sharded
        result = train(algorithm, strategy, args.devices)
        torch.save(result, args.out / f"{algorithm}-rank{result['rank']}.pt")


if __name__ == "__main__":
    main()
