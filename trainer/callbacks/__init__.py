"""Callbacks: hooks into the loop, each in its own file (Lightning's names, as in ``lightning.pytorch.callbacks``)."""

import importlib
from typing import Any

from trainer.callbacks.base import Callback, Checkpoint
from trainer.callbacks.checkpoint import ModelCheckpoint
from trainer.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from trainer.callbacks.model_summary import ModelSummary
from trainer.callbacks.progress import ProgressBar, TQDMProgressBar

# The callbacks a Trainer may add itself are imported above; the others load on first use, so that
# `import trainer` stays cheap (each module costs milliseconds, and most runs use none of them).
_LAZY = {
    "BackboneFinetuning": "finetuning",
    "BaseFinetuning": "finetuning",
    "BasePredictionWriter": "prediction_writer",
    "BatchSizeFinder": "batch_size_finder",
    "DeviceStatsMonitor": "device_stats",
    "EMAWeightAveraging": "weight_averaging",
    "GradientAccumulationScheduler": "gradient_accumulation",
    "LambdaCallback": "lambda_function",
    "LearningRateFinder": "lr_finder",
    "LearningRateMonitor": "lr_monitor",
    "OnExceptionCheckpoint": "on_exception_checkpoint",
    "ModelPruning": "pruning",
    "RichModelSummary": "rich_model_summary",
    "RichProgressBar": "progress.rich_progress",
    "RichProgressBarTheme": "progress.rich_progress",
    "SpikeDetection": "spike",
    "StochasticWeightAveraging": "stochastic_weight_avg",
    "TrainingSpikeException": "spike",
    "ThroughputMonitor": "throughput_monitor",
    "Timer": "timer",
    "WeightAveraging": "weight_averaging",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"trainer.callbacks.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'trainer.callbacks' has no attribute {name!r}")


__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "EarlyStoppingReason",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelPruning",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "RichProgressBarTheme",
    "SpikeDetection",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
    "TrainingSpikeException",
    "WeightAveraging",
]
