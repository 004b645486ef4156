"""Steps written without ``batch_idx`` (``training_step(self, batch)``), or taking ``dataloader_idx`` through
``*args`` (``validation_step(self, batch, batch_idx, *_)``), which Lightning accepts.

Lightning passes ``batch_idx`` only to a step whose signature has room for it, and ``dataloader_idx`` as the third
positional argument. Every loop and strategy here calls ``step(batch, batch_idx[, dataloader_idx=...])``, so for the
duration of a stage such a step is shadowed on the instance by one that drops the index, or passes the loader's
index positionally; a step that takes them by name costs nothing.

A step written to pull its own batches (``training_step(self, dataloader_iter)``) is shadowed by one
that refuses when first called: the loops here fetch each batch themselves, to count it for an exact
resume and to stop at the batch limits, so such a step would be handed a batch and fail obscurely.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from trainer.exceptions import MisconfigurationException

STEPS = ("training_step", "validation_step", "test_step", "predict_step")


def takes_batch_idx(step: Callable[..., Any]) -> bool:
    """Lightning's rule: a parameter named ``batch_idx``, ``*args``, or at least two positional ones."""
    params = inspect.signature(step).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.name == "batch_idx" or p.kind is p.VAR_POSITIONAL for p in params) or len(positional) >= 2


def _positional_loader_idx(step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(step)
    def call(batch: Any, batch_idx: int, **kwargs: Any) -> Any:
        if "dataloader_idx" in kwargs:
            return step(batch, batch_idx, kwargs.pop("dataloader_idx"), **kwargs)
        return step(batch, batch_idx, **kwargs)

    return call


def _takes_loader_idx_in_args(step: Callable[..., Any]) -> bool:
    params = inspect.signature(step).parameters
    return "dataloader_idx" not in params and any(p.kind is p.VAR_POSITIONAL for p in params.values())


def _without_batch_idx(step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(step)  # inspect.signature still sees the user's parameters (dataloader_idx checks)
    def call(batch: Any, batch_idx: int, **kwargs: Any) -> Any:
        return step(batch, **kwargs)

    return call


def takes_dataloader_iter(step: Callable[..., Any]) -> bool:
    """Lightning's rule: a parameter named ``dataloader_iter``."""
    return "dataloader_iter" in inspect.signature(step).parameters


def _refusing_dataloader_iter(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise MisconfigurationException(
            f"`{name}(self, dataloader_iter)` is not supported: steadytrain's loops fetch each batch themselves (to "
            f"count it for an exact resume and to stop at the batch limits). Write `{name}(self, batch, batch_idx)`, "
            "and give it several micro-batches at once through the DataLoader (its batch_size or collate_fn)."
        )

    return refuse


@contextlib.contextmanager
def batch_idx_optional(module: nn.Module) -> Iterator[None]:
    """Shadow each step that takes no ``batch_idx`` while a stage runs; the module is unchanged after."""
    from trainer.module import written

    shadowed = []
    for name in STEPS:
        step = getattr(module, name, None)
        if not callable(step) or name in module.__dict__ or not written(module, name):
            continue  # Module's own default steps (``*args``) stay as they are: they say "not written"
        if takes_dataloader_iter(step):
            module.__dict__[name] = _refusing_dataloader_iter(name)
            shadowed.append(name)
        elif not takes_batch_idx(step):
            module.__dict__[name] = _without_batch_idx(step)
            shadowed.append(name)
        elif _takes_loader_idx_in_args(step):
            module.__dict__[name] = _positional_loader_idx(step)
            shadowed.append(name)
    try:
        yield
    finally:
        for name in shadowed:
            module.__dict__.pop(name, None)
