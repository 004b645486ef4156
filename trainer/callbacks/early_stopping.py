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
            raise MisconfigurationException(f"EarlyStopping(mode={mode!r}): choose 'min' or 'max'.")
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

    @property
    def state_key(self) -> str:
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
        return self.stopping_reason_message or ""

    def _improved(self, score: float) -> bool:
        if self.mode == "min":
            return score < self.best_score - self.min_delta
        return score > self.best_score + self.min_delta

    def _update(self, score: float) -> bool:
        """Whether to stop, given this check's score; records why in ``stopping_reason_message``."""
        self.stopping_reason_message = None
        worse = (lambda a, b: a > b) if self.mode == "min" else (lambda a, b: a < b)
        if self.check_finite and not math.isfinite(score):
            self.stopping_reason = EarlyStoppingReason.NON_FINITE_METRIC
            self.stopping_reason_message = f"{self.monitor}={score} is not finite."
            return True
        if self.stopping_threshold is not None and not worse(score, self.stopping_threshold):
            self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
            self.stopping_reason_message = (
                f"{self.monitor}={score:.6g} reached stopping_threshold {self.stopping_threshold}."
            )
            return True
        if self.divergence_threshold is not None and worse(score, self.divergence_threshold):
            self.stopping_reason = EarlyStoppingReason.DIVERGENCE_THRESHOLD
            self.stopping_reason_message = (
                f"{self.monitor}={score:.6g} is worse than divergence_threshold {self.divergence_threshold}."
            )
            return True
        if self._improved(score):
            self.best_score = score
            self.wait_count = 0
            return False
        self.wait_count += 1
        self.stopping_reason_message = (
            f"{self.monitor} did not improve by more than {self.min_delta} for {self.wait_count} checks "
            f"(best {self.best_score:.6g})."
        )
        if self.wait_count < self.patience:
            return False
        self.stopping_reason = EarlyStoppingReason.PATIENCE_EXHAUSTED
        return True

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
