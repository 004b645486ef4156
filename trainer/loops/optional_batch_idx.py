"""Steps written without ``batch_idx`` (``training_step(self, batch)``), which Lightning accepts.

Lightning passes ``batch_idx`` only to a step whose signature has room for it. Every loop and
strategy here calls ``step(batch, batch_idx)``, so for the duration of a stage such a step is
shadowed on the instance by one that drops the index; a step that takes it costs nothing.

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
    shadowed = []
    for name in STEPS:
        step = getattr(module, name, None)
        if not callable(step) or name in module.__dict__:
            continue
        if takes_dataloader_iter(step):
            module.__dict__[name] = _refusing_dataloader_iter(name)
            shadowed.append(name)
        elif not takes_batch_idx(step):
            module.__dict__[name] = _without_batch_idx(step)
            shadowed.append(name)
    try:
        yield
    finally:
        for name in shadowed:
            module.__dict__.pop(name, None)
