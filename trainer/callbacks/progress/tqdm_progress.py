"""``TQDMProgressBar``: Lightning's default bar, drawn with tqdm on a terminal and as plain lines in a log.

As Lightning's: a bar per stage made by ``init_sanity_tqdm``, ``init_train_tqdm``, ``init_validation_tqdm``,
``init_test_tqdm`` and ``init_predict_tqdm`` (override them to change a bar), held as ``train_progress_bar``,
``val_progress_bar``, ``test_progress_bar`` and ``predict_progress_bar``; each loader of a stage restarts its bar.
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any

from tqdm import tqdm as _tqdm

from trainer.callbacks.progress.base import ProgressBar
from trainer.callbacks.progress.tqdm_lines import Tqdm
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

__all__ = ["TQDMProgressBar", "Tqdm", "convert_inf"]


class TQDMProgressBar(ProgressBar):
    """Lightning's arguments: the bars move every ``refresh_rate`` batches (0 hides them; the ``TQDM_MINITERS``
    environment variable raises it, Colab's default is 20), are offset by ``process_position`` lines, and with
    ``leave=True`` each epoch's training bar stays on screen.

    Where stdout is not a terminal (a log file, CI, SLURM), one plain line is written at most every
    ``line_interval_s`` seconds and at the end of every bar, instead of tqdm's ``\\r`` redraws. Either way the
    bar shows ``v_num`` and what was logged with ``prog_bar=True``, and drawing it never waits for the GPU (see
    ``HostValues``).
    """

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"

    def __init__(
        self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False, line_interval_s: float = 10.0
    ) -> None:
        super().__init__()
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise MisconfigurationException(
                f"{type(self).__name__}(refresh_rate={refresh_rate!r}) must be an int >= 0 (0: no bar)."
            )
        if line_interval_s < 0:
            raise MisconfigurationException(
                f"{type(self).__name__}(line_interval_s={line_interval_s!r}) must be >= 0 seconds."
            )
        self._refresh_rate = _resolve_refresh_rate(refresh_rate)
        self._process_position = process_position
        self._leave = leave
        self.line_interval_s = line_interval_s
        self._train_progress_bar: Tqdm | None = None
        self._val_progress_bar: Tqdm | None = None
        self._test_progress_bar: Tqdm | None = None
        self._predict_progress_bar: Tqdm | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: None if isinstance(v, _tqdm) else v for k, v in super().__getstate__().items()}  # tqdm won't pickle

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def process_position(self) -> int:
        return self._process_position

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0

    # ---- the bars, as Lightning names them ---------------------------------------------------------------
    @property
    def train_progress_bar(self) -> Tqdm:
        return _set(self._train_progress_bar, self, "train")

    @train_progress_bar.setter
    def train_progress_bar(self, bar: Tqdm) -> None:
        self._train_progress_bar = bar

    @property
    def val_progress_bar(self) -> Tqdm:
        return _set(self._val_progress_bar, self, "val")

    @val_progress_bar.setter
    def val_progress_bar(self, bar: Tqdm) -> None:
        self._val_progress_bar = bar

    @property
    def test_progress_bar(self) -> Tqdm:
        return _set(self._test_progress_bar, self, "test")

    @test_progress_bar.setter
    def test_progress_bar(self, bar: Tqdm) -> None:
        self._test_progress_bar = bar

    @property
    def predict_progress_bar(self) -> Tqdm:
        return _set(self._predict_progress_bar, self, "predict")

    @predict_progress_bar.setter
    def predict_progress_bar(self, bar: Tqdm) -> None:
        self._predict_progress_bar = bar

    # ---- override points: each stage's bar ----------------------------------------------------------------
    def _tqdm(self, desc: str, position: int, leave: bool, smoothing: float | None = None) -> Tqdm:
        extra = {} if smoothing is None else {"smoothing": smoothing}
        return Tqdm(
            desc=desc,
            position=2 * self.process_position + position,
            disable=self.is_disabled,
            leave=leave,
            dynamic_ncols=True,
            file=sys.stdout,
            bar_format=self.BAR_FORMAT,
            line_interval_s=self.line_interval_s,
            **extra,
        )

    def init_sanity_tqdm(self) -> Tqdm:
        """The sanity check's bar."""
        return self._tqdm(self.sanity_check_description, 0, leave=False)

    def init_train_tqdm(self) -> Tqdm:
        """The training bar (one for the fit, or one per epoch with ``leave=True``)."""
        return self._tqdm(self.train_description, 0, leave=True, smoothing=0)

    def init_validation_tqdm(self) -> Tqdm:
        """A validation's bar: under the training bar during fit (and gone when done), alone in ``validate``."""
        beside_training = self.trainer.state.fn != "validate"
        return self._tqdm(self.validation_description, int(beside_training), leave=not beside_training)

    def init_test_tqdm(self) -> Tqdm:
        return self._tqdm("Testing", 0, leave=True)

    def init_predict_tqdm(self) -> Tqdm:
        return self._tqdm(self.predict_description, 0, leave=True, smoothing=0)

    # ---- training -----------------------------------------------------------------------------------------
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.val_progress_bar = self.init_sanity_tqdm()
        self.train_progress_bar = Tqdm(disable=True)  # no training bar yet: print() goes to the sanity bar

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.val_progress_bar.close()
        self.train_progress_bar.close()

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.train_progress_bar = self.init_train_tqdm()
        done = trainer.fit_loop.progress.batches_done
        if done:  # resumed mid-epoch: on_train_epoch_start does not run for this epoch
            self._start_epoch(trainer, initial=done)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        self._start_epoch(trainer, initial=0)

    def _start_epoch(self, trainer: Trainer, initial: int) -> None:
        bar = self.train_progress_bar
        bar.reset()
        bar.total = convert_inf(self.total_train_batches)
        bar.initial = bar.n = initial
        bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar, n = self._train_progress_bar, batch_idx + 1
        if bar is not None and not bar.disable and self._should_update(n, bar.total):
            bar.n = n
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # draws the count and the metrics at once

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        bar = self.train_progress_bar
        if not bar.disable:
            bar.set_postfix(self.get_metrics(trainer, pl_module))
        if self._leave:
            bar.close()

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.train_progress_bar.close()

    # ---- evaluation -----------------------------------------------------------------------------------------
    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        if not trainer.sanity_checking:
            self.val_progress_bar = self.init_validation_tqdm()

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            desc = self.sanity_check_description if trainer.sanity_checking else self.validation_description
            _restart(self.val_progress_bar, self.total_val_batches_current_dataloader, desc, dataloader_idx)

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_end(self._val_progress_bar, batch_idx)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        if self._train_progress_bar is not None and trainer.state.fn == "fit":
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.test_progress_bar = self.init_test_tqdm()

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            total = self.total_test_batches_current_dataloader
            _restart(self.test_progress_bar, total, self.test_description, dataloader_idx)

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_end(self._test_progress_bar, batch_idx)

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.test_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self.predict_progress_bar = self.init_predict_tqdm()

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            total = self.total_predict_batches_current_dataloader
            _restart(self.predict_progress_bar, total, self.predict_description, dataloader_idx)

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_end(self._predict_progress_bar, batch_idx)

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.predict_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def _batch_end(self, bar: Tqdm | None, batch_idx: int) -> None:
        n = batch_idx + 1
        if bar is not None and self._should_update(n, bar.total):
            _update_n(bar, n)

    def _should_update(self, current: int, total: int | float | None) -> bool:
        return self.is_enabled and (current % self._refresh_rate == 0 or current == total)

    # ---- printing and clean-up ---------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` above the bars while one draws (through ``tqdm.write``), else Python's ``print``."""
        bars = (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar)
        active = next((bar for bar in bars if bar is not None and not bar.disable), None)
        if active is None:
            print(*args, **kwargs)
            return
        sep = kwargs.pop("sep", " ")
        active.write(sep.join(map(str, args)), **kwargs)

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        for bar in (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar):
            if bar is not None:
                bar.close()


