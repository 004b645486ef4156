"""``EarlyStopping``: stop when a monitored metric stops improving (Lightning's options and timing)."""

from __future__ import annotations

import math
from enum import Enum
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class EarlyStoppingReason(Enum):
    """Why ``EarlyStopping`` stopped the run (``early_stopping.stopping_reason``), Lightning's values."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stop after ``patience`` checks without an improvement larger than ``min_delta``.

    The check runs at the end of each training epoch when validation runs once per epoch, else
    after each validation (``check_on_train_epoch_end`` overrides). Rank zero decides and every
    rank follows, so all ranks stop together; a mid-epoch check stops the epoch there.
    """

    monitors_metrics = True

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        if mode not in ("min", "max"):
            raise MisconfigurationException(f"EarlyStopping(mode={mode!r}): `mode` can be min, max, got {mode}.")
        if patience < 0 or min_delta < 0:
            raise MisconfigurationException(
                f"EarlyStopping(patience={patience!r}, min_delta={min_delta!r}) must both be >= 0."
            )
        self.monitor = monitor
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.log_rank_zero_only = log_rank_zero_only
        self.wait_count = 0
        self.best_score = math.inf if mode == "min" else -math.inf
        self.stopped_epoch = 0
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self._reason = ""

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    @property
    def _former_state_key(self) -> str:
        """The key steadytrain used before it took Lightning's: its checkpoints still restore."""
        return f"EarlyStopping[{self.monitor}]"

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if self.check_on_train_epoch_end is None:
            self.check_on_train_epoch_end = trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.check_on_train_epoch_end and not self._skip(trainer):
            self._check(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        if not self.check_on_train_epoch_end and not self._skip(trainer):
            self._check(trainer)

    def _skip(self, trainer: Trainer) -> bool:
        return trainer.state.fn != "fit" or trainer.sanity_checking or bool(trainer.fast_dev_run)

    def _check(self, trainer: Trainer) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            if not self.strict:
                return
            raise KeyError(
                f"EarlyStopping(monitor={self.monitor!r}) found no such logged metric; logged: "
                f"{sorted(trainer.callback_metrics) or 'nothing'}. Log it, or pass strict=False to skip the "
                "check while it is missing."
            )
        stop = bool(trainer.strategy.broadcast(self._update(float(value))))
        if stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
        if trainer.is_global_zero and (stop or self.verbose):
            what = "early stopping" if stop else "early-stopping check"
            detail = self.reason or f"{self.monitor} improved to {self.best_score:.6g}."
            print(
                f"steadytrain: {what} at epoch {trainer.current_epoch}, step {trainer.global_step}: {detail}",
                flush=True,
            )

    @property
    def reason(self) -> str:
        """Why the last check stopped, or not."""
        return self._reason

    def _improved(self, score: float) -> bool:
        if self.mode == "min":
            return score < self.best_score - self.min_delta
        return score > self.best_score + self.min_delta

    def _update(self, score: float) -> bool:
        """Whether to stop, given this check's score; why, in Lightning's words, in ``reason`` (and, when it stops,
        in ``stopping_reason_message``)."""
        stop, reason, self._reason = self._criteria(score)
        if stop:
            self.stopping_reason, self.stopping_reason_message = reason, self._reason
        return stop

    def _criteria(self, score: float) -> tuple[bool, EarlyStoppingReason, str]:
        monitor, best, order = self.monitor, self.best_score, "<" if self.mode == "min" else ">"
        beyond = (lambda a, b: a < b) if self.mode == "min" else (lambda a, b: a > b)
        if self.check_finite and not math.isfinite(score):
            why = f"Monitored metric {monitor} = {score} is not finite. Previous best value was {best:.3f}."
            return True, EarlyStoppingReason.NON_FINITE_METRIC, why + " Signaling Trainer to stop."
        if self.stopping_threshold is not None and beyond(score, self.stopping_threshold):
            why = f"Stopping threshold reached: {monitor} = {score:.6g} {order} {self.stopping_threshold}."
            return True, EarlyStoppingReason.STOPPING_THRESHOLD, why + " Signaling Trainer to stop."
        if self.divergence_threshold is not None and beyond(-score, -self.divergence_threshold):
            order = ">" if self.mode == "min" else "<"
            why = f"Divergence threshold reached: {monitor} = {score:.6g} {order} {self.divergence_threshold}."
            return True, EarlyStoppingReason.DIVERGENCE_THRESHOLD, why + " Signaling Trainer to stop."
        if self._improved(score):
            gain = f" by {abs(best - score):.3f} >= min_delta = {self.min_delta}" if math.isfinite(best) else ""
            self.best_score, self.wait_count = score, 0
            return False, self.stopping_reason, f"Metric {monitor} improved{gain}. New best score: {score:.3f}"
        self.wait_count += 1
        why = f"Monitored metric {monitor} did not improve in the last {self.wait_count} records."
        why += f" Best score: {best:.3f}."
        if self.wait_count < self.patience:
            return False, self.stopping_reason, why
        return True, EarlyStoppingReason.PATIENCE_EXHAUSTED, why + " Signaling Trainer to stop."

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "best_score": self.best_score,
            "stopped_epoch": self.stopped_epoch,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = state_dict["wait_count"]
        self.best_score = state_dict["best_score"]
        self.stopped_epoch = state_dict["stopped_epoch"] or 0
        self.stopping_reason = EarlyStoppingReason(state_dict.get("stopping_reason", 0))
        self.stopping_reason_message = state_dict.get("stopping_reason_message")
