"""Type aliases a typed Lightning script imports from ``lightning.pytorch.utilities.types``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

STEP_OUTPUT = torch.Tensor | Mapping[str, Any] | None
# What ``configure_optimizers`` may return: an optimizer, lists/tuples of them and schedulers, or a dict.
OptimizerLRScheduler = Any
TRAIN_DATALOADERS = Any  # a DataLoader, or any iterable of batches
EVAL_DATALOADERS = Iterable[Any] | Sequence[Iterable[Any]]

from trainer.optim import SchedulerConfig as LRSchedulerConfig  # noqa: E402, F401  (Lightning's name, the owner's class)
