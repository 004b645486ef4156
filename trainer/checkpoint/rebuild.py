"""``load_from_checkpoint`` of a Module or a DataModule: its class's ``__init__`` from the saved hyper-parameters
(or an ``hparams_file``), the keywords given winning, then its state, as Lightning loads them."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any, TypeVar

import torch

import trainer.hparams as hparams_lib
from trainer.checkpoint.io import CheckpointError, load_checkpoint, load_weights
from trainer.checkpoint.sharded import load_sharded

T = TypeVar("T")

PAST_HPARAMS_KEYS = ("hparams", "module_arguments")  # where Lightning 0.7 kept them, oldest first


def default_map_location(storage: Any, location: str) -> Any:
    """Lightning's default: tensors stay on the device they were saved from, or come to the CPU when this
    machine has no such device (a GPU checkpoint on a CPU-only machine)."""
    device_type = location.split(":")[0]
    if device_type in ("cuda", "mps", "xla", "xpu", "hpu"):
        backend = getattr(torch, device_type, None)
        if backend is None or not getattr(backend, "is_available", lambda: False)():
            return storage.cpu()
    return None


def read_for_loading(
    path: str | Path, map_location: Any, weights_only: bool | None, trusted_classes: tuple[type, ...]
) -> dict[str, Any]:
    """The checkpoint's dict: a file (read with ``weights_only=True`` unless told otherwise), or a sharded
    (FSDP) directory read whole on this process. An ``http(s)://`` URL is downloaded into torch hub's cache, as
    Lightning does, and read the same way."""
    location = default_map_location if map_location is None else map_location
    if str(path).startswith(("http://", "https://")):
        with torch.serialization.safe_globals(list(trusted_classes)):
            loaded = torch.hub.load_state_dict_from_url(
                str(path), map_location=location, weights_only=weights_only is not False
            )
        return dict(loaded)
    if Path(path).is_dir():
        return load_sharded(path)
    return load_checkpoint(path, map_location=location, trusted_classes=trusted_classes, weights_only=weights_only)


def hparams_from_file(hparams_file: str | os.PathLike[str]) -> dict[str, Any]:
    """The hyper-parameters in a ``.yaml``/``.yml`` or Lightning 0.x ``tags.csv`` file, replacing the
    checkpoint's."""
    from trainer.saving import load_hparams_from_tags_csv, load_hparams_from_yaml

    extension = str(hparams_file).rsplit(".", 1)[-1].lower()
    if extension == "csv":
        return load_hparams_from_tags_csv(hparams_file)
    if extension in ("yml", "yaml"):
        return dict(load_hparams_from_yaml(hparams_file))
    raise ValueError(f".csv, .yml or .yaml is required for `hparams_file`; got {str(hparams_file)!r}.")


def saved_hparams(cls: Any, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The hyper-parameters the checkpoint holds for ``cls`` (a Module's under Lightning 0.7's keys too)."""
    key = cls.CHECKPOINT_HYPER_PARAMS_KEY
    saved: dict[str, Any] = {}
    if key == "hyper_parameters":
        for past in PAST_HPARAMS_KEYS:
            saved.update(checkpoint.get(past) or {})
    saved.update(checkpoint.get(key) or {})
    return saved


# What a checkpoint may name as its ``_instantiator`` (a CLI run's modules: rebuilt from their config through
# jsonargparse); Lightning's paths name our function, so checkpoints go both ways. Anything else is refused: a
# checkpoint must not choose code to run.
TRUSTED_INSTANTIATORS = (
    "lightning.pytorch.cli.instantiate_module",
    "pytorch_lightning.cli.instantiate_module",
    "trainer.cli.instantiate_module",
)


def trusted_instantiator(cls: type, path: Any, class_path: Any) -> Any:
    """The function that rebuilds ``cls`` from a CLI run's hyper-parameters, or None where none was saved."""
    if path is None:
        return None
    if path not in TRUSTED_INSTANTIATORS:
        raise ValueError(
            f"The instantiator {path!r} from the checkpoint is not one of the trusted {list(TRUSTED_INSTANTIATORS)} "
            "and was blocked to prevent arbitrary code execution."
        )
    if class_path is not None and not _imported_subclass(str(class_path), cls):
        raise ValueError(
            f"The class {class_path!r} requested by the checkpoint does not resolve to an already imported subclass "
            f"of {cls.__name__} and was blocked to prevent arbitrary code execution. If you trust this checkpoint, "
            "import the module that defines the class before loading."
        )
    from trainer.checkpoint.instantiate import instantiate_module

    return instantiate_module


def _imported_subclass(class_path: str, cls: type) -> bool:
    module_name, _, name = class_path.rpartition(".")
    found = getattr(sys.modules.get(module_name), name, None)
    return isinstance(found, type) and issubclass(found, cls)


def build(cls: type[T], checkpoint: dict[str, Any], path: Any, overrides: dict[str, Any]) -> T:
    """``cls(**saved hyper-parameters updated with overrides)``; keywords ``__init__`` does not take are dropped
    unless it takes ``**kwargs`` (Lightning's rule). An error names the class that wrote the checkpoint."""
    saved = {**saved_hparams(cls, checkpoint), **overrides}
    instantiator = trusted_instantiator(cls, saved.pop("_instantiator", None), saved.get("_class_path"))
    name = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_NAME)  # type: ignore[attr-defined]
    namespace = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_TYPE) == "Namespace"  # type: ignore[attr-defined]
    kwargs, _ = hparams_lib.rebuild_kwargs(cls.__init__, saved, name, namespace, overrides)
    if instantiator is not None and "_class_path" in saved:  # the subclass the CLI built, even when loading by a base
        kwargs["_class_path"] = saved["_class_path"]
    try:
        return instantiator(cls, kwargs) if instantiator is not None else cls(**kwargs)
    except TypeError as err:
        written_by = checkpoint.get("module_class", "an unknown class")
        raise TypeError(
            f"{cls.__name__}.load_from_checkpoint({str(path)!r}): the checkpoint was written by {written_by} with "
            f"hyper-parameters {sorted(saved)}, and {cls.__name__}.__init__ does not take them ({err}). Load it with "
            "that class, or pass the arguments yours needs as keywords."
        ) from err


