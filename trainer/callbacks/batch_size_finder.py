"""``BatchSizeFinder``: Lightning's callback that runs the batch-size search (``trainer.tuner.scale_batch_size``)
at the start of ``fit`` (``on_fit_start``), ``validate``, ``test`` or ``predict``; the stage goes on with the size
found. Override a hook to search elsewhere (``on_train_epoch_start`` at chosen epochs), as in Lightning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.callbacks.base import Callback
from trainer.tuner.batch_size import MODES, check_batch_size_args, check_batch_size_finder, scale_batch_size

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class BatchSizeFinder(Callback):
    """The largest batch size whose ``steps_per_trial`` steps fit in memory, set in ``batch_arg_name`` (on the
    module, its hparams or the DataModule) and kept in ``optimal_batch_size``."""

    SUPPORTED_MODES = MODES

    def __init__(
        self,
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> None:
        mode = mode.lower()
        check_batch_size_args(mode, steps_per_trial, init_val, max_trials, margin, max_val)
        self.optimal_batch_size: int | None = init_val
        self._mode, self._steps_per_trial, self._init_val = mode, steps_per_trial, init_val
        self._max_trials = max_trials
        self._batch_arg_name, self._margin, self._max_val = batch_arg_name, margin, max_val

    def setup(self, trainer: Trainer, pl_module: Module, stage: str | None = None) -> None:
        check_batch_size_finder(trainer, pl_module, self._batch_arg_name)

    def scale_batch_size(self, trainer: Trainer, pl_module: Module) -> None:
        self.optimal_batch_size = scale_batch_size(
            trainer,
            pl_module,
            self._mode,
            self._steps_per_trial,
            self._init_val,
            self._max_trials,
            self._batch_arg_name,
            self._margin,
            self._max_val,
        )

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.scale_batch_size(trainer, pl_module)

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "validate":
            return
        self.scale_batch_size(trainer, pl_module)

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.scale_batch_size(trainer, pl_module)

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.scale_batch_size(trainer, pl_module)
