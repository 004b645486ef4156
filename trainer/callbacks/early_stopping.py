"""``EarlyStopping``: stop when a monitored metric stops improving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.trainer import Trainer


class EarlyStopping(Callback):
    """Stop after ``patience`` checks without an improvement larger than ``min_delta``.

    The check runs at each epoch end, after validation (only in epochs that validated, when
    fit has validation). Rank zero decides and every rank follows, so all ranks stop together.
    """

    def __init__(
        self,
        monitor: str,
        mode: str = "min",
        patience: int = 3,
        min_delta: float = 0.0,
        check_finite: bool = True,
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping(mode={mode!r}): choose 'min' or 'max'.")
        if patience < 0 or min_delta < 0:
            raise ValueError(f"EarlyStopping(patience={patience!r}, min_delta={min_delta!r}) must both be >= 0.")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = min_delta
        self.check_finite = check_finite
        self.wait_count = 0
        self.best_score = math.inf if mode == "min" else -math.inf
        self.stopped_epoch: int | None = None
        self.reason = ""
        self._validated = False  # validation ran (outside the sanity check) since the last check

    @property
    def state_key(self) -> str:
        return f"EarlyStopping[{self.monitor}]"

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        self._validated = False

    def on_validation_epoch_end(self, trainer: Trainer, module: Module) -> None:
        self._validated = self._validated or not trainer.sanity_checking

    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        validates = bool(trainer.val_dataloaders) and trainer.check_val_every_n_epoch is not None
        if validates and not self._validated:
            return  # no validation this epoch: the metric is stale, so this epoch does not count
        self._validated = False
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise KeyError(
                f"EarlyStopping(monitor={self.monitor!r}) found no such logged metric; logged: "
                f"{sorted(trainer.callback_metrics) or 'nothing'}."
            )
        stop = trainer.strategy.broadcast(self._update(float(value)))
        if stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            if trainer.is_global_zero:
                print(f"steadytrain: early stopping at epoch {trainer.current_epoch}: {self.reason}", flush=True)

    def _update(self, score: float) -> bool:
        if self.check_finite and not math.isfinite(score):
            self.reason = f"{self.monitor}={score} is not finite."
            return True
        improved = (
            score < self.best_score - self.min_delta
            if self.mode == "min"
            else (score > self.best_score + self.min_delta)
        )
        if improved:
            self.best_score = score
            self.wait_count = 0
            return False
        self.wait_count += 1
        self.reason = (
            f"{self.monitor} did not improve by more than {self.min_delta} for {self.wait_count} checks "
            f"(best {self.best_score:.6g})."
        )
        return self.wait_count >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "best_score": self.best_score,
            "stopped_epoch": self.stopped_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait_count = state["wait_count"]
        self.best_score = state["best_score"]
        self.stopped_epoch = state["stopped_epoch"]
