"""Callbacks: hooks into the loop, each in its own file."""

from trainer.callbacks.base import Callback
from trainer.callbacks.checkpoint import ModelCheckpoint
from trainer.callbacks.early_stopping import EarlyStopping
from trainer.callbacks.progress import ProgressBar

__all__ = ["Callback", "EarlyStopping", "ModelCheckpoint", "ProgressBar"]
