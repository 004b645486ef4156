"""A strategy written outside the package, in one file, touching no loop code.

``CountingStrategy`` runs on one CPU device and counts every call the loops make to its hooks, so
a test can see that a fit reaches the strategy only through the seam. It derives from ``Strategy``
alone (not the single-device strategy): the five abstract members are all a strategy must say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.strategies.base import ReduceOp, Stage, Strategy


class CountingStrategy(Strategy):
    """One process on the CPU; ``calls`` counts each hook by name."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    @property
    def root_device(self) -> torch.device:
        return torch.device("cpu")

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        self.calls["all_reduce"] += 1
        return tensor.clone()

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls["all_gather"] += 1
        return tensor.unsqueeze(0)

    def barrier(self) -> None:
        self.calls["barrier"] += 1

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        self.calls["broadcast"] += 1
        return obj

    def setup_module(self, module: nn.Module) -> nn.Module:
        self.calls["setup_module"] += 1
        return super().setup_module(module)

    def step_function(self, stage: Stage) -> Callable[..., Any]:
        self.calls[f"step_function:{stage}"] += 1
        return super().step_function(stage)

    def save_checkpoint(self, checkpoint: Mapping[str, Any], path: Path) -> None:
        self.calls["save_checkpoint"] += 1
        super().save_checkpoint(checkpoint, path)

    def load_checkpoint(self, path: Path) -> dict[str, Any]:
        self.calls["load_checkpoint"] += 1
        return super().load_checkpoint(path)


# What ``register_strategy("mine", "tests.strategies.custom:MyStrategy")`` names.
MyStrategy = CountingStrategy
