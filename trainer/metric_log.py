"""Where logged values go: ``callback_metrics`` (callbacks, monitors), the progress bar, the loggers.

``self.log`` writes into the current stage's ``Results``; the loops tell this object when a step
or an epoch ends, and it reduces, publishes and (on global rank zero) writes to the loggers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from trainer.results import Results

if TYPE_CHECKING:
    from trainer.loggers.base import Logger
    from trainer.strategies.base import Strategy


class MetricLog:
    """The run's logged values: the latest of each name, what reached the loggers, the progress bar's."""

    def __init__(self, strategy: Strategy, loggers: Sequence[Logger]) -> None:
        self.strategy = strategy
        self.loggers = loggers
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, torch.Tensor] = {}  # tensors, without "epoch", as Lightning's
        self.progress_bar_keys: set[str] = set()
        self.results = Results("train")  # the collection ``self.log`` writes into now
        self._unwritten: dict[str, torch.Tensor] = {}  # step values the loggers have not had yet

    def reset(self) -> None:
        """Each fit/validate/test/predict starts with no metrics, as in Lightning: ``callback_metrics`` after
        ``test`` hold what the test logged, never what fit left."""
        self.callback_metrics, self.logged_metrics, self.progress_bar_keys = {}, {}, set()
        self._unwritten = {}

    def state_dict(self) -> dict[str, Any]:
        """Copies of what the run has logged so far (the Tuner puts them back after its runs)."""
        return {
            "callback_metrics": dict(self.callback_metrics),
            "logged_metrics": dict(self.logged_metrics),
            "progress_bar_keys": set(self.progress_bar_keys),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back a ``state_dict``, in place: a ``trainer.callback_metrics`` read before still shows it."""
        self.callback_metrics.clear()
        self.callback_metrics.update(state["callback_metrics"])
        self.logged_metrics.clear()
        self.logged_metrics.update(state["logged_metrics"])
        self.progress_bar_keys = set(state["progress_bar_keys"])

    def load_callback_metrics(self, values: dict[str, torch.Tensor]) -> None:
        """A resumed fit's ``callback_metrics``, as its checkpoint recorded them."""
        self.callback_metrics.update(values)

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.callback_metrics.items() if k in self.progress_bar_keys}

    def start(self, stage: str, num_dataloaders: int = 1) -> Results:
        """A fresh collection for ``stage``; returns the one it replaces (put it back with ``resume``)."""
        previous = self.results
        self.results = Results(stage, num_dataloaders)
        return previous

    def resume(self, results: Results) -> None:
        self.results = results

    def step_end(self) -> None:
        """This step's values to ``callback_metrics``, so the batch-end hooks see them."""
        results = self.results
        values = results.pop_step_metrics(self.strategy)
        self.callback_metrics.update(values)
        self.callback_metrics.update(results.unforked(values))
        self.progress_bar_keys |= results.prog_bar
        self._record_logged(values, results.no_logger)
        self._unwritten.update(values)

    def write_step(self, epoch: int, step: int) -> None:
        """The interval's step values to the loggers, after the batch-end hooks as in Lightning: what those
        hooks logged joins this row, and what a callback wrote itself (DeviceStatsMonitor) comes first."""
        if self.results.step_values:
            self.step_end()
        if self._unwritten:
            unwritten, self._unwritten = self._unwritten, {}
            self._write(unwritten, self.results.no_logger, epoch, step)

    def eval_step_end(self, seen: int, write: bool) -> None:
        """Values an evaluation step logged with ``on_step=True`` go to the loggers at ``step=seen``, the loader's
        batches seen since its loaders were set up (a fit's validations count on), with no ``epoch``, as in
        Lightning. They are this rank's own: ranks evaluate uneven shares (no padding), so a per-step
        reduction would wait for batches other ranks do not have; epoch values are exact across ranks."""
        results = self.results
        values, results.step_values = results.step_values, {}
        if write:
            self._record_logged(values, results.no_logger)
            self._write(values, results.no_logger, None, seen)

    def epoch_end(self, epoch: int, step: int, publish: bool = True) -> dict[str, float]:
        """Reduce the epoch aggregates (every rank) and, unless ``publish`` is off, record and log them."""
        results = self.results
        values = results.epoch_metrics(self.strategy)
        if publish:
            self.callback_metrics.update(values)
            self.callback_metrics.update(results.unforked(values))
            self.progress_bar_keys |= results.prog_bar
            self._record_logged(values, results.no_logger)
            self._write(values, results.no_logger, epoch, step)
        return {k: float(v) for k, v in values.items()}

    def _record_logged(self, values: dict[str, torch.Tensor], hidden: set[str]) -> None:
        """``logged_metrics``, as Lightning's: every value meant for the loggers, at each step and epoch end,
        on every rank, whether or not a logger writes it now (``log_every_n_steps``) or at all."""
        self.logged_metrics.update({k: v for k, v in values.items() if k not in hidden})

    def _write(self, values: dict[str, torch.Tensor], hidden: set[str], epoch: int | None, step: int) -> None:
        if not values or not self.loggers or not self.strategy.is_global_zero:
            return
        floats: dict[str, float] = {k: float(v) for k, v in values.items() if k not in hidden}
        if not floats:
            return
        logged_step = floats.pop("step", None)
        if logged_step is not None:  # Lightning's rule: a logged ``step`` is the row's step, with no ``epoch`` added
            step = int(logged_step)
        elif epoch is not None:
            floats.setdefault("epoch", epoch)
        for lg in self.loggers:
            lg.log_metrics(floats, step)

    def flush_loggers(self) -> None:
        """A logging point is complete (its metrics and whatever hooks logged beside them): send it as one row
        (``save``, Lightning's name, which a steadytrain logger implements as ``flush``)."""
        if self.loggers and self.strategy.is_global_zero:
            for lg in self.loggers:
                save = getattr(lg, "save", None)  # a logger shaped as Lightning's may lack it: it sends each row
                if save is not None:
                    save()
