"""``ProgressBar``: a tqdm bar on a terminal, plain periodic lines otherwise (logs, CI, SLURM)."""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.trainer import Trainer


class ProgressBar(Callback):
    """Loss, ``prog_bar=True`` metrics and it/s, drawn by global rank zero only.

    Reading the loss forces a device sync, so it is read only every ``refresh_rate`` batches.
    """

    def __init__(self, refresh_rate: int = 10, line_interval_s: float = 10.0) -> None:
        if refresh_rate < 1:
            raise ValueError(f"ProgressBar(refresh_rate={refresh_rate!r}) must be >= 1.")
        self.refresh_rate = refresh_rate
        self.line_interval_s = line_interval_s
        self._bar: Any = None
        self._tty = sys.stdout.isatty()
        self._last_line = 0.0
        self._epoch_start = 0.0
        self._count = 0
        self._eval_keys: set[str] = set()  # prog_bar names logged by validation

    def _metrics(self, trainer: Trainer) -> dict[str, str]:
        shown: dict[str, str] = {}
        if trainer.last_loss is not None:
            shown["loss"] = f"{float(trainer.last_loss):.4g}"
        keys = self._eval_keys | trainer.results.prog_bar
        for key, value in trainer.callback_metrics.items():
            if key in keys:
                shown[key] = f"{float(value):.4g}"
        return shown

    def on_validation_epoch_end(self, trainer: Trainer, module: Module) -> None:
        self._eval_keys |= trainer.results.prog_bar  # trainer.results is validation's here

    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        if not trainer.is_global_zero:
            return
        self._epoch_start = self._last_line = time.monotonic()
        self._count = 0
        total = trainer.num_training_batches
        if self._tty:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=None if math.isinf(total) else int(total),
                desc=f"Epoch {trainer.current_epoch}",
                dynamic_ncols=True,
                leave=True,
                initial=trainer.batches_done,
            )

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
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

    def _print_line(self, trainer: Trainer, done: int, now: float) -> None:
        rate = self._count / max(now - self._epoch_start, 1e-9)
        total = trainer.num_training_batches
        of = "" if math.isinf(total) else f"/{int(total)}"
        metrics = " ".join(f"{k}={v}" for k, v in self._metrics(trainer).items())
        print(
            f"epoch {trainer.current_epoch} batch {done}{of} step {trainer.global_step} {rate:.1f} it/s {metrics}",
            flush=True,
        )

    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        if not trainer.is_global_zero:
            return
        if self._bar is not None:
            self._bar.set_postfix(self._metrics(trainer), refresh=True)
            self._bar.close()
            self._bar = None
            return
        self._print_line(trainer, trainer.batches_done, time.monotonic())

    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
