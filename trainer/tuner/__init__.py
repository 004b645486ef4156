"""Lightning's ``lightning.pytorch.tuner``: ``Tuner(trainer).lr_find(...)`` and ``.scale_batch_size(...)``, and the
searches themselves (``scale_batch_size``, ``lr_find``), which the ``BatchSizeFinder`` and ``LearningRateFinder``
callbacks run from their hooks."""

from trainer.tuner.batch_size import check_batch_size_finder, scale_batch_size
from trainer.tuner.lr_finder import LRFinder
from trainer.tuner.lr_search import lr_find
from trainer.tuner.tuning import Tuner

__all__ = ["LRFinder", "Tuner", "check_batch_size_finder", "lr_find", "scale_batch_size"]
