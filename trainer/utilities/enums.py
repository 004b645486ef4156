"""Lightning's ``lightning.pytorch.utilities.enums``: the clip algorithms, defined beside the optimizers' parsing."""

from trainer.optim import GradClipAlgorithmType

__all__ = ["GradClipAlgorithmType"]
