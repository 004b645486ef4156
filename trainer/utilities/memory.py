"""Lightning's ``lightning.pytorch.utilities.memory``: the out-of-memory helpers, owned by the batch-size finder."""

from trainer.tuner.memory import garbage_collection_cuda, is_oom_error

__all__ = ["garbage_collection_cuda", "is_oom_error"]
