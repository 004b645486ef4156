"""Validation inside ``fit``: its loaders, when it falls due (Lightning's ``val_check_interval`` and
``check_val_every_n_epoch`` rules), running it, and the sanity check before training."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import trainer.loops.hooks as hooks
from trainer.data.loaders import shut_down_workers
from trainer.exceptions import MisconfigurationException
from trainer.loops.evaluation import EvaluationLoop
from trainer.seed import isolate_rng

if TYPE_CHECKING:
    from trainer.loops.progress import Progress
    from trainer.view import TrainerView


class FitValidation:
    """The fit's validation loop, its loaders and its schedule, over the fit loop's ``progress``.

    Its loaders are requested where Lightning requests them: by the sanity check (after ``on_sanity_check_start``,
    with ``trainer.sanity_checking`` true while ``val_dataloader()`` runs), before ``on_train_start`` when the first
    epoch validates, else at the first validation; then again at a validation ``reload_dataloaders_every_n_epochs``
    epochs after the last request.
    """

    def __init__(self, trainer: TrainerView, progress: Progress, can_stop: Callable[[], bool]) -> None:
        self.trainer, self.progress, self.can_stop = trainer, progress, can_stop
        self.loop = EvaluationLoop(trainer, "validation")
        self.check_batch: int | float = math.inf  # training batches between validations
        self.num_training_batches: int | float = math.inf
        self.request: Callable[[], list[Any]] = list  # the validation loaders, asked for anew
        self.defined = False  # fit validates: a validation_step, validation loaders, limit_val_batches > 0
        self.loaded = False
        self.loaded_epoch = -math.inf  # the epoch of the last request that counts for reloads
        self.last_time = time.monotonic()  # a time-based val_check_interval counts from the last validation

    def setup(self, request: Callable[[], list[Any]], defined: bool) -> None:
        """Where the loaders come from; they are requested later (:meth:`sanity_check`, :meth:`load`)."""
        self.request, self.loaded, self.loaded_epoch = request, False, -math.inf
        self.defined = defined and self.trainer.limits["validation"] != 0

    def use_train_batches(self, num_training_batches: int | float) -> None:
        """How often validation runs in epochs of this many training batches."""
        trainer = self.trainer
        self.num_training_batches = num_training_batches
        every = trainer.check_val_every_n_epoch if self.defined else None  # no validation: nothing to check
        interval = trainer.val_check_interval
        if isinstance(interval, timedelta):  # time-based: no batch count (Lightning's val_check_batch is None)
            self.check_batch = math.inf
            return
        self.check_batch = val_check_batch(interval, num_training_batches, every)

    def may_run(self) -> bool:
        return self.defined and (not self.loaded or sum(self.loop.num_batches) > 0)

    def validates_epoch(self, epoch: int) -> bool:
        every = self.trainer.check_val_every_n_epoch
        return every is None or (epoch + 1) % every == 0

    def load(self, now: bool = False) -> None:
        """Request the loaders when none are loaded or a reload is due (``now``: at once, as the batch-size search
        does after changing the batch size)."""
        trainer, epoch = self.trainer, self.progress.epoch
        every = trainer.reload_dataloaders_every_n_epochs
        if not self.defined or (self.loaded and not now and not (every and epoch - self.loaded_epoch >= every)):
            return
        previous = list(self.loop.loaders)
        self.loop.setup(self.request(), trainer.limits["validation"])
        if previous:
            shut_down_workers(previous)
        self.loaded, self.loaded_epoch = True, epoch

    def due(self, batch_idx: int, data_ended: bool = False) -> bool:
        """Lightning's rule for a validation after training batch ``batch_idx``; ``data_ended``: it was the last of an
        epoch whose length was not known before (Lightning validates there whenever the epoch validates)."""
        trainer, progress = self.trainer, self.progress
        if not self.may_run():
            return False
        every = trainer.check_val_every_n_epoch
        if every is not None and (progress.epoch + 1) % every:
            return False
        if data_ended:
            return True
        if trainer.should_stop and self.can_stop():
            return True
        if isinstance(trainer.val_check_interval, timedelta):  # Lightning 2.6: once the time has passed
            return time.monotonic() - self.last_time >= trainer.val_check_interval.total_seconds()
        last = batch_idx + 1 >= self.num_training_batches
        if math.isinf(self.check_batch):
            return last
        index = progress.total_batches - 1 if every is None else batch_idx
        return (index + 1) % self.check_batch == 0

    def before_training(self) -> None:
        """Lightning's request before ``on_train_start``, when the first epoch validates (its bars show them)."""
        self.last_time = time.monotonic()
        if self.defined and not self.loaded and self.validates_epoch(self.progress.epoch):
            self.load()

    def run(self, zero_grad: bool) -> None:
        """One validation; ``zero_grad``: outside an accumulation window (Lightning's hook)."""
        trainer, progress = self.trainer, self.progress
        with trainer.state.running("validate"):  # val_dataloader() sees trainer.validating, as in Lightning
            self.load()
        if not sum(self.loop.num_batches):
            return
        if zero_grad:
            trainer.lightning_module.on_validation_model_zero_grad()
        with trainer.state.running("validate"):  # the count before on_validation_end: a checkpoint saved there has it
            self.loop.run(before_end=progress.finish_validation)
        self.last_time = time.monotonic()

    def sanity_check(self) -> None:
        """A few validation batches first, so a bug there shows before hours of training. Its loaders are requested
        here, after ``on_sanity_check_start`` with ``trainer.sanity_checking`` true (Lightning's order)."""
        trainer = self.trainer
        steps = trainer.num_sanity_val_steps
        if steps == 0 or not self.defined:
            return
        with isolate_rng():  # Lightning isolates the sanity check's draws (and only those) from training's
            with trainer.state.running("sanity_check"):
                hooks.call_callbacks(trainer, "on_sanity_check_start")
                self._load_for_sanity_check()
                if sum(self.loop.num_batches):
                    before = trainer.metric_log.state_dict()  # its hooks read its values; then they are gone
                    self.loop.run(max_batches=None if math.isinf(steps) else int(steps), write=False)
                    trainer.metric_log.load_state_dict(before)
            hooks.call_callbacks(trainer, "on_sanity_check_end")

    def _load_for_sanity_check(self) -> None:
        """The check's loaders (unless a search loaded them already); Lightning counts this request for
        ``reload_dataloaders_every_n_epochs`` only when the first epoch validates."""
        if self.loaded:
            return
        self.loop.setup(self.request(), self.trainer.limits["validation"])
        self.loaded = True
        if self.validates_epoch(self.progress.epoch):
            self.loaded_epoch = self.progress.epoch


def val_check_batch(interval: int | float, num_batches: int | float, every_n_epochs: int | None) -> int | float:
    """Training batches between validations (Lightning's ``val_check_batch``)."""
    if isinstance(interval, int) and not isinstance(interval, bool):
        if math.isfinite(num_batches) and interval > num_batches and every_n_epochs is not None:
            raise MisconfigurationException(
                f"`val_check_interval` ({interval}) must be less than or equal to the number of the training batches "
                f"({int(num_batches)}): val_check_interval={interval} is more than the {int(num_batches)} training "
                "batches of an epoch; validate less often with check_val_every_n_epoch, count across epochs with "
                "check_val_every_n_epoch=None, or disable validation with limit_val_batches=0."
            )
        return interval
    if math.isinf(num_batches):
        if interval != 1.0:
            raise MisconfigurationException(
                f"val_check_interval={interval} is a fraction of an epoch, but the training loader has no length "
                "(When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be time "
                "based, `1.0` or an int): give an int (every N batches) or 1.0 (at the end of the data)."
            )
        return math.inf
    return max(1, int(num_batches * interval))