def load_module(
    cls: type[T],
    path: str | Path,
    map_location: Any,
    hparams_file: str | os.PathLike[str] | None,
    strict: bool | None,
    weights_only: bool | None,
    trusted_classes: tuple[type, ...],
    overrides: dict[str, Any],
) -> T:
    """``Module.load_from_checkpoint``: built, ``configure_model``, ``on_load_checkpoint``, then the weights (with
    ``strict``, or the module's ``strict_loading``), on the device the weights were read to."""
    checkpoint = read_for_loading(path, map_location, weights_only, trusted_classes)
    if hparams_file is not None:
        checkpoint[cls.CHECKPOINT_HYPER_PARAMS_KEY] = hparams_from_file(hparams_file)  # type: ignore[attr-defined]
    module: Any = build(cls, checkpoint, path, overrides)
    own = getattr(module, "strict_loading", True)  # Module.strict_loading, set in __init__ (stored as _strict_loading)
    if module.__dict__.get("_strict_loading") is not None and strict is not None and strict != own:
        raise ValueError(
            f"You set `.load_from_checkpoint(..., strict={strict!r})` which is in conflict with "
            f"`{cls.__name__}.strict_loading={own!r}. Please set the same value for both of them."
        )
    strict = bool(own if strict is None else strict)
    module.configure_model()
    module.on_load_checkpoint(checkpoint)
    state_dict = checkpoint.get("state_dict") or {}
    try:
        if "state_dict" in checkpoint and not state_dict and not strict:  # nothing to load, and that is allowed
            missing, unexpected = list(module.state_dict()), list[str]()
        else:
            missing, unexpected = load_weights(module, checkpoint, strict=strict)
    except CheckpointError as err:
        written_by = checkpoint.get("module_class")
        if written_by in (None, f"{cls.__module__}.{cls.__qualname__}"):
            raise
        saved = sorted(saved_hparams(cls, checkpoint))
        note = (
            f" Note: the checkpoint was written by {written_by} with hyper-parameters {saved}; load it with that class."
        )
        raise CheckpointError(f"{err}{note}") from err
    if not strict and missing:
        warnings.warn(f"Found keys that are in the model state dict but not in the checkpoint: {missing}", stacklevel=3)
    if not strict and unexpected:
        warnings.warn(
            f"Found keys that are not in the model state dict but in the checkpoint: {unexpected}", stacklevel=3
        )
    if not state_dict:
        warnings.warn(f"The state dict in {str(path)!r} contains no parameters.", stacklevel=3)
        return module  # type: ignore[no-any-return]
    first = next((t for t in state_dict.values() if isinstance(t, torch.Tensor)), None)
    return module.to(first.device) if first is not None else module  # type: ignore[no-any-return]


def load_datamodule(
    cls: type[T],
    path: str | Path,
    map_location: Any,
    hparams_file: str | os.PathLike[str] | None,
    weights_only: bool | None,
    trusted_classes: tuple[type, ...],
    overrides: dict[str, Any],
) -> T:
    """``DataModule.load_from_checkpoint``: built from the DataModule's saved hyper-parameters, then its
    ``load_state_dict`` with the state saved under its class name (as Lightning saves it)."""
    checkpoint = read_for_loading(path, map_location, weights_only, trusted_classes)
    if hparams_file is not None:
        checkpoint[cls.CHECKPOINT_HYPER_PARAMS_KEY] = hparams_from_file(hparams_file)  # type: ignore[attr-defined]
    datamodule: Any = build(cls, checkpoint, path, overrides)
    state = checkpoint.get(type(datamodule).__qualname__)
    if state:
        datamodule.load_state_dict(state)
    return datamodule  # type: ignore[no-any-return]
