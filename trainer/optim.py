"""Parse what ``configure_optimizers`` returns into optimizers and scheduler configs, with Lightning's rules and
messages: a port's mistakes fail (or warn) as they did under Lightning."""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

import torch
from torch.optim import Optimizer

from trainer.exceptions import MisconfigurationException, MisconfigurationTypeError

_FORMS = (
    "Output from `model.configure_optimizers()` should be one of: an optimizer, a list of optimizers, "
    "(optimizers, schedulers), or {'optimizer': opt, 'lr_scheduler': sched | {'scheduler': sched, "
    "'interval': 'epoch'|'step', 'frequency': n, 'monitor': name, 'strict': bool, 'name': str}, 'monitor': name}"
)
_OPTIMIZER_KEYS = {"optimizer", "lr_scheduler", "monitor"}
_MANUAL_IGNORED = ("reduce_on_plateau", "monitor", "strict")  # the user steps schedulers in manual optimization
_MONITOR_EXAMPLE = ' For example: {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "loss"}}'


@dataclass
class SchedulerConfig:
    """A scheduler and when to step it: Lightning's ``LRSchedulerConfig``, with its fields in its order."""

    scheduler: Any
    name: str | None = None  # what LearningRateMonitor calls it
    interval: str = "epoch"  # or "step"
    frequency: int = 1
    reduce_on_plateau: bool = False  # steps with the monitored value
    monitor: str | None = None
    strict: bool = True  # a missing monitored metric is an error (False: skip that step)


_SCHEDULER_KEYS = {f.name for f in fields(SchedulerConfig)}


class GradClipAlgorithmType(StrEnum):
    """How ``gradient_clip_val`` clips (Lightning's enum; each member equals its string): the norm over all the
    optimizer's gradients together, or each gradient's values."""

    VALUE = "value"
    NORM = "norm"

    @staticmethod
    def supported_type(val: str) -> bool:
        return val in GradClipAlgorithmType.supported_types()

    @staticmethod
    def supported_types() -> list[str]:
        return [x.value for x in GradClipAlgorithmType]


class NoOptimizer(Optimizer):
    """What a fit steps when ``configure_optimizers`` returns None (as Lightning): its ``step`` runs the closure
    (``training_step`` and backward) and changes nothing."""

    def __init__(self) -> None:
        super().__init__([torch.zeros(1)], {})

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        return "No Optimizer"


