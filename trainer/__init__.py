"""steadytrain: a Lightning-style trainer with raw-loop speed and exact resume.

Public names only; heavy optional packages (wandb, jsonargparse, tensorboard) load on use.
"""

import os as _os
import sys as _sys

from trainer.launch import pop_legacy_local_rank as _pop_legacy_local_rank

# `python -m torch.distributed.launch` appends --local-rank=N to the script's arguments; take it
# out before the user's argparse / CLI sees it (detect_cluster reads it back from LOCAL_RANK).
if (_local_rank := _pop_legacy_local_rank(_sys.argv, _os.environ)) is not None:
    _os.environ.setdefault("LOCAL_RANK", str(_local_rank))

from trainer.callbacks import Callback, EarlyStopping, ModelCheckpoint, ModelSummary, ProgressBar
from trainer.datamodule import DataModule
from trainer.module import Module
from trainer.seed import seed_everything
from trainer.trainer import Trainer
from trainer.version import __version__

# Lightning's names, so `import trainer as L` ports `L.LightningModule` / `L.LightningDataModule`.
LightningModule = Module
LightningDataModule = DataModule

__all__ = [
    "Callback",
    "DataModule",
    "EarlyStopping",
    "LearningRateMonitor",
    "LightningDataModule",
    "LightningModule",
    "ModelCheckpoint",
    "ModelSummary",
    "Module",
    "ProgressBar",
    "Timer",
    "Trainer",
    "__version__",
    "cli_lightning_logo",
    "seed_everything",
]


def __getattr__(name: str) -> object:
    # Lazy, as in trainer.callbacks: most runs use neither.
    if name in ("LearningRateMonitor", "Timer"):
        import trainer.callbacks

        return getattr(trainer.callbacks, name)
    if name == "cli_lightning_logo":  # what Lightning's example scripts call before LightningCLI
        from trainer.logo import cli_lightning_logo

        return cli_lightning_logo
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
