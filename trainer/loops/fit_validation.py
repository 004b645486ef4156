"""Validation inside ``fit``: its loaders, when it falls due (Lightning's ``val_check_interval`` and
``check_val_every_n_epoch`` rules), running it, and the sanity check before training."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trainer.loops.hooks as hooks
from trainer.exceptions import MisconfigurationException
from trainer.loops.evaluation import EvaluationLoop
from trainer.seed import isolate_rng

if TYPE_CHECKING:
    from trainer.loops.progress import Progress
    from trainer.view import TrainerView


class FitValidation:
    """The fit's validation loop and its schedule, over the fit loop's ``progress``."""

    def __init__(self, trainer: TrainerView, progress: Progress, can_stop: Callable[[], bool]) -> None:
        self.trainer, self.progress, self.can_stop = trainer, progress, can_stop
        self.loop = EvaluationLoop(trainer, "validation")
        self.check_batch: int | float = math.inf  # training batches between validations
        self.num_training_batches: int | float = math.inf

    def use(self, loaders: list[Any], num_training_batches: int | float) -> None:
        """The (re)requested validation loaders, and how often they run in epochs of this many batches."""
        trainer = self.trainer
        self.loop.setup(loaders, trainer.limits["validation"])
        self.num_training_batches = num_training_batches
        self.check_batch = val_check_batch(
            trainer.val_check_interval, num_training_batches, trainer.check_val_every_n_epoch
        )

    def may_run(self) -> bool:
        return bool(self.loop.loaders) and sum(self.loop.num_batches) > 0

    def due(self, batch_idx: int) -> bool:
        """Lightning's rule for a validation after training batch ``batch_idx``."""
        trainer, progress = self.trainer, self.progress
        if not self.may_run():
            return False
        every = trainer.check_val_every_n_epoch
        if every is not None and (progress.epoch + 1) % every:
            return False
        if trainer.should_stop and self.can_stop():
            return True
        last = batch_idx + 1 >= self.num_training_batches
        if math.isinf(self.check_batch):
            return last
        index = progress.total_batches - 1 if every is None else batch_idx
        return (index + 1) % self.check_batch == 0

    def run(self, zero_grad: bool) -> None:
        """One validation; ``zero_grad``: outside an accumulation window (Lightning's hook)."""
        trainer, progress = self.trainer, self.progress
        if zero_grad:
            trainer.lightning_module.on_validation_model_zero_grad()
        with trainer.state.running("validate"):  # the count before on_validation_end: a checkpoint saved there has it
            self.loop.run(before_end=progress.finish_validation)

    def sanity_check(self) -> None:
        """A few validation batches first, so a bug there shows before hours of training."""
        trainer = self.trainer
        steps = trainer.num_sanity_val_steps
        if steps == 0 or not self.loop.loaders:
            return
        with isolate_rng():  # Lightning isolates the sanity check's draws (and only those) from training's
            with trainer.state.running("sanity_check"):
                hooks.call_callbacks(trainer, "on_sanity_check_start")
                self.loop.run(max_batches=None if math.isinf(steps) else int(steps), publish=False)
            hooks.call_callbacks(trainer, "on_sanity_check_end")


def val_check_batch(interval: int | float, num_batches: int | float, every_n_epochs: int | None) -> int | float:
    """Training batches between validations (Lightning's ``val_check_batch``)."""
    if isinstance(interval, int) and not isinstance(interval, bool):
        if math.isfinite(num_batches) and interval > num_batches and every_n_epochs is not None:
            raise MisconfigurationException(
                f"val_check_interval={interval} is more than the {int(num_batches)} training batches of an epoch; "
                "validate less often with check_val_every_n_epoch, or count across epochs with "
                "check_val_every_n_epoch=None."
            )
        return interval
    if math.isinf(num_batches):
        if interval != 1.0:
            raise MisconfigurationException(
                f"val_check_interval={interval} is a fraction of an epoch, but the training loader has no length; "
                "give an int (every N batches) or 1.0 (at the end of the data)."
            )
        return math.inf
    return max(1, int(num_batches * interval))
