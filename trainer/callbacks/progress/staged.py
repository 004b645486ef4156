"""The hooks of Lightning's bars, drawn through a ``Display``: one bar per stage, as ``TQDMProgressBar`` shows.

Sanity checking, each training epoch (``Epoch N``, on rank zero), each validation run beside it,
testing and predicting; each loader of a stage restarts its bar (``Validation DataLoader 1``). The
training bar ends every epoch at the batches the epoch ran (``25/25``) with the metrics then; it
moves every ``refresh_rate`` batches, and metrics are read only when a bar is drawn.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.callbacks.progress.base import ProgressBar
from trainer.callbacks.progress.displays import Display, LineDisplay
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

_DESCRIPTIONS = {"validation": "Validation", "test": "Testing", "predict": "Predicting"}


class StagedProgressBar(ProgressBar):
    """Hooks to bars. Subclasses say how a terminal draws (``terminal_display``); elsewhere lines are written."""

    def __init__(self, refresh_rate: int, leave: bool, line_interval_s: float) -> None:
        super().__init__()
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise MisconfigurationException(
                f"{type(self).__name__}(refresh_rate={refresh_rate!r}) must be an int >= 0 (0: no bar)."
            )
        if line_interval_s < 0:
            raise MisconfigurationException(
                f"{type(self).__name__}(line_interval_s={line_interval_s!r}) must be >= 0 seconds."
            )
        self._refresh_rate = refresh_rate
        self._leave = leave
        self.line_interval_s = line_interval_s
        self._display: Display | None = None
        self._train_open = False  # only when enabled
        self._train_total: int | float = math.inf
        self._train_metrics: Callable[[], dict[str, Any]] = dict
        self._loader_idx: int | None = None  # the loader whose evaluation bar is open
        self._eval_n = 0
        self._eval_total: int | float = math.inf

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0

    def terminal_display(self) -> Display:
        raise NotImplementedError

    @property
    def display(self) -> Display:
        """The terminal's bars when stdout is a terminal, else plain lines (chosen on first use)."""
        if self._display is None:
            tty = sys.stdout.isatty()
            self._display = self.terminal_display() if tty else LineDisplay(self.line_interval_s)
        return self._display

    def _due(self, n: int, total: int | float) -> bool:
        return self.is_enabled and (n % self._refresh_rate == 0 or n == total)

    # ---- training -----------------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._open_train(trainer)

    def _open_train(self, trainer: Trainer) -> None:
        if self.is_enabled:
            total = _finite(self.total_train_batches)
            initial = trainer.fit_loop.progress.batches_done  # > 0 after a mid-epoch resume
            self.display.open("train", f"Epoch {trainer.current_epoch}", total, initial, 0, leave=True)
            self._train_open = True
            self._train_total = math.inf if total is None else total
            self._train_metrics = functools.partial(self.get_metrics, trainer, trainer.lightning_module)

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.fit_loop.progress.batches_done:  # resumed mid-epoch: on_train_epoch_start does not run
            self._open_train(trainer)

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Every batch: a few attribute reads and a clock read (the display decides whether to draw).
        n = trainer.fit_loop.progress.batches_done
        if self._train_open and (n % self._refresh_rate == 0 or n == self._train_total):
            self._display.update("train", n, self._train_metrics)  # type: ignore[union-attr]

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.is_enabled and self._train_open:
            n = trainer.fit_loop.progress.batches_done
            self.display.update("train", n, lambda: self.get_metrics(trainer, pl_module), final=True)
            if self._leave:
                self.display.close("train")
                self._train_open = False

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._display is not None:
            self.display.close("train")
        self._train_open = False

    # ---- sanity check, validation, test, predict --------------------------------------------------------
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._loader_idx = None

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end_eval("validation")

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._loader_idx = None

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_start(trainer, "validation", dataloader_idx)

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end("validation", batch_idx, dataloader_idx)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        if not trainer.sanity_checking:
            self._end_eval("validation")
        if self.is_enabled and trainer.state.fn == "fit" and self._train_open and not trainer.is_last_batch:
            # the validation metrics join the training bar (at the epoch end, its final drawing shows them)
            n = trainer.fit_loop.progress.batches_done
            self.display.update("train", n, lambda: self.get_metrics(trainer, pl_module))

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._loader_idx = None

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_start(trainer, "test", dataloader_idx)

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end("test", batch_idx, dataloader_idx)

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end_eval("test")

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._loader_idx = None

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_start(trainer, "predict", dataloader_idx)

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._eval_batch_end("predict", batch_idx, dataloader_idx)

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._end_eval("predict")

    def _eval_batch_start(self, trainer: Trainer, stage: str, dataloader_idx: int) -> None:
        """A new loader (re)starts the stage's bar with its own total."""
        if not self.is_enabled or self._loader_idx == dataloader_idx:
            return
        if self._loader_idx is not None:
            self._finish(stage)
        self._loader_idx = dataloader_idx
        self._eval_n = 0
        desc = "Sanity Checking" if trainer.sanity_checking else _DESCRIPTIONS[stage]
        total = _finite(self.total_batches_current_dataloader(stage, dataloader_idx))
        beside_training = trainer.state.fn == "fit"  # under the training bar, and gone when it ends
        below = beside_training and not trainer.sanity_checking
        name = f"{desc} DataLoader {dataloader_idx}"
        self.display.open(stage, name, total, 0, int(below), leave=not beside_training)
        self._eval_total = math.inf if total is None else total

    def _eval_batch_end(self, stage: str, batch_idx: int, dataloader_idx: int) -> None:
        if self.is_enabled and self._loader_idx == dataloader_idx:
            self._eval_n = batch_idx + 1
            if self._due(self._eval_n, self._eval_total):
                self.display.update(stage, self._eval_n, None)

    def _finish(self, stage: str) -> None:
        self.display.update(stage, self._eval_n, None, final=True)
        self.display.close(stage)

    def _end_eval(self, stage: str) -> None:
        if self.is_enabled and self._loader_idx is not None:
            self._finish(stage)
        self._loader_idx = None

    # ---- printing and clean-up ---------------------------------------------------------------------------
    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """``print`` above the bars while they draw (``self.print`` in a module comes here)."""
        if self._display is None:
            print(*args, sep=sep, **kwargs)
            return
        self.display.write(sep.join(map(str, args)), end=kwargs.get("end", "\n"))

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if self._display is not None:
            self._display.close_all()
        self._train_open = False
        self._loader_idx = None

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        if self._display is not None:
            self._display.close_all()


def _finite(total: int | float) -> int | None:
    """tqdm's total: None for a loader without a length."""
    return None if math.isinf(total) or math.isnan(total) else int(total)
