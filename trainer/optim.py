"""Parse what ``configure_optimizers`` returns into optimizers and scheduler configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim import Optimizer

from trainer.exceptions import MisconfigurationException

_FORMS = (
    "an optimizer, a list of optimizers, (optimizers, schedulers), or "
    "{'optimizer': opt, 'lr_scheduler': sched | {'scheduler': sched, 'interval': 'epoch'|'step', "
    "'frequency': n, 'monitor': name, 'strict': bool, 'name': str}}"
)


@dataclass
class SchedulerConfig:
    """A scheduler and when to step it (Lightning's ``LRSchedulerConfig``)."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True  # a missing monitored metric is an error (False: skip that step)
    name: str | None = None

    @property
    def reduce_on_plateau(self) -> bool:
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _scheduler_config(item: Any) -> SchedulerConfig:
    if isinstance(item, Mapping):
        if "scheduler" not in item:
            raise MisconfigurationException(f"an lr_scheduler dict needs a 'scheduler' key; got keys {sorted(item)}.")
        unknown = set(item) - {"scheduler", "interval", "frequency", "monitor", "strict", "name"}
        if unknown:
            raise MisconfigurationException(
                f"the lr_scheduler dict has unknown keys {sorted(unknown)}; it takes scheduler, interval, frequency, "
                "monitor, strict and name."
            )
        config = SchedulerConfig(
            item["scheduler"],
            item.get("interval", "epoch"),
            int(item.get("frequency", 1)),
            item.get("monitor"),
            bool(item.get("strict", True)),
            item.get("name"),
        )
    else:
        config = SchedulerConfig(item)
    if config.interval not in ("epoch", "step"):
        raise MisconfigurationException(f"lr_scheduler interval={config.interval!r}: choose 'epoch' or 'step'.")
    if config.frequency < 1:
        raise MisconfigurationException(f"lr_scheduler frequency={config.frequency!r} must be >= 1.")
    if config.reduce_on_plateau and config.monitor is None:
        raise MisconfigurationException(
            "ReduceLROnPlateau needs {'scheduler': ..., 'monitor': '<logged metric name>'}."
        )
    sched = config.scheduler
    if isinstance(sched, Optimizer) or not (hasattr(sched, "step") and hasattr(sched, "state_dict")):
        raise TypeError(f"got {type(sched).__name__} where an LR scheduler (with step/state_dict) belongs.")
    return config


def _from_dict(config: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    if "optimizer" not in config:
        raise MisconfigurationException(
            f"configure_optimizers() dict needs an 'optimizer' key; got keys {sorted(config)}."
        )
    scheduler = config.get("lr_scheduler")
    return [config["optimizer"]], [] if scheduler is None else [scheduler]


def _is_pair(returned: Any) -> bool:
    """``(optimizers, schedulers)``; ``(opt1, opt2)`` is two optimizers, not an optimizer and a scheduler."""
    if not (isinstance(returned, tuple) and len(returned) == 2):
        return False
    return isinstance(returned[0], Sequence | Optimizer) and not isinstance(returned[1], Optimizer)


def parse_optimizers(returned: Any) -> tuple[list[Optimizer], list[SchedulerConfig]]:
    """Normalise every documented return form; anything else is a clear error."""
    if isinstance(returned, type):
        raise TypeError(
            f"configure_optimizers() returned the class {returned.__name__}, not an optimizer: create one, e.g. "
            f"return {returned.__module__}.{returned.__name__}(self.parameters(), lr=...)."
        )
    schedulers: list[Any]
    if isinstance(returned, Optimizer):
        optimizers, schedulers = [returned], []
    elif isinstance(returned, Mapping):
        optimizers, schedulers = _from_dict(returned)
    elif _is_pair(returned):
        first, second = returned
        optimizers = [first] if isinstance(first, Optimizer) else list(first)
        schedulers = list(second) if isinstance(second, Sequence) else [second]
    elif isinstance(returned, Sequence) and returned and all(isinstance(o, Mapping) for o in returned):
        pairs = [_from_dict(c) for c in returned]
        optimizers = [o for opts, _ in pairs for o in opts]
        schedulers = [s for _, scheds in pairs for s in scheds]
    elif isinstance(returned, Sequence) and not isinstance(returned, str):
        optimizers, schedulers = list(returned), []
    else:
        raise TypeError(f"configure_optimizers() returned {type(returned).__name__}; expected {_FORMS}.")
    bad = [type(o).__name__ for o in optimizers if not isinstance(o, Optimizer)]
    if bad or not optimizers:
        raise TypeError(
            f"configure_optimizers() gave {bad or 'no optimizer'} where optimizers belong; expected {_FORMS}."
        )
    return optimizers, [_scheduler_config(s) for s in schedulers]
