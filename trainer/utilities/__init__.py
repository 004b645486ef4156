"""What a Lightning script imports from ``lightning.pytorch.utilities`` (and its ``rank_zero``, ``grads``,
``types``, ``memory``, ``seed``, ``imports``, ``model_helpers`` modules): a port's ``from trainer.utilities
import ...`` finds it here."""

from typing import Any

from trainer.hparams import AttributeDict, is_picklable
from trainer.move import move_to_device as move_data_to_device
from trainer.utilities.enums import GradClipAlgorithmType
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
from trainer.utilities.types import (
    EVAL_DATALOADERS,
    STEP_OUTPUT,
    TRAIN_DATALOADERS,
    LRSchedulerConfig,
    OptimizerLRScheduler,
)
from trainer.utilities.warnings import PossibleUserWarning, disable_possible_user_warnings

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "AttributeDict",
    "CombinedLoader",
    "GradClipAlgorithmType",
    "LRSchedulerConfig",
    "LightningEnum",
    "OptimizerLRScheduler",
    "PossibleUserWarning",
    "WarningCache",
    "disable_possible_user_warnings",
    "find_shared_parameters",
    "garbage_collection_cuda",
    "get_torchvision_model",
    "grad_norm",
    "is_oom_error",
    "is_overridden",
    "is_picklable",
    "is_shared_filesystem",
    "isolate_rng",
    "measure_flops",
    "move_data_to_device",
    "rank_prefixed_message",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
    "set_shared_parameters",
    "suggested_max_num_workers",
    "summarize",
]


def __getattr__(name: str) -> Any:
    # Lazy: the availability flags (utilities.imports) and model helpers are read by few scripts.
    if name == "CombinedLoader":
        from trainer.data.combined import CombinedLoader

        return CombinedLoader
    if name in ("find_shared_parameters", "set_shared_parameters"):
        import trainer.utilities.parameters as parameters

        return getattr(parameters, name)
    if name == "is_shared_filesystem":
        from trainer.utilities.distributed import is_shared_filesystem

        return is_shared_filesystem
    if name == "suggested_max_num_workers":
        from trainer.utilities.data import suggested_max_num_workers

        return suggested_max_num_workers
    if name == "LightningEnum":
        from trainer.states import LightningEnum

        return LightningEnum
    if name == "measure_flops":
        from trainer.callbacks.throughput import measure_flops

        return measure_flops
    if name == "summarize":
        from trainer.callbacks.model_summary import summarize

        return summarize
    if name in ("get_torchvision_model", "is_overridden"):
        import trainer.utilities.model_helpers as model_helpers

        return getattr(model_helpers, name)
    import trainer.utilities.imports as imports

    if name in imports.FLAGS:
        return getattr(imports, name)
    raise AttributeError(f"module 'trainer.utilities' has no attribute {name!r}")
