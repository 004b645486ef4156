"""steadytrain: a Lightning-style trainer with raw-loop speed and exact resume.

Public names only; heavy optional packages (wandb, jsonargparse, tensorboard) load on use.
"""

from trainer.callbacks import Callback, EarlyStopping, ModelCheckpoint, ProgressBar
from trainer.datamodule import DataModule
from trainer.module import Module
from trainer.seed import seed_everything
from trainer.trainer import Trainer

__version__ = "0.1.0"
__all__ = [
    "Callback",
    "DataModule",
    "EarlyStopping",
    "ModelCheckpoint",
    "Module",
    "ProgressBar",
    "Trainer",
    "__version__",
    "seed_everything",
]
