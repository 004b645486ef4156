"""Rebuilding a module from a checkpoint: its class's ``__init__`` from the saved hyper-parameters,
then its weights (``Module.load_from_checkpoint``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

import trainer.hparams as hparams_lib
from trainer.checkpoint.io import CheckpointError, extract_state_dict, load_checkpoint, load_weights
from trainer.checkpoint.sharded import load_sharded

M = TypeVar("M", bound=nn.Module)


def rebuild_module(
    cls: type[M],
    path: str | Path,
    map_location: Any,
    strict: bool | None,
    trusted_classes: tuple[type, ...],
    overrides: dict[str, Any],
    before_weights: Callable[[M, dict[str, Any]], None] | None = None,
) -> M:
    """``cls(**saved hyper-parameters, **overrides)`` with the checkpoint's weights loaded; an error
    names the class that wrote the checkpoint when this one cannot take its arguments or weights.

    As Lightning's: ``map_location=None`` keeps each tensor on the device it was saved from where that device
    exists (else the CPU) and the module ends there; ``strict=None`` is the module's ``strict_loading``;
    ``before_weights(module, checkpoint)`` runs before the weights load (``Module``: ``configure_model`` and
    ``on_load_checkpoint``)."""
    if Path(path).is_dir():  # a sharded (FSDP) checkpoint: read whole, on this process
        checkpoint = load_sharded(path)
    else:
        location = _available_device if map_location is None else map_location
        checkpoint = load_checkpoint(path, map_location=location, trusted_classes=trusted_classes)
    saved = checkpoint.get("hyper_parameters", checkpoint.get("hparams", {}))
    namespace = checkpoint.get("hparams_type") == "Namespace"
    kwargs, dropped = hparams_lib.rebuild_kwargs(cls.__init__, saved, checkpoint.get("hparams_name"), namespace)
    written_by = checkpoint.get("module_class", "an unknown class")
    writer = f"the checkpoint was written by {written_by} with hyper-parameters {sorted(saved)}"
    try:
        module = cls(**{**kwargs, **overrides})
    except TypeError as err:
        raise TypeError(
            f"{cls.__name__}.load_from_checkpoint({str(path)!r}): {writer}, and {cls.__name__}.__init__ does not "
            f"take them ({err}). Load it with that class, or pass the arguments yours needs as keywords."
        ) from err
    strict = _strictness(module, strict)
    if before_weights is not None:
        before_weights(module, checkpoint)
    if not checkpoint.get("state_dict", True):  # saved empty (Lightning's warning; nothing to load)
        warnings.warn(f"The state dict in {str(path)!r} contains no parameters.", UserWarning, stacklevel=3)
        return module
    try:
        load_weights(module, checkpoint, strict=strict)
    except CheckpointError as err:
        if written_by == f"{cls.__module__}.{cls.__qualname__}":
            raise
        unused = f" ({dropped} dropped: {cls.__name__}.__init__ does not take them)" if dropped else ""
        raise CheckpointError(f"{err} Note: {writer}{unused}; load it with that class.") from err
    if map_location is None:
        tensors = (t for t in extract_state_dict(checkpoint).values() if isinstance(t, torch.Tensor))
        module.to(next(tensors, torch.tensor(0)).device)
    return module


def _available_device(storage: Any, location: str) -> Any:
    """torch.load's ``map_location``: a tensor stays on the device it was saved from, unless that device is
    missing here (then the CPU)."""
    if location.startswith("cuda") and not torch.cuda.is_available():
        return storage.cpu()
    if location.startswith("mps") and not torch.backends.mps.is_available():
        return storage.cpu()
    return None


def _strictness(module: nn.Module, strict: bool | None) -> bool:
    """``strict`` given, else the module's ``strict_loading``; both given and different is an error."""
    chosen = getattr(module, "__dict__", {}).get("_strict_loading")
    own = getattr(module, "strict_loading", True)
    if chosen is not None and strict is not None and strict != own:
        raise ValueError(
            f"You set `.load_from_checkpoint(..., strict={strict!r})` which is in conflict with "
            f"`{type(module).__name__}.strict_loading={own!r}. Please set the same value for both of them."
        )
    return bool(own if strict is None else strict)