class LightningOptimizer:
    """What ``self.optimizers()`` returns (Lightning's class): the torch optimizer, whose ``step`` goes through the
    Trainer during a fit (precision, ``on_before_optimizer_step``, in manual optimization the global step).

    It is also an instance of the optimizer's own class (``isinstance(opt, torch.optim.Adam)``); everything else
    (``param_groups``, ``state``, ``state_dict``, ``load_state_dict``) reads and writes the wrapped optimizer.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self._optimizer = optimizer
        self._step: Callable[..., Any] | None = None  # the Trainer's step while a fit runs (``attach``)
        self._module: Any = None
        self.__class__ = type(f"Lightning{type(optimizer).__name__}", (LightningOptimizer, type(optimizer)), {})

    @property
    def optimizer(self) -> Optimizer:
        return self._optimizer

    def attach(self, step: Callable[..., Any], module: Any) -> None:
        """From now on ``step`` runs ``step(optimizer, closure, **kwargs)`` (the fit's training step), and
        ``toggle_model`` toggles this optimizer on ``module``."""
        self._step, self._module = step, module

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """One optimizer step (``closure`` first, if given); returns what the optimizer's step returns."""
        if closure is not None and not callable(closure):
            raise MisconfigurationException(
                f"When `optimizer.step(closure)` is called, the closure should be callable; got {closure!r}."
            )
        if self._step is not None:
            return self._step(self._optimizer, closure, **kwargs)
        return self._optimizer.step(closure, **kwargs) if closure is not None else self._optimizer.step(**kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._optimizer.add_param_group(param_group)

    @contextlib.contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Iterator[None]:
        """Only this optimizer's parameters require grad inside (``Module.toggle_optimizer``). ``sync_grad=False``
        is Lightning's hint to skip the gradient sync of an accumulation step; gradients are synced here anyway, so
        every rank steps the same model."""
        module = self.__dict__.get("_module")
        if module is None:
            raise MisconfigurationException(
                "toggle_model() is for the optimizers self.optimizers() returns while Trainer.fit runs."
            )
        module.toggle_optimizer(self)
        try:
            yield
        finally:
            module.untoggle_optimizer(self)

    def __reduce__(self) -> tuple[Any, tuple[Optimizer]]:
        """Pickles (and copies) as a new wrapper of the pickled optimizer: the class made per wrapped optimizer
        class cannot be looked up by name, and the attachment to a running fit does not travel (the next fit
        attaches again). A Trainer or module that holds wrapped optimizers pickles (``torch.save(trainer)``)."""
        return LightningOptimizer, (self._optimizer,)

    def __getattr__(self, name: str) -> Any:
        if name == "_optimizer":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._optimizer, name)


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _optimizer(value: Any) -> Any:
    """The torch optimizer of ``value`` (a ``self.optimizers()`` wrapper returned again unwraps)."""
    return value.optimizer if isinstance(value, LightningOptimizer) else value


def _unknown(returned: Any) -> MisconfigurationTypeError:
    return MisconfigurationTypeError(
        f"Unknown configuration for model optimizers: configure_optimizers() returned {type(returned).__name__}. "
        + _FORMS
    )


def _from_dict(config: Mapping[str, Any]) -> tuple[Any, Any, str | None]:
    """(optimizer, scheduler or None, monitor) of one ``{'optimizer': ..., 'lr_scheduler': ..., 'monitor': ...}``."""
    if "optimizer" not in config:
        raise MisconfigurationException(
            f"configure_optimizers() dict needs an 'optimizer' key; got keys {sorted(config)}."
        )
    extra = set(config) - _OPTIMIZER_KEYS
    if extra:
        _warn(f"Found unsupported keys in the optimizer configuration: {extra}; it takes {sorted(_OPTIMIZER_KEYS)}.")
    return config["optimizer"], config.get("lr_scheduler"), config.get("monitor")


def _is_pair(returned: Any) -> bool:
    """``(optimizers, schedulers)``; ``(opt1, opt2)`` is two optimizers, not an optimizer and a scheduler."""
    if not (isinstance(returned, tuple | list) and len(returned) == 2):
        return False
    first, second = returned
    if isinstance(first, Optimizer):
        return isinstance(returned, tuple) and not isinstance(second, Optimizer | Mapping)
    return isinstance(first, Sequence) and not isinstance(first, str) and not isinstance(first, Mapping)


def _split(returned: Any) -> tuple[list[Any], list[tuple[Any, str | None]]]:
    """Optimizers, and each scheduler with the ``monitor`` given beside it (Lightning's return forms)."""
    if isinstance(returned, Optimizer):
        return [returned], []
    if isinstance(returned, Mapping):
        opt, sched, monitor = _from_dict(returned)
        return [opt], [] if sched is None else [(sched, monitor)]
    if isinstance(returned, tuple | list) and returned and all(isinstance(c, Mapping) for c in returned):
        parts = [_from_dict(c) for c in returned]
        return [o for o, _, _ in parts], [(s, m) for _, s, m in parts if s is not None]
    if _is_pair(returned):
        first, second = returned
        optimizers = [first] if isinstance(first, Optimizer) else list(first)
        schedulers = list(second) if isinstance(second, list | tuple) else [second]
        return optimizers, [(s, None) for s in schedulers]
    if isinstance(returned, tuple | list) and not any(isinstance(c, Mapping) for c in returned):
        return list(returned), []
    raise _unknown(returned)


def _automatic_config(item: Any, monitor: str | None) -> SchedulerConfig:
    if not isinstance(item, Mapping):
        if isinstance(item, torch.optim.lr_scheduler.ReduceLROnPlateau):
            if monitor is None:
                raise MisconfigurationException(
                    "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used."
                    ' For example: {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "metric_to_track"}'
                )
            return SchedulerConfig(item, reduce_on_plateau=True, monitor=monitor)
        return SchedulerConfig(item)
    extra = set(item) - _SCHEDULER_KEYS
    if extra:
        _warn(
            f"Found unsupported keys in the lr scheduler dict: {extra}. HINT: remove them from the output of "
            f"`configure_optimizers` (it takes {sorted(_SCHEDULER_KEYS)})."
        )
    if "scheduler" not in item:
        raise MisconfigurationException(
            'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler; got keys '
            f"{sorted(item)}."
        )
    if item.get("interval", "epoch") not in ("step", "epoch"):
        raise MisconfigurationException(
            f'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "{item["interval"]}"'
        )
    values = {k: v for k, v in item.items() if k in _SCHEDULER_KEYS}
    values.setdefault("reduce_on_plateau", isinstance(item["scheduler"], torch.optim.lr_scheduler.ReduceLROnPlateau))
    if values["reduce_on_plateau"] and values.get("monitor") is None:
        raise MisconfigurationException(
            "The lr scheduler dict must include a monitor when a `ReduceLROnPlateau` scheduler is used."
            + _MONITOR_EXAMPLE
        )
    if isinstance(item["scheduler"], torch.optim.lr_scheduler.OneCycleLR) and values.get("interval") != "step":
        _warn("A `OneCycleLR` scheduler is using 'interval': 'epoch'. Are you sure you didn't mean 'interval': 'step'?")
    return SchedulerConfig(**values)


def _manual_config(item: Any) -> SchedulerConfig:
    """Manual optimization: the user steps each scheduler; ``interval`` stays for LearningRateMonitor."""
    if not isinstance(item, Mapping):
        return SchedulerConfig(item)
    ignored = [k for k in item if k in _MANUAL_IGNORED]
    if ignored:
        _warn(
            f"The lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored. You need to call "
            "`lr_scheduler.step()` manually in manual optimization."
        )
    extra = set(item) - _SCHEDULER_KEYS
    if extra:
        _warn(f"Found unsupported keys in the lr scheduler dict: {extra}. HINT: remove them.")
    if "scheduler" not in item:
        raise MisconfigurationException(
            f'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler; got keys '
            f"{sorted(item)}."
        )
    return SchedulerConfig(**{k: v for k, v in item.items() if k in _SCHEDULER_KEYS and k not in _MANUAL_IGNORED})


def _check_config(config: SchedulerConfig, optimizers: list[Any], automatic: bool, custom_step: bool) -> None:
    sched, name = config.scheduler, type(config.scheduler).__name__
    if config.interval not in ("epoch", "step"):
        raise MisconfigurationException(
            f'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "{config.interval}"'
        )
    if not isinstance(config.frequency, int) or config.frequency < 1:
        raise MisconfigurationException(f"lr_scheduler frequency={config.frequency!r} must be an int >= 1.")
    if isinstance(sched, Optimizer):
        raise MisconfigurationTypeError(
            f"The provided lr scheduler `{name}` is invalid: it is an optimizer. Give a scheduler built on it, e.g. "
            "torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)."
        )
    if not (callable(getattr(sched, "state_dict", None)) and callable(getattr(sched, "load_state_dict", None))):
        raise TypeError(
            f"The provided lr scheduler `{name}` is invalid. It should have `state_dict` and `load_state_dict` "
            "methods defined."
        )
    torch_api = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    if automatic and not custom_step and not isinstance(sched, torch_api):
        raise MisconfigurationException(
            f"The provided lr scheduler `{name}` doesn't follow PyTorch's LRScheduler API. You should override the "
            "`LightningModule.lr_scheduler_step` hook with your own logic if you are using a custom LR scheduler."
        )
    attached = getattr(sched, "optimizer", None)
    if attached is not None and not any(attached is opt for opt in optimizers):
        raise MisconfigurationException(
            f"Some schedulers are attached with an optimizer that wasn't returned from `configure_optimizers`: "
            f"{name} steps a {type(attached).__name__} that is not among them."
        )


def parse_optimizers(
    returned: Any, automatic: bool = True, custom_scheduler_step: bool = False
) -> tuple[list[Optimizer], list[SchedulerConfig]]:
    """Normalise every documented return form; anything else is a clear error. ``automatic``: the module's
    ``automatic_optimization``; ``custom_scheduler_step``: it overrides ``lr_scheduler_step`` (so a scheduler need
    not follow PyTorch's API)."""
    if returned is None:
        warnings.warn(
            "`LightningModule.configure_optimizers` returned `None`, this fit will run with no optimizer",
            UserWarning,
            stacklevel=3,
        )
        return [NoOptimizer()], []
    if isinstance(returned, type):
        raise MisconfigurationTypeError(
            f"configure_optimizers() returned the class {returned.__name__}, not an optimizer: create one, e.g. "
            f"return {returned.__module__}.{returned.__name__}(self.parameters(), lr=...)."
        )
    found, schedulers = _split(returned)
    optimizers = [_optimizer(o) for o in found]
    bad = [type(o).__name__ for o in optimizers if not isinstance(o, Optimizer)]
    if bad or not optimizers:
        raise MisconfigurationTypeError(
            f"Unknown configuration for model optimizers: configure_optimizers() gave {bad or 'no optimizer'} where "
            f"optimizers belong. {_FORMS}"
        )
    if automatic:
        configs = [_automatic_config(s, monitor) for s, monitor in schedulers]
    else:
        configs = [_manual_config(s) for s, _ in schedulers]
    for config in configs:
        _check_config(config, optimizers, automatic, custom_scheduler_step)
    return optimizers, configs


def requires_closure(optimizer: Any) -> bool:
    """Whether the optimizer's ``step`` must be given a closure (``step(self, closure)``, as Hugging Face's AdamW):
    the loop then steps it through Lightning's closure."""
    try:
        parameter = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty
