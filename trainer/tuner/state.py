"""What a tuning run may change, put back afterwards; and Lightning's attribute lookup (module, hparams, datamodule).

Lightning saves a temporary checkpoint and restores it; the state is kept in memory here instead, each part
through its owner's own ``state_dict``/``load_state_dict`` (the module, the precision, the fit loop's progress,
the metric log) or method (``Trainer.set_callbacks``), and the process RNGs. The Trainer's settings that
Lightning's tuner overrides for its runs and puts back (``max_steps``, ``limit_*_batches``, the loggers) are set
here, the only writer besides the Trainer (``TRAINER_WRITERS`` in ``tests/test_architecture.py``). A fit after a
tuning run therefore equals a fit without it, but for the value tuned.
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


@contextlib.contextmanager
def isolated(
    trainer: Trainer,
    module: Module,
    callbacks: list[Callback],
    limits: dict[str, int | float],
    max_steps: int | None = None,
) -> Iterator[None]:
    """Run the block with only ``callbacks``, no loggers, no sanity check, these ``limits`` (by stage: "train",
    "validation", ...) and ``max_steps``; then put back everything the block could change. (Lightning's tuner
    runs its fit loop without the sanity check: ``num_sanity_val_steps=0`` here.)"""
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    grads = [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]
    mode, rng = module.training, rng_state()
    precision = copy.deepcopy(trainer.precision_plugin.state_dict())
    progress, metrics = trainer.fit_loop.progress.state_dict(), trainer.metric_log.state_dict()
    flags = trainer.max_steps, trainer.num_sanity_val_steps, trainer.should_stop
    limits_given, callbacks_given, loggers = dict(trainer.limits), list(trainer.callbacks), list(trainer.loggers)
    try:
        trainer.set_callbacks(list(callbacks))
        trainer.loggers[:] = []  # in place: the metric log holds the same list
        trainer.limits.update(limits)
        trainer.num_sanity_val_steps = 0
        if max_steps is not None:
            trainer.max_steps = max_steps
        yield
    finally:
        module.load_state_dict(weights)
        for p, grad in zip(module.parameters(), grads):
            p.grad = grad
        module.train(mode)
        set_rng_state(rng)
        trainer.precision_plugin.load_state_dict(precision)
        trainer.fit_loop.progress.load_state_dict(progress)
        trainer.metric_log.load_state_dict(metrics)
        trainer.max_steps, trainer.num_sanity_val_steps, trainer.should_stop = flags
        trainer.limits.clear()
        trainer.limits.update(limits_given)
        trainer.set_callbacks(callbacks_given)
        trainer.loggers[:] = loggers


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
