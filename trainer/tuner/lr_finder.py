"""The learning-rate range test (Lightning's ``lr_find``): train ``num_training`` steps with the learning rate
rising from ``min_lr`` to ``max_lr``, record the smoothed loss at each, suggest the rate where it falls fastest.

Lightning's schedule, smoothing, early stop and suggestion, so a port gets the same numbers: the rate is
``min_lr`` at the first step and ``min_lr * (max_lr / min_lr) ** ((k + 1) / num_training)`` at step
``k >= 1`` (``linear``: the same fraction of the way), the loss an exponential average (``beta=0.98``,
bias-corrected), and the search stops once it exceeds ``early_stop_threshold`` times the best.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import torch

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module

log = logging.getLogger(__name__)
MODES = ("exponential", "linear")


class LRFinder:
    """What ``Tuner.lr_find`` found: ``results = {"lr": [...], "loss": [...]}``, ``suggestion()``, ``plot()``."""

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, list[float]] = {}
        self._optimal_idx: int | None = None

    def factor(self, step: int) -> float:
        """The learning rate at optimizer step ``step`` (from 0) over ``lr_min`` (Lightning's schedulers)."""
        if step <= 0:
            return 1.0
        r = (step + 1) / self.num_training
        if self.mode == "linear":
            return 1.0 + r * (self.lr_max / self.lr_min - 1.0)
        return (self.lr_max / self.lr_min) ** r

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate of the steepest loss descent, leaving out the first ``skip_begin`` and last ``skip_end``
        points; None (with an error logged) when fewer than two finite points remain."""
        losses = torch.tensor(self.results["loss"][skip_begin:-skip_end], dtype=torch.float64)
        lrs = torch.tensor(self.results["lr"][skip_begin:-skip_end], dtype=torch.float64)
        finite = torch.isfinite(losses)
        losses, lrs = losses[finite], lrs[finite]
        if len(losses) < 2:
            log.error(
                "Failed to compute suggestion for learning rate because there are not enough points. Increase the loop"
                " iteration limits or the size of your dataset/dataloader."
            )
            self._optimal_idx = None
            return None
        gradients = torch.gradient(losses, spacing=[lrs])[0]
        kept = torch.arange(len(self.results["loss"]))[skip_begin:-skip_end][finite]
        self._optimal_idx = int(kept[int(torch.argmin(gradients))])
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """Loss against learning rate as a matplotlib figure (the suggestion as a red point with ``suggest``)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:
            raise ModuleNotFoundError(
                "LRFinder.plot() draws with matplotlib, which is not installed: `pip install matplotlib`. "
                "The numbers are in .results['lr'] and .results['loss'] without it."
            ) from err
        lrs, losses = self.results["lr"], self.results["loss"]
        fig, ax = plt.subplots() if ax is None else (ax.figure, ax)
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest and self.suggestion() is not None and self._optimal_idx:
            ax.plot(lrs[self._optimal_idx], losses[self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return fig


class LRRecorder(Callback):
    """Records the rate each optimizer step uses and its smoothed loss; stops the run when the loss diverges."""

    def __init__(self, num_training: int, early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.num_training = num_training
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self.avg_loss = 0.0
        self.best_loss = 0.0

    def _window_end(self, trainer: Any, batch_idx: int) -> bool:
        """Whether the batch takes an optimizer step; the epoch's last, partial window steps too (Lightning's
        recorder skips that step, leaving it without a point)."""
        return bool(trainer.fit_loop.step.window.ends(batch_idx))

    def on_train_batch_start(self, trainer: Any, pl_module: Module, batch: Any, batch_idx: int) -> None:
        if self._window_end(trainer, batch_idx):
            self.lrs.append(float(trainer.optimizers[0].param_groups[0]["lr"]))

    def on_train_batch_end(self, trainer: Any, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._window_end(trainer, batch_idx):
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:  # a skipped step: no point, but keep lrs and losses aligned
            self.losses.append(math.nan)
            return
        current, step = float(loss), trainer.global_step
        self.avg_loss = self.beta * self.avg_loss + (1 - self.beta) * current
        smoothed = self.avg_loss / (1 - self.beta ** (step + 1))
        threshold = self.early_stop_threshold
        if threshold is not None and step > 1 and smoothed > threshold * self.best_loss:
            trainer.should_stop = True
        if trainer.world_size > 1:  # rank zero decides, so every rank runs the same number of steps
            trainer.should_stop = trainer.strategy.broadcast(trainer.should_stop)
        if smoothed < self.best_loss or step == 1:
            self.best_loss = smoothed
        self.losses.append(smoothed)
