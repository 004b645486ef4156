"""Callbacks: hooks into the loop, each in its own file (Lightning's names, as in ``lightning.pytorch.callbacks``)."""

from trainer.callbacks.base import Callback
from trainer.callbacks.checkpoint import ModelCheckpoint
from trainer.callbacks.early_stopping import EarlyStopping
from trainer.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from trainer.callbacks.lambda_function import LambdaCallback
from trainer.callbacks.lr_monitor import LearningRateMonitor
from trainer.callbacks.model_summary import ModelSummary
from trainer.callbacks.prediction_writer import BasePredictionWriter
from trainer.callbacks.progress import ProgressBar
from trainer.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from trainer.callbacks.timer import Timer

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "Callback",
    "EarlyStopping",
    "LambdaCallback",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "StochasticWeightAveraging",
    "Timer",
]
