"""``LearningRateFinder``: Lightning's callback that runs the learning-rate range test (``trainer.tuner.lr_find``)
at the start of ``fit``; with ``update_attr`` the fit goes on with the suggested rate. Override ``on_fit_start`` to
search elsewhere (``on_train_epoch_start`` at chosen epochs), as in Lightning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.callbacks.base import Callback
from trainer.tuner.lr_finder import MODES, LRFinder
from trainer.tuner.lr_search import check_lr_args, lr_find

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class LearningRateFinder(Callback):
    """The rates and losses of ``num_training_steps`` steps with a rising rate, kept in ``optimal_lr`` (an
    ``LRFinder``: ``results``, ``suggestion()``, ``plot()``)."""

    SUPPORTED_MODES = MODES

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower()
        check_lr_args(min_lr, max_lr, num_training_steps, mode, early_stop_threshold)
        self._min_lr, self._max_lr, self._num_training_steps, self._mode = min_lr, max_lr, num_training_steps, mode
        self._early_stop_threshold, self._update_attr, self._attr_name = early_stop_threshold, update_attr, attr_name
        self.optimal_lr: LRFinder | None = None

    def lr_find(self, trainer: Trainer, pl_module: Module) -> None:
        self.optimal_lr = lr_find(
            trainer,
            pl_module,
            self._min_lr,
            self._max_lr,
            self._num_training_steps,
            self._mode,
            self._early_stop_threshold,
            self._update_attr,
            self._attr_name,
        )

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.lr_find(trainer, pl_module)
