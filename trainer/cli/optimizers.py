"""Optimizers and LR schedulers chosen on the command line.

Two ways, as in LightningCLI: a ``Module.__init__`` argument typed ``OptimizerCallable`` (the module
calls it with its parameters), or the top-level ``--optimizer``/``--lr_scheduler`` groups, which
replace the module's ``configure_optimizers`` when given (``auto_configure_optimizers=True``).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable, Mapping
from functools import partial, update_wrapper
from types import MethodType
from typing import Any

import torch
from jsonargparse import Namespace
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from trainer.exceptions import MisconfigurationException
from trainer.module import Module

AUTOMATIC = "AUTOMATIC"


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ReduceLROnPlateau plus the metric it watches, so one flag group configures both.

    ``--lr_scheduler ReduceLROnPlateau --lr_scheduler.monitor val_loss`` (the name resolves to this class).
    """

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


# Type ``Module.__init__`` arguments with these to choose the optimizer / scheduler from the CLI:
# ``--model.optimizer torch.optim.SGD --model.optimizer.lr 0.1`` gives ``optimizer(params) -> SGD``.
OptimizerCallable = Callable[[Iterable[torch.nn.Parameter]], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], LRScheduler]
# Lightning's names for the scheduler classes a ``--lr_scheduler`` group accepts (the plateau one is ours, so that
# ``--lr_scheduler ReduceLROnPlateau`` names one class and takes ``--lr_scheduler.monitor``)
LRSchedulerTypeTuple: tuple[type, ...] = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerType = type[LRScheduler] | type[ReduceLROnPlateau]


def instantiate_class(args: Any, init: Mapping[str, Any] | Namespace) -> Any:
    """Build ``{"class_path": ..., "init_args": {...}}`` with ``args`` (one value or a tuple) first."""
    if isinstance(init, Namespace):
        init = init.as_dict()
    positional = args if isinstance(args, tuple) else (args,)
    module_name, _, class_name = init["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(*positional, **dict(init.get("init_args") or {}))


def configure_optimizers(module: Module, optimizer: Optimizer, lr_scheduler: Any = None) -> Any:
    """What the replaced ``configure_optimizers`` returns; a plateau scheduler carries its monitor."""
    if lr_scheduler is None:
        return optimizer
    if isinstance(lr_scheduler, ReduceLROnPlateau):
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor}}
    return [optimizer], [lr_scheduler]


def automatic_keys(registry: Mapping[str, tuple[Any, str]], base: type | tuple[type, ...]) -> list[str]:
    """Keys of the groups registered with ``link_to="AUTOMATIC"`` whose classes derive from ``base``."""
    keys = []
    for key, (classes, link_to) in registry.items():
        candidates = classes if isinstance(classes, tuple) else (classes,)
        if link_to == AUTOMATIC and any(issubclass(c, base) for c in candidates):
            keys.append(key)
    return keys


def with_class_path(classes: type | tuple[type, ...], init: Any) -> dict[str, Any] | None:
    """A group of one fixed class holds only init args: add its class_path so it can be built."""
    if init is None:
        return None
    if isinstance(classes, tuple):
        return _as_dict(init)
    return {"class_path": f"{classes.__module__}.{classes.__name__}", "init_args": _as_dict(init)}


def replace_configure_optimizers(
    module: Module, optimizer_init: Any, scheduler_init: Any, method: Callable[..., Any], owner: str
) -> None:
    """Build the chosen optimizer (and scheduler) now and make ``module.configure_optimizers`` return them."""
    if type(module).configure_optimizers is not Module.configure_optimizers:
        warnings.warn(
            f"`{type(module).__name__}.configure_optimizers` will be overridden by `{owner}.configure_optimizers` "
            "(--optimizer was given).",
            stacklevel=3,
        )
    optimizer = instantiate_class(module.parameters(), optimizer_init)
    scheduler = instantiate_class(optimizer, scheduler_init) if scheduler_init else None
    bound = partial(method, optimizer=optimizer, lr_scheduler=scheduler)
    update_wrapper(bound, method)
    module.configure_optimizers = MethodType(bound, module)  # type: ignore[method-assign]


def _as_dict(value: Any) -> dict[str, Any]:
    return value.as_dict() if isinstance(value, Namespace) else dict(value)


def add_configure_optimizers(cli: Any, parser: Any, built: Any) -> None:
    """Make ``cli.model.configure_optimizers`` return what ``--optimizer``/``--lr_scheduler`` (the AUTOMATIC groups)
    build, through ``cli.configure_optimizers``; nothing when no ``--optimizer`` was given."""
    optimizer_keys = automatic_keys(parser.optimizers, Optimizer)
    scheduler_keys = automatic_keys(parser.lr_schedulers, LRSchedulerTypeTuple)
    if len(optimizer_keys) > 1 or len(scheduler_keys) > 1:
        raise MisconfigurationException(
            f"at most one optimizer and one LR scheduler group can be AUTOMATIC; got {optimizer_keys + scheduler_keys}:"
            " give the others a link_to and write configure_optimizers yourself."
        )
    if not optimizer_keys:
        return
    optimizer_init = with_class_path(parser.optimizers[optimizer_keys[0]][0], built.get(optimizer_keys[0]))
    if optimizer_init is None:  # no --optimizer: the model's configure_optimizers stays
        return
    scheduler_init = None
    if scheduler_keys:
        scheduler_init = with_class_path(parser.lr_schedulers[scheduler_keys[0]][0], built.get(scheduler_keys[0]))
    try:
        replace_configure_optimizers(
            cli.model, optimizer_init, scheduler_init, cli.configure_optimizers, type(cli).__name__
        )
    except (ValueError, TypeError) as err:
        parser.usage_error("could not build --optimizer/--lr_scheduler", err)
