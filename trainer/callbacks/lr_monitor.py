"""``LearningRateMonitor``: log every parameter group's learning rate (and momentum, weight decay) to the loggers.

Lightning's names and timing. Names: ``lr-<Optimizer>`` (``lr-Adam``), the scheduler config's
``name`` when given, ``-1``/``-2`` for a second and third optimizer of one type, and ``/pg1``,
``/pg2`` (or a group's ``"name"``) when an optimizer has several groups. Timing: at the start of a
training batch, when that batch's step is a logging step (``log_every_n_steps``), for
step-interval schedulers; at the start of an epoch for epoch-interval ones; optimizers without a
scheduler at both. ``logging_interval`` puts them all on one of the two. The step is Lightning's
logger step (the batches stepped before this one), so a value shares a row with the training metrics
of the step that used it.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

_INTERVALS = (None, "step", "epoch")


@dataclass
class _LoggedOptimizer:
    """An optimizer, the names of its groups, and when it is logged (None: at every logging point)."""

    optimizer: torch.optim.Optimizer
    names: list[str]
    interval: str | None


class LearningRateMonitor(Callback):
    """Log learning rates (optionally momentum and weight decay) at the points Lightning logs them.

    Needs a logger: a Trainer without one is refused when fit starts. The values also go to
    ``trainer.callback_metrics``, so ``ModelCheckpoint(filename="{lr-SGD}")`` can use them, and
    each name's history is kept in ``lrs``.
    """

    def __init__(
        self,
        logging_interval: Literal["step", "epoch"] | None = None,
        log_momentum: bool = False,
        log_weight_decay: bool = False,
        log_key_prefix: str | None = None,
    ) -> None:
        if logging_interval not in _INTERVALS:
            raise MisconfigurationException(
                f"LearningRateMonitor(logging_interval={logging_interval!r}): choose 'step', 'epoch' or None."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.log_key_prefix = log_key_prefix or ""
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    # ---- hooks --------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger: "
                "LearningRateMonitor needs a logger to write to, and this Trainer has none (logger=False). "
                "Pass a logger (e.g. Trainer(logger=True) or a CSVLogger), or remove the callback."
            )

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Name every group now, so ``lrs`` lists them all before the first value is logged."""
        if self.log_momentum:
            self._warn_without_momentum(trainer)
        names = [name for named in self._named(trainer) for name in named.names]
        self.lrs = {name: [] for name in names}
        self.last_momentum_values = {f"{name}-momentum": None for name in names}
        self.last_weight_decay_values = {f"{name}-weight_decay": None for name in names}

    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        if self.logging_interval == "epoch":
            return
        step = trainer.fit_loop.logger_step()  # the step this batch's metrics are logged at
        every = trainer.log_every_n_steps  # 0: never (Lightning's barebones value)
        if every and ((step + 1) % every == 0 or trainer.should_stop):
            self._log(trainer, "step" if self.logging_interval is None else "any", step)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self.logging_interval != "step":
            self._log(trainer, "epoch" if self.logging_interval is None else "any", trainer.fit_loop.logger_step())

    # ---- values -------------------------------------------------------------------------------------
    def _log(self, trainer: Trainer, interval: str, step: int) -> None:
        stats: dict[str, float] = {}
        for named in self._named(trainer):
            if interval == "any" or named.interval in (None, interval):
                stats.update(self._stats(named))
        if not stats:
            return
        device = trainer.strategy.root_device
        trainer.callback_metrics.update({k: torch.tensor(v, device=device) for k, v in stats.items()})
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.log_metrics(stats, step)

    def _stats(self, named: _LoggedOptimizer) -> dict[str, float]:
        stats: dict[str, float] = {}
        betas = "betas" in named.optimizer.defaults
        for group, name in zip(named.optimizer.param_groups, named.names):
            self._remap(name)
            stats[name] = float(group["lr"])
            self.lrs.setdefault(name, []).append(stats[name])
            if self.log_momentum:
                momentum = float(group["betas"][0] if betas else group.get("momentum", 0.0))
                stats[f"{name}-momentum"] = self.last_momentum_values[f"{name}-momentum"] = momentum
            if self.log_weight_decay:
                decay = float(group.get("weight_decay", 0.0))
                stats[f"{name}-weight_decay"] = self.last_weight_decay_values[f"{name}-weight_decay"] = decay
        return stats

    def _remap(self, name: str) -> None:
        """A group added later (fine-tuning) turns ``lr-Adam`` into ``lr-Adam/pg1``: keep its history."""
        old = name.removesuffix("/pg1")
        if old != name and old in self.lrs and name not in self.lrs:
            self.lrs[name] = self.lrs.pop(old)

    def _warn_without_momentum(self, trainer: Trainer) -> None:
        optimizers = [c.scheduler.optimizer for c in trainer.lr_scheduler_configs] or trainer.optimizers
        if any("momentum" not in opt.defaults and "betas" not in opt.defaults for opt in optimizers):
            warnings.warn(
                "You have set log_momentum=True, but some optimizers do not have momentum. This will log a value 0 "
                "for the momentum.",
                RuntimeWarning,
                stacklevel=2,
            )

    # ---- names --------------------------------------------------------------------------------------
    def _named(self, trainer: Trainer) -> list[_LoggedOptimizer]:
        """Optimizers with a scheduler first (named after it), then the others; recomputed each time, as
        groups may be added during training."""
        counts: Counter[type] = Counter()
        named: list[_LoggedOptimizer] = []
        for config in trainer.lr_scheduler_configs:
            optimizer = config.scheduler.optimizer
            names = self._group_names(optimizer, config.name, counts)
            named.append(_LoggedOptimizer(optimizer, names, config.interval))
        for optimizer in trainer.optimizers:
            if not any(optimizer is n.optimizer for n in named):
                named.append(_LoggedOptimizer(optimizer, self._group_names(optimizer, None, counts), None))
        return named

    def _group_names(self, optimizer: torch.optim.Optimizer, name: str | None, counts: Counter[type]) -> list[str]:
        kind = type(optimizer)
        if name is None:  # only unnamed ones count towards the -1, -2 suffixes (Lightning's rule)
            counts[kind] += 1
        base = name if name is not None else f"lr-{kind.__name__}"
        if counts[kind] > 1:
            base = f"{base}-{counts[kind] - 1}"
        groups = optimizer.param_groups
        labels = [group.get("name", f"pg{i}") for i, group in enumerate(groups, start=1)]
        duplicated = sorted({label for label in labels if labels.count(label) > 1})
        if duplicated:
            raise MisconfigurationException(
                "A single `Optimizer` cannot have multiple parameter groups with identical `name` values. "
                f"{base} has duplicated parameter group names {duplicated}: give each group its own name."
            )
        if len(groups) > 1:
            names = [f"{base}/{label}" for label in labels]
        else:
            names = [f"{base}/{groups[0]['name']}" if groups[0].get("name") else base]
        return [f"{self.log_key_prefix}{n}" for n in names]
