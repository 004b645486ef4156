"""What a Lightning script imports from ``lightning.pytorch.utilities`` (and its ``rank_zero``, ``grads``,
``types``, ``memory``, ``seed`` modules): a port's ``from trainer.utilities import ...`` finds it here."""

from trainer.hparams import AttributeDict
from trainer.move import move_to_device as move_data_to_device
from trainer.utilities.grads import grad_norm
from trainer.utilities.memory import garbage_collection_cuda, is_oom_error
from trainer.utilities.rank_zero import (
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from trainer.utilities.seed import isolate_rng
from trainer.utilities.types import EVAL_DATALOADERS, STEP_OUTPUT, TRAIN_DATALOADERS, OptimizerLRScheduler

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "AttributeDict",
    "OptimizerLRScheduler",
    "WarningCache",
    "garbage_collection_cuda",
    "grad_norm",
    "is_oom_error",
    "isolate_rng",
    "move_data_to_device",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]
