"""Rebuilding a module from a checkpoint: its class's ``__init__`` from the saved hyper-parameters,
then its weights (``Module.load_from_checkpoint``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

import trainer.hparams as hparams_lib
from trainer.checkpoint.io import CheckpointError, load_checkpoint, load_weights
from trainer.checkpoint.sharded import load_sharded

M = TypeVar("M", bound=nn.Module)


def rebuild_module(
    cls: type[M],
    path: str | Path,
    map_location: str | torch.device,
    strict: bool,
    trusted_classes: tuple[type, ...],
    overrides: dict[str, Any],
) -> M:
    """``cls(**saved hyper-parameters, **overrides)`` with the checkpoint's weights loaded; an error
    names the class that wrote the checkpoint when this one cannot take its arguments or weights."""
    if Path(path).is_dir():  # a sharded (FSDP) checkpoint: read whole, on this process
        checkpoint = load_sharded(path)
    else:
        checkpoint = load_checkpoint(path, map_location=map_location, trusted_classes=trusted_classes)
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
    try:
        load_weights(module, checkpoint, strict=strict)
    except CheckpointError as err:
        if written_by == f"{cls.__module__}.{cls.__qualname__}":
            raise
        unused = f" ({dropped} dropped: {cls.__name__}.__init__ does not take them)" if dropped else ""
        raise CheckpointError(f"{err} Note: {writer}{unused}; load it with that class.") from err
    return module
