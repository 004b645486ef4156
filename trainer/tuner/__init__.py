"""Lightning's ``lightning.pytorch.tuner``: ``Tuner(trainer).lr_find(...)`` and ``.scale_batch_size(...)``."""

from trainer.tuner.lr_finder import LRFinder
from trainer.tuner.tuning import Tuner

__all__ = ["LRFinder", "Tuner"]