def _set(bar: Tqdm | None, owner: TQDMProgressBar, name: str) -> Tqdm:
    if bar is None:
        raise TypeError(f"{type(owner).__name__}.{name}_progress_bar is not set yet: its stage has not started.")
    return bar


def _restart(bar: Tqdm, total: int | float, description: str, dataloader_idx: int) -> None:
    """A new loader of a stage: the stage's bar starts over at 0 of that loader's batches."""
    bar.reset()
    bar.total = convert_inf(total)
    bar.initial = 0
    bar.set_description(f"{description} DataLoader {dataloader_idx}")


def _update_n(bar: Tqdm, value: int) -> None:
    if not bar.disable:
        bar.n = value
        bar.refresh()


def convert_inf(x: int | float | None) -> int | float | None:
    """tqdm's total: None for a loader without a length."""
    return None if x is None or math.isinf(x) or math.isnan(x) else x


def _resolve_refresh_rate(refresh_rate: int) -> int:
    """Lightning's rules: 20 on Colab (a faster bar crashes its output), at least ``TQDM_MINITERS`` when set."""
    if os.getenv("COLAB_GPU") and refresh_rate == 1:
        return 20
    if "TQDM_MINITERS" in os.environ:
        return max(int(os.environ["TQDM_MINITERS"]), refresh_rate)
    return refresh_rate
