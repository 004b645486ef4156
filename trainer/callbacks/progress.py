"""``ProgressBar``: a tqdm bar on a terminal, plain periodic lines otherwise (logs, CI, SLURM)."""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class ProgressBar(Callback):
    """Loss, ``prog_bar=True`` metrics (each evaluation loader's apart) and it/s, by global rank zero only.

    Reading the loss forces a device sync, so it is read only every ``refresh_rate`` batches. The
    rate counts from the first batch this process trained, so it is right after a mid-epoch resume
    (when, as in Lightning, ``on_train_epoch_start`` does not run).
    """

    def __init__(self, refresh_rate: int = 10, line_interval_s: float = 10.0) -> None:
        if refresh_rate < 1:
            raise ValueError(f"ProgressBar(refresh_rate={refresh_rate!r}) must be >= 1.")
        self.refresh_rate = refresh_rate
        self.line_interval_s = line_interval_s
        self._bar: Any = None
        self._tty = sys.stdout.isatty()
        self._last_line = 0.0
        self._epoch_start: float | None = None
        self._count = 0

    def _metrics(self, trainer: Trainer) -> dict[str, str]:
        shown: dict[str, str] = {}
        loss = trainer.last_loss
        if loss is not None:
            shown["loss"] = f"{float(loss):.4g}"
        for key, value in trainer.progress_bar_metrics.items():
            shown[key] = f"{value:.4g}"
        return shown

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._start(trainer)

    def _start(self, trainer: Trainer) -> None:
        """The epoch's clock and bar; on a mid-epoch resume at the first batch this process trains."""
        self._epoch_start = self._last_line = time.monotonic()
        self._count = 0
        if not trainer.is_global_zero or not self._tty:
            return
        from tqdm.auto import tqdm

        total = trainer.num_training_batches
        self._bar = tqdm(
            total=None if math.isinf(total) else int(total),
            desc=f"Epoch {trainer.current_epoch}",
            dynamic_ncols=True,
            leave=True,
            initial=trainer.fit_loop.progress.batches_done,
        )

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._epoch_start is None:  # resumed mid-epoch: the clock starts with the first batch trained here
            self._start(trainer)
        self._count += 1
        if not trainer.is_global_zero or (batch_idx + 1) % self.refresh_rate:
            return
        if self._bar is not None:
            self._bar.update(self.refresh_rate)
            self._bar.set_postfix(self._metrics(trainer), refresh=False)
            return
        now = time.monotonic()
        if now - self._last_line >= self.line_interval_s:
            self._last_line = now
            self._print_line(trainer, batch_idx + 1, now)

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """``print``, above the bar while one draws (``self.print`` in a module comes here)."""
        if self._bar is None:
            print(*args, sep=sep, **kwargs)
            return
        kwargs.pop("flush", None)  # tqdm.write takes file and end only
        self._bar.write(sep.join(map(str, args)), **kwargs)

    def _print_line(self, trainer: Trainer, done: int, now: float) -> None:
        rate = self._count / max(now - (self._epoch_start or now), 1e-9)
        total = trainer.num_training_batches
        of = "" if math.isinf(total) else f"/{int(total)}"
        metrics = " ".join(f"{k}={v}" for k, v in self._metrics(trainer).items())
        print(
            f"epoch {trainer.current_epoch} batch {done}{of} step {trainer.global_step} {rate:.1f} it/s {metrics}",
            flush=True,
        )

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            if self._bar is not None:
                self._bar.set_postfix(self._metrics(trainer), refresh=True)
                self._bar.close()
                self._bar = None
            else:
                self._print_line(trainer, trainer.fit_loop.progress.batches_done, time.monotonic())
        self._epoch_start = None

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._epoch_start = None
