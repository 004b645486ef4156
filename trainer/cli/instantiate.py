"""Lightning's import path ``cli.instantiate_module``; the function lives in ``trainer.checkpoint.instantiate``."""

from trainer.checkpoint.instantiate import instantiate_module

__all__ = ["instantiate_module"]
