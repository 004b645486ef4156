"""Hooks in Lightning's order: each callback's first, then the module's.

One exception, as in Lightning: at the end of a training epoch the callbacks that act on a
monitored metric (checkpointing, early stopping) run after the module's hook, so they see what
``on_train_epoch_end`` logged. Per-batch hooks are resolved once per epoch and only the overridden
ones are kept: a run that overrides none pays nothing per batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback
from trainer.module import Module
from trainer.overrides import overrides

if TYPE_CHECKING:
    from trainer.view import TrainerView

Hook = Callable[..., Any]


def is_monitoring(callback: Callback) -> bool:
    """Checkpointing and early stopping act on monitored metrics, so they see the module's epoch-end logging."""
    return bool(getattr(callback, "monitors_metrics", False))


def call(
    trainer: TrainerView, name: str, *args: Any, callbacks: Sequence[Callback] | None = None, **kwargs: Any
) -> Any:
    """``name`` on every callback (``callbacks``, default all), then on the module; returns the module's result.
    Arguments go as given: Lightning passes ``stage=`` by keyword to ``setup``/``teardown``. ``self.log`` in them
    follows the hook's rule (``trainer/log_rules.py``)."""
    module = trainer.lightning_module
    outer = trainer.metric_log.enter_hook(name)
    try:
        for cb in trainer.callbacks if callbacks is None else callbacks:
            _callback_hook(trainer, cb, name)(trainer, module, *args, **kwargs)
        return _module_hook(trainer, name)(*args, **kwargs)
    finally:
        trainer.metric_log.leave_hook(outer)


def call_datamodule(trainer: TrainerView, datamodule: Any, name: str, **kwargs: Any) -> None:
    """A DataModule's hook (where it has it), profiled under Lightning's name: [LightningDataModule]<class>.<hook>."""
    hook = getattr(datamodule, name, None)
    if datamodule is not None and callable(hook):
        _profiled(trainer, f"[LightningDataModule]{type(datamodule).__name__}.{name}", hook)(**kwargs)


def call_callbacks(trainer: TrainerView, name: str, *args: Any) -> None:
    """A callback-only hook (``setup``, ``on_sanity_check_start``, ...)."""
    outer = trainer.metric_log.enter_hook(name)
    try:
        for cb in trainer.callbacks:
            _callback_hook(trainer, cb, name)(trainer, trainer.lightning_module, *args)
    finally:
        trainer.metric_log.leave_hook(outer)


def _profiled(trainer: TrainerView, action: str, fn: Hook) -> Hook:
    profiler = trainer.profiler
    return fn if profiler is None else profiler.timed(action, fn)


def _callback_hook(trainer: TrainerView, cb: Callback, name: str) -> Hook:
    return _profiled(trainer, f"[Callback]{cb.state_key}.{name}", getattr(cb, name))


def _module_hook(trainer: TrainerView, name: str) -> Hook:
    return _profiled(
        trainer, f"[Module]{type(trainer.lightning_module).__name__}.{name}", getattr(trainer.lightning_module, name)
    )


def call_epoch_end(trainer: TrainerView, name: str, between: Callable[[], None] | None = None) -> None:
    """Other callbacks, the module, ``between`` (e.g. reducing the epoch's metrics), then the monitoring callbacks."""
    module = trainer.lightning_module
    callbacks = list(trainer.callbacks)
    outer = trainer.metric_log.enter_hook(name)
    try:
        for cb in callbacks:
            if not is_monitoring(cb):
                _callback_hook(trainer, cb, name)(trainer, module)
        _module_hook(trainer, name)()
        if between is not None:
            between()
        for cb in callbacks:
            if is_monitoring(cb):
                _callback_hook(trainer, cb, name)(trainer, module)
    finally:
        trainer.metric_log.leave_hook(outer)


def resolved(trainer: TrainerView, name: str) -> tuple[Hook, ...]:
    """The overridden callback hooks (bound to trainer and module), then the module's, if overridden."""
    module = trainer.lightning_module
    bound = tuple(
        _profiled(trainer, f"[Callback]{cb.state_key}.{name}", functools.partial(getattr(cb, name), trainer, module))
        for cb in trainer.callbacks
        if overrides(cb, name, Callback)
    )
    if overrides(module, name, Module):
        bound += (_module_hook(trainer, name),)
    return bound
