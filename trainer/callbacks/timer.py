"""``Timer``: time each stage, and stop training when a time budget is spent (Lightning's options).

The training time rides in checkpoints, so a resumed run continues the same budget instead of
starting a new one. Global rank zero's clock decides and every rank follows, so all stop together.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException
from trainer.flags import as_duration

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

STAGES = ("train", "sanity_check", "validate", "test", "predict")  # Lightning's RunningStage values


def parse_duration(duration: str | timedelta | dict[str, int] | None) -> timedelta | None:
    """``"DD:HH:MM:SS"``, a ``timedelta``, or ``timedelta``'s keywords as a dict (``{"hours": 2}``)."""
    return as_duration("Timer(duration={!r})", duration)


class Timer(Callback):
    """Track the time spent in each stage; with ``duration``, stop training once it has passed.

    The check runs after every training batch (``interval="step"``, which stops mid-epoch) or at
    the end of every training epoch (``interval="epoch"``), and once when fit starts, so a resumed
    run whose budget is already spent stops at once. Times are in seconds (``time.monotonic``).
    """

    def __init__(
        self,
        duration: str | timedelta | dict[str, int] | None = None,
        interval: str = "step",
        verbose: bool = True,
    ) -> None:
        if interval not in ("step", "epoch"):
            raise MisconfigurationException(
                f"Unsupported parameter value `Timer(interval={interval})`: choose 'step' or 'epoch'."
            )
        limit = parse_duration(duration)
        self._duration = limit.total_seconds() if limit is not None else None
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(STAGES)
        self._offset = 0.0  # training time of the runs this one resumes

    # ---- queries ------------------------------------------------------------------------------------
    def start_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last started (``time.monotonic`` seconds), or None if it has not."""
        return self._start_time[_stage(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last ended, or None while it runs or before it started."""
        return self._end_time[_stage(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage``'s latest run; for "train", plus the training time of resumed runs."""
        start, end = self.start_time(stage), self.end_time(stage)
        offset = self._offset if _stage(stage) == "train" else 0.0
        if start is None:
            return offset
        return (time.monotonic() if end is None else end) - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of ``duration`` (negative once past it), or None without a duration."""
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    # ---- the clocks ---------------------------------------------------------------------------------
    def _start(self, stage: str) -> None:
        self._start_time[stage] = time.monotonic()
        self._end_time[stage] = None

    def _end(self, stage: str) -> None:
        self._end_time[stage] = time.monotonic()

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start("train")

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end("train")

    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start("sanity_check")

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end("sanity_check")

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start("validate")

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end("validate")

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start("test")

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end("test")

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start("predict")

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end("predict")

    # ---- the budget ---------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self._duration is not None:  # a resumed run may have spent its budget already
            self._check(trainer)

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check(trainer)

    def _check(self, trainer: Trainer) -> None:
        """Rank zero's clock decides (a collective: every rank calls this at the same point)."""
        assert self._duration is not None
        stop = bool(trainer.strategy.broadcast(self.time_elapsed("train") >= self._duration))
        if not stop:
            return
        trainer.should_stop = True
        if self._verbose and trainer.is_global_zero:
            elapsed = timedelta(seconds=int(self.time_elapsed("train")))
            message = f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop."
            log.info(message)  # where Lightning's message goes (a script's logging may read it)
            print(f"steadytrain: {message}", flush=True)

    # ---- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))


def _stage(stage: str) -> str:
    if stage not in STAGES:
        raise MisconfigurationException(f"Timer: unknown stage {stage!r}; the stages are {', '.join(STAGES)}.")
    return stage
