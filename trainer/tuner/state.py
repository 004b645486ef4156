"""What a search's trials may change, put back afterwards; and Lightning's attribute lookup (module, hparams,
datamodule).

Lightning saves a temporary checkpoint and restores it. Here the trials run on Trainers of their own
(``trainer.tuner.trial``), so the Trainer that runs the stage keeps its counters, its loop, its metrics and its
settings untouched; what the trials share with it is kept in memory and put back: the module's weights,
gradients and train/eval modes, its Trainer, the optimizers' states, the precision's state (a GradScaler's
scale), the strategy's attributes (its wrapped model), and the process RNGs. A fit after a search therefore
equals a fit without it, but for the value tuned.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trainer.seed import rng_state, set_rng_state

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView


@contextlib.contextmanager
def kept(trainer: TrainerView, module: Module) -> Iterator[None]:
    """Run the block (the trials), then put back everything it could change of the stage ``trainer`` runs."""
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    grads = [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]
    modes = [(m, m.training) for m in module.modules()]
    device = next((p.device for p in module.parameters()), None)
    optimizers = [(opt, copy.deepcopy(opt.state_dict())) for opt in trainer.optimizers]
    precision = copy.deepcopy(trainer.precision_plugin.state_dict())
    strategy = vars(trainer.strategy)
    strategy_attrs = dict(strategy)
    attached, rng = module.__dict__.get("_trainer"), rng_state()
    try:
        yield
    finally:
        strategy.clear()  # a trial's set-up and teardown (a new wrapper, then none) are undone
        strategy.update(strategy_attrs)
        if device is not None and next(module.parameters()).device != device:
            module.to(device)  # a trial's end moved it to the CPU, as every stage's end does
        module.load_state_dict(weights)
        for p, grad in zip(module.parameters(), grads):
            p.grad = grad
        for m, training in modes:
            m.training = training
        for opt, state in optimizers:
            opt.load_state_dict(state)
        trainer.precision_plugin.load_state_dict(precision)
        object.__setattr__(module, "_trainer", attached)  # the trials attached it to theirs
        set_rng_state(rng)


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
