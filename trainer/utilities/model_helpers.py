"""Lightning's ``utilities.model_helpers``: a torchvision model by name, and whether a hook is overridden."""

from __future__ import annotations

from typing import Any

from torch import nn

from trainer.exceptions import MisconfigurationException


def get_torchvision_model(model_name: str, **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(model_name, **kwargs)`` (``weights="DEFAULT"`` downloads the weights once)."""
    from trainer.utilities.imports import _TORCHVISION_AVAILABLE

    if not _TORCHVISION_AVAILABLE:
        raise ModuleNotFoundError(f"get_torchvision_model({model_name!r}) needs torchvision: pip install torchvision")
    from torchvision import models

    model: nn.Module = models.get_model(model_name, **kwargs)
    return model


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance``'s class overrides ``parent``'s ``method_name`` (the parent defaults to Module,
    DataModule or Callback, whichever ``instance`` is)."""
    if instance is None:
        return False
    if parent is None:
        from trainer.callbacks import Callback
        from trainer.datamodule import DataModule
        from trainer.module import Module

        parent = next((cls for cls in (Module, DataModule, Callback) if isinstance(instance, cls)), None)
        if parent is None:
            raise MisconfigurationException(
                f"is_overridden({method_name!r}, {type(instance).__name__}): pass parent=, the class it may override"
            )
    from lightning_utilities.core.overrides import is_overridden as _is_overridden

    return _is_overridden(method_name, instance, parent)
