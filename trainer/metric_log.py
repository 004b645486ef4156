"""Where logged values go: ``callback_metrics`` (callbacks, monitors), the progress bar, the loggers.

``self.log`` writes into the current stage's ``Results``; the loops tell this object when a step
or an epoch ends, and it reduces, publishes and (on global rank zero; a user's own logger on every rank, as
Lightning) writes to the loggers.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from trainer.exceptions import MisconfigurationException
from trainer.log_rules import EPOCH_LEVEL, levels, no_logging_error, outside_error
from trainer.loggers.ranks import called_on_every_rank
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
        self.results = Results("train", before_loop=True)  # the collection ``self.log`` writes into now
        self.hook: str | None = None  # the hook ``hooks.call`` runs now; None: a step or a per-batch hook
        self._unwritten: dict[str, torch.Tensor] = {}  # step values the loggers have not had yet
        self._metric_names: tuple[int, dict[int, str]] = (0, {})  # a module's id, its Metrics' names by id
        self._warned: set[str] = set()  # names logged with logger=True and no logger: warned once per run
        self._eval_bar: dict[str, torch.Tensor] = {}  # evaluation step values shown in the progress bar

    def reset(self) -> None:
        """Each fit/validate/test/predict starts with no metrics, as in Lightning: ``callback_metrics`` after
        ``test`` hold what the test logged, never what fit left."""
        self.callback_metrics, self.logged_metrics, self.progress_bar_keys = {}, {}, set()
        self._unwritten, self._metric_names, self._warned, self._eval_bar = {}, (0, {}), set(), {}
        self.close()

    def close(self) -> None:
        """No stage runs: ``self.log`` is refused until one starts (only ``on_train_start`` logs before it)."""
        self.results, self.hook = Results("train", before_loop=True), None

    # ---- what self.log may do where it is called ------------------------------------------------------------
    def enter_hook(self, name: str) -> str | None:
        """``hooks.call`` runs ``name``: ``self.log`` follows its rule (``log_rules``). Returns the hook it
        interrupts, for ``leave_hook``."""
        outer, self.hook = self.hook, name
        return outer

    def leave_hook(self, outer: str | None) -> None:
        self.hook = outer

    def levels(self, name: str, on_step: bool | None, on_epoch: bool | None) -> tuple[bool, bool]:
        """``(on_step, on_epoch)`` for ``self.log(name)`` here, or the error Lightning raises here."""
        results, hook = self.results, self.hook
        if results.stage == "predict":
            raise MisconfigurationException(
                f"You can't `self.log({name!r}, ...)` while predicting: predict keeps no logged values (Lightning: "
                "the result collection is not registered yet); return what you need from predict_step."
            )
        if results.before_loop and hook not in EPOCH_LEVEL:
            raise outside_error(name) if hook is None else no_logging_error(name, hook)
        return levels(name, hook, results.stage == "train", on_step, on_epoch)

    def check_value(self, module: torch.nn.Module, name: str, value: Any, logger: bool | None) -> None:
        """Lightning's checks of a logged value's origin: a Metric must be an attribute of the module (its state
        lives across steps there), and ``logger=True`` with no logger warns once per name."""
        if logger and not self.loggers and name not in self._warned:
            self._warned.add(name)
            warnings.warn(
                f"You called `self.log({name!r}, ..., logger=True)` but have no logger configured: the value "
                "reaches callbacks and the progress bar only. Pass Trainer(logger=...) to keep it.",
                stacklevel=3,
            )
        if hasattr(value, "compute") and hasattr(value, "reset") and id(value) not in self._metrics_of(module, False):
            known = self._metrics_of(module, True)  # one added since (in setup, say)
            if id(value) not in known:
                raise MisconfigurationException(
                    f"Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged as {name!r}. "
                    "You can fix this by setting an attribute for the metric in your module (self.acc = Accuracy()), "
                    "so that its state lives across steps"
                    + (
                        f", or by calling `self.log({name}, ..., metric_attribute=name)` where `name` is one of "
                        f"{sorted(known.values())}"
                        if known
                        else ""
                    )
                    + "."
                )

    def _metrics_of(self, module: torch.nn.Module, fresh: bool) -> dict[int, str]:
        """The module's torchmetrics Metrics by id, looked up once per module and run (again when one is new)."""
        if fresh or self._metric_names[0] != id(module):
            from torchmetrics import Metric  # imported already: a Metric was logged

            names = {id(m): n for n, m in module.named_modules() if isinstance(m, Metric)}
            self._metric_names = (id(module), names)
        return self._metric_names[1]

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
        """The ``prog_bar=True`` values: the latest of each, an evaluation step's too (which callbacks do not get)."""
        shown = {k: v for k, v in self.callback_metrics.items() if k in self.progress_bar_keys}
        return {k: float(v) for k, v in {**self._eval_bar, **shown}.items()}

    def start(self, stage: str, num_dataloaders: int = 1) -> Results:
        """A fresh collection for ``stage``; returns the one it replaces (put it back with ``resume``). The first
        training epoch takes over what ``on_train_start`` logged, as in Lightning."""
        previous = self.results
        if stage == "train" and previous.before_loop and previous.epoch_values:
            previous.before_loop = False
        else:
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
            self._eval_bar.update({k: v for k, v in values.items() if k in results.prog_bar})
            self._record_logged(values, results.no_logger)
            self._write(values, results.no_logger, None, seen)

    def before_epoch_end_hooks(self) -> None:
        """The training epoch's aggregates so far (what its steps logged), reduced (every rank) and recorded before
        ``on_train_epoch_end``, so every hook reads this epoch's values, as in Lightning; the loggers get them in
        ``epoch_end``'s row, with what the hooks log."""
        self._publish(self.results.take_epoch_metrics(self.strategy))

    def epoch_end(self, epoch: int, step: int, write: bool = True) -> dict[str, float]:
        """Reduce the epoch aggregates (every rank), record them and, unless ``write`` is off (the sanity check),
        log them."""
        results = self.results
        values = results.epoch_metrics(self.strategy)
        self._publish(values)
        if write:
            self._write(values, results.no_logger, epoch, step)
        return {k: float(v) for k, v in values.items()}

    def _publish(self, values: dict[str, torch.Tensor]) -> None:
        results = self.results
        self.callback_metrics.update(values)
        self.callback_metrics.update(results.unforked(values))
        self.progress_bar_keys |= results.prog_bar
        self._record_logged(values, results.no_logger)

    def _record_logged(self, values: dict[str, torch.Tensor], hidden: set[str]) -> None:
        """``logged_metrics``, as Lightning's: every value meant for the loggers, at each step and epoch end,
        on every rank, whether or not a logger writes it now (``log_every_n_steps``) or at all."""
        self.logged_metrics.update({k: v for k, v in values.items() if k not in hidden})

    def _write(self, values: dict[str, torch.Tensor], hidden: set[str], epoch: int | None, step: int) -> None:
        if not values or not (loggers := self._loggers_here()):
            return
        floats: dict[str, float] = {k: float(v) for k, v in values.items() if k not in hidden}
        if not floats:
            return
        logged_step = floats.pop("step", None)
        if logged_step is not None:  # Lightning's rule: a logged ``step`` is the row's step, with no ``epoch`` added
            step = int(logged_step)
        elif epoch is not None:
            floats.setdefault("epoch", epoch)
        for lg in loggers:
            lg.log_metrics(floats, step)

    def _loggers_here(self) -> Sequence[Logger]:
        """Every logger on global rank zero; elsewhere the user's own, which Lightning calls on every rank."""
        if self.strategy.is_global_zero:
            return self.loggers
        return [lg for lg in self.loggers if called_on_every_rank(lg)]

    def flush_loggers(self) -> None:
        """A logging point is complete (its metrics and whatever hooks logged beside them): send it as one row
        (``save``, Lightning's name, which a steadytrain logger implements as ``flush``)."""
        if self.loggers:
            for lg in self._loggers_here():
                save = getattr(lg, "save", None)  # a logger shaped as Lightning's may lack it: it sends each row
                if save is not None:
                    save()
