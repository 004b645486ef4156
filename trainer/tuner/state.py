"""What a tuning run may change, put back afterwards; and Lightning's attribute lookup (module, hparams, datamodule).

Lightning saves a temporary checkpoint and restores it; the state is kept in memory here instead: the
module's weights, buffers, gradients and train/eval mode, the process RNGs, the precision's loss
scale, and the Trainer's flags, callbacks, loggers, loop counters and metrics. A fit after a tuning
run therefore equals a fit without it, but for the value tuned.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trainer.seed import rng_state, set_rng_state

if TYPE_CHECKING:
    from trainer.callbacks.base import Callback
    from trainer.module import Module
    from trainer.trainer import Trainer

_FLAGS = ("max_steps", "max_epochs", "num_sanity_val_steps", "should_stop")


@contextlib.contextmanager
def isolated(trainer: Trainer, module: Module, callbacks: list[Callback], **flags: Any) -> Iterator[None]:
    """Run the block with only ``callbacks``, no loggers and ``flags`` (Trainer attributes, or ``limits``
    entries as ``limit_<stage>``); then restore everything the block could change."""
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    grads = [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]
    mode, rng = module.training, rng_state()
    scaler = getattr(trainer.precision, "scaler", None)
    scale = copy.deepcopy(scaler.state_dict()) if scaler is not None else None
    saved = {name: getattr(trainer, name) for name in _FLAGS}
    limits, given_callbacks, loggers = dict(trainer.limits), list(trainer.callbacks), list(trainer.loggers)
    progress = trainer.fit_loop.progress.state_dict()
    metric_log = trainer.metric_log
    metrics = dict(metric_log.callback_metrics), dict(metric_log.logged_metrics), set(metric_log.progress_bar_keys)
    try:
        trainer.set_callbacks(list(callbacks))
        trainer.loggers[:] = []  # in place: the metric log holds the same list
        for name, value in flags.items():
            if name.startswith("limit_"):
                trainer.limits[name.removeprefix("limit_")] = value
            else:
                setattr(trainer, name, value)
        yield
    finally:
        module.load_state_dict(weights)
        for p, grad in zip(module.parameters(), grads):
            p.grad = grad
        module.train(mode)
        set_rng_state(rng)
        if scaler is not None:
            scaler.load_state_dict(scale)
        for name, value in saved.items():
            setattr(trainer, name, value)
        trainer.limits.clear()
        trainer.limits.update(limits)
        trainer.set_callbacks(given_callbacks)
        trainer.loggers[:] = loggers
        trainer.fit_loop.progress.load_state_dict(progress)  # through its owner's own method
        metric_log.callback_metrics.clear()
        metric_log.callback_metrics.update(metrics[0])
        metric_log.logged_metrics.clear()
        metric_log.logged_metrics.update(metrics[1])
        metric_log.progress_bar_keys = metrics[2]


def attr_holders(module: Module, datamodule: Any, name: str) -> list[Any]:
    """Where ``name`` lives, in Lightning's order: the module, its hparams, the datamodule, its hparams."""
    holders: list[Any] = []
    for owner in (module, datamodule):
        if owner is None:
            continue
        if hasattr(owner, name):
            holders.append(owner)
        hparams = getattr(owner, "hparams", None)
        if isinstance(hparams, dict) and name in hparams:
            holders.append(hparams)
    return holders


def get_attr(module: Module, datamodule: Any, name: str) -> Any:
    """The value Lightning reads: that of the last holder (the datamodule's before the module's)."""
    holder = attr_holders(module, datamodule, name)[-1]
    return holder[name] if isinstance(holder, dict) else getattr(holder, name)


def set_attr(module: Module, datamodule: Any, name: str, value: Any) -> None:
    """Set ``name`` everywhere it lives, as Lightning's ``lightning_setattr`` does."""
    for holder in attr_holders(module, datamodule, name):
        if isinstance(holder, dict):
            holder[name] = value
        else:
            setattr(holder, name, value)
