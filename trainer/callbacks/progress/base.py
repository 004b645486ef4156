"""``ProgressBar``: Lightning's base class for progress bars (the Trainer keeps at most one).

It holds what every bar needs (the stage descriptions, the totals of the running stage and loader, the metrics
to show, ``print`` that does not tear a bar, ``enable``/``disable``) and draws nothing itself. The Trainer adds a
``TQDMProgressBar`` unless ``enable_progress_bar=False`` or ``callbacks=`` already holds a bar.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback
from trainer.callbacks.progress.host_values import HostValues

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class ProgressBar(Callback):
    """Subclass it to draw progress your own way, as in Lightning.

    ``ProgressBar(refresh_rate=..., ...)`` itself builds a :class:`TQDMProgressBar` (steadytrain 0.1
    named its bar ``ProgressBar``), so older code keeps working.
    """

    _built_by_name: type[ProgressBar] | None = None  # what ``ProgressBar(...)`` builds; set by the package

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is ProgressBar and cls._built_by_name is not None:
            return super().__new__(cls._built_by_name)
        return super().__new__(cls)

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._current_eval_dataloader_idx: int | None = None
        self._enabled = True
        self._host = HostValues()

    @property
    def trainer(self) -> Trainer:
        if self._trainer is None:
            raise TypeError(f"{type(self).__name__} is not attached to a Trainer yet; it is from the stage's setup on.")
        return self._trainer

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def disable(self) -> None:
        """Draw nothing (the Trainer calls it on every rank but global rank zero)."""
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        self._trainer = trainer
        if not trainer.is_global_zero:
            self.disable()

    # ---- the words each bar starts with ------------------------------------------------------------------
    @property
    def sanity_check_description(self) -> str:
        return "Sanity Checking"

    @property
    def train_description(self) -> str:
        return "Training"

    @property
    def validation_description(self) -> str:
        return "Validation"

    @property
    def test_description(self) -> str:
        return "Testing"

    @property
    def predict_description(self) -> str:
        return "Predicting"

    # ---- the totals Lightning's bars read --------------------------------------------------------------
    @property
    def total_train_batches(self) -> int | float:
        """Training batches of this epoch (``inf`` for a loader without a length); with ``max_epochs=-1`` and
        ``max_steps``, at most the steps left."""
        trainer = self.trainer
        if trainer.max_epochs == -1 and trainer.max_steps is not None and trainer.max_steps > 0:
            return min(trainer.num_training_batches, trainer.max_steps - trainer.global_step)
        return trainer.num_training_batches

    @property
    def total_val_batches(self) -> int | float:
        """Validation batches of one validation run, every loader together; 0 in a fit epoch that does not validate
        (``check_val_every_n_epoch``), as Lightning's bars count."""
        trainer, every = self.trainer, self.trainer.check_val_every_n_epoch
        if trainer.state.fn == "fit" and not trainer.sanity_checking and every and (trainer.current_epoch + 1) % every:
            return 0
        return sum(self._eval_batches("validation"))

    @property
    def total_val_batches_current_dataloader(self) -> int | float:
        """Batches of the validation loader running now (the sanity check's share while it runs)."""
        return self._current("validation")

    @property
    def total_test_batches_current_dataloader(self) -> int | float:
        return self._current("test")

    @property
    def total_predict_batches_current_dataloader(self) -> int | float:
        return self._current("predict")

    def _current(self, stage: str) -> int | float:
        counts = self._eval_batches(stage)
        idx = self._current_eval_dataloader_idx or 0
        return counts[idx] if idx < len(counts) else math.inf

    def _eval_batches(self, stage: str) -> list[int | float]:
        """Batches per loader of the evaluation ``stage`` ("validation", "test", "predict") of the running stage."""
        trainer = self.trainer
        if stage == "validation":
            loop = trainer.fit_loop.val_loop if trainer.state.fn == "fit" else trainer.validate_loop  # type: ignore[attr-defined]
        else:
            loop = trainer.test_loop if stage == "test" else trainer.predict_loop
        counts = list(loop.num_batches)
        if trainer.sanity_checking and trainer.num_sanity_val_steps >= 0:
            counts = [min(n, trainer.num_sanity_val_steps) for n in counts]
        return counts

    def has_dataloader_changed(self, dataloader_idx: int) -> bool:
        """Whether ``dataloader_idx`` is another loader than the last batch's (and remember it)."""
        before, self._current_eval_dataloader_idx = self._current_eval_dataloader_idx, dataloader_idx
        return before != dataloader_idx

    def reset_dataloader_idx_tracker(self) -> None:
        self._current_eval_dataloader_idx = None

    # ---- what a bar shows ------------------------------------------------------------------------------
    def get_metrics(self, trainer: Trainer, pl_module: Module) -> dict[str, int | str | float]:
        """``v_num`` (the logger's version) and the values logged with ``prog_bar=True``, as Lightning shows.

        The values come from :class:`HostValues`: on CUDA the newest ones already copied to the
        host, so drawing never waits for the device.
        """
        shown: dict[str, int | str | float] = {}
        version = _version(trainer.loggers)
        if version is not None:
            shown["v_num"] = version
        keys = trainer.metric_log.progress_bar_keys
        logged = {k: v for k, v in trainer.callback_metrics.items() if k in keys}
        if "v_num" in logged:
            warnings.warn(
                "The progress bar already shows 'v_num' (the logger's version) and "
                "`self.log('v_num', ..., prog_bar=True)` replaces it there; log it under another name, or override "
                "get_metrics() in the progress bar.",
                UserWarning,
                stacklevel=2,
            )
        shown.update(self._host.refresh(logged))
        return shown

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` without tearing a bar (``self.print`` in a module comes here)."""
        print(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        """Without the Trainer (attached again at the next stage's setup) and the device copies in flight."""
        return {**self.__dict__, "_trainer": None, "_host": HostValues()}


def _version(loggers: Any) -> int | str | None:
    """Lightning's ``v_num``: the logger's version (the last 4 characters of a string), several joined by ``_``."""
    versions = [getattr(lg, "version", None) for lg in loggers]
    versions = [v for v in versions if v not in (None, "")]
    if not versions:
        return None
    if len(versions) == 1:
        version = versions[0]
        return version[-4:] if isinstance(version, str) else version
    return "_".join(str(v)[-4:] if isinstance(v, str) else str(v) for v in versions)
