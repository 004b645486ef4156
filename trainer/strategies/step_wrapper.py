"""``StepWrapper``: the user's ``*_step`` as ``forward``, so a wrapper's forward hooks run around a step."""

from __future__ import annotations

from typing import Any

from torch import nn


class StepWrapper(nn.Module):
    """Routes ``forward`` to the user's ``*_step``: DDP's reducer and DataParallel's scatter see every step."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any, batch_idx: int, stage: str = "training", **kwargs: Any) -> Any:
        return getattr(self.module, f"{stage}_step")(batch, batch_idx, **kwargs)
