"""What a checkpoint holds, built in one place from one schema, and how a run is put back into it.

A checkpoint records everything that decides the rest of the run: weights, optimizers,
schedulers, the precision's scaler, the fit loop's progress, the data position (and what it
depends on), every rank's RNG and half-accumulated gradients, callbacks, loggers and the last
logged metrics. With these a resumed run continues bit for bit as if it had never stopped.
Callbacks and the module contribute only through their hooks; nothing edits the dict afterwards.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from trainer.checkpoint import lightning_schema
from trainer.checkpoint.io import load_checkpoint
from trainer.checkpoint.kinds import FORMAT, kind_of
from trainer.checkpoint.last import checkpoint_folders, resolve_checkpoint_path
from trainer.checkpoint.restore import Restore, Source, states_now

if TYPE_CHECKING:
    from trainer.view import TrainerView


class Checkpoint(TypedDict, total=False):
    """The schema. Lightning's names where Lightning has the same thing (``state_dict``, ``epoch``,
    ``global_step``, ``hyper_parameters``, ``optimizer_states``, ``lr_schedulers``, ``callbacks``)."""

    format: str
    epoch: int
    global_step: int
    state_dict: dict[str, Any]  # the user's module, never with a wrapper's prefix
    hyper_parameters: dict[str, Any]  # plain values only (weights_only loading)
    hparams_name: str  # the __init__ argument they were passed whole as (save_hyperparameters(config))
    hparams_type: str  # "Namespace" when that argument was an argparse.Namespace
    module_class: str
    optimizer_states: list[dict[str, Any]]
    optimizer_classes: list[str]  # which optimizer each state belongs to
    lr_schedulers: list[dict[str, Any]]
    precision: dict[str, Any]  # the GradScaler's state under fp16
    loops: dict[str, Any]  # {"fit": Progress.state_dict(), "data": the data position's facts}
    ranks: list[dict[str, Any]]  # per rank: RNG, the epoch's RNG, gradients of an open accumulation window
    callback_metrics: dict[str, torch.Tensor]
    callbacks: dict[str, dict[str, Any]]  # by Callback.state_key
    loggers: list[dict[str, Any]]
    config: dict[str, Any] | None  # the resolved CLI config, when run from the CLI
    versions: dict[str, str]


_WRITTEN = (
    "optimizers", "optimizer_kinds", "schedulers", "precision", "progress", "data", "ranks", "metrics", "callbacks",
    "loggers", "datamodule",
)  # fmt: skip


def build_checkpoint(trainer: TrainerView, weights_only: bool = False) -> Checkpoint:
    """Build the checkpoint on every rank (a collective: each rank's RNG is gathered), from the parts of
    ``trainer.checkpoint.restore``: what each part saves is what it loads."""
    module = trainer.lightning_module
    strategy = trainer.strategy
    progress = trainer.fit_loop.progress
    checkpoint: Checkpoint = {
        "format": FORMAT,
        "epoch": progress.epoch,
        "global_step": progress.global_step,
        "state_dict": strategy.module_state_dict(),
        "hyper_parameters": _plain_hparams(trainer),
        "module_class": f"{type(module).__module__}.{type(module).__qualname__}",
        "versions": {"torch": str(torch.__version__), "steadytrain": _version()},
    }
    _hparams_origin(checkpoint, module)
    _datamodule_parts(checkpoint, trainer)
    if weights_only:
        return checkpoint
    parts = states_now(trainer, _WRITTEN)  # the parts read_ours (below) gives back, asked in their order since 0.1
    checkpoint["optimizer_states"] = parts["optimizers"]
    checkpoint["optimizer_classes"] = parts["optimizer_kinds"]
    checkpoint["lr_schedulers"] = parts["schedulers"]
    checkpoint["precision"] = parts["precision"]
    checkpoint["loops"] = {"fit": parts["progress"], "data": parts["data"]}
    checkpoint["ranks"] = parts["ranks"]["ranks"]
    checkpoint["callback_metrics"] = parts["metrics"]
    checkpoint["callbacks"] = parts["callbacks"]
    checkpoint["loggers"] = parts["loggers"]
    checkpoint["config"] = trainer.config
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and parts["datamodule"]:  # Lightning's key: the DataModule's class name
        checkpoint[type(datamodule).__qualname__] = parts["datamodule"]  # type: ignore[literal-required]
    for cb in trainer.callbacks:
        cb.on_save_checkpoint(trainer, module, checkpoint)  # type: ignore[arg-type]
    module.on_save_checkpoint(checkpoint)  # type: ignore[arg-type]
    return checkpoint


def _plain_hparams(trainer: TrainerView) -> dict[str, Any]:
    """The module's plain hyper-parameters; the others are named in a warning (the CLI config holds them)."""
    from trainer.hparams import dropped_warning, plain_values

    module = trainer.lightning_module
    kept, dropped = plain_values(module.hparams)
    if dropped and trainer.is_global_zero and trainer.config is None:
        warnings.warn(dropped_warning(dropped, type(module).__name__), stacklevel=4)
    return kept


def _hparams_origin(checkpoint: Checkpoint, module: Any) -> None:
    """Which ``__init__`` argument the hyper-parameters came from whole, so loading passes them back as it."""
    state = module._hparams_state()
    if state.name is not None:
        checkpoint["hparams_name"] = state.name
        if state.namespace:
            checkpoint["hparams_type"] = "Namespace"


def _datamodule_parts(checkpoint: Checkpoint, trainer: TrainerView) -> None:
    """As Lightning saves them: the DataModule's saved hyper-parameters (``DataModule.load_from_checkpoint`` builds
    it from them)."""
    from trainer.hparams import plain_values

    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is None:
        return
    state = datamodule._hparams_state() if hasattr(datamodule, "_hparams_state") else None
    if state is not None and state.values:
        extra: Any = checkpoint  # keys named by the DataModule class
        extra[datamodule.CHECKPOINT_HYPER_PARAMS_KEY] = plain_values(state.values)[0]
        if state.name is not None:
            extra[datamodule.CHECKPOINT_HYPER_PARAMS_NAME] = state.name
            if state.namespace:
                extra[datamodule.CHECKPOINT_HYPER_PARAMS_TYPE] = "Namespace"


def _version() -> str:
    from trainer.version import __version__

    return __version__


# ---- reading: a reader per schema gives one state per part of ``trainer.checkpoint.restore`` ---------------
def read_checkpoint(trainer: TrainerView, path: Path) -> dict[str, Any]:
    """Load the file (weights_only) and bring an older format to this one."""
    weights_only = trainer.state.weights_only  # None: the safe default; a strategy written before it takes path only
    strategy = trainer.strategy
    loaded = strategy.load_checkpoint(path) if weights_only is None else strategy.load_checkpoint(path, weights_only)
    return _upgrade(loaded)


def open_checkpoint(trainer: TrainerView, path: Path, fitting: bool) -> Restore:
    """Read ``path`` (weights_only) with the reader of its schema; refuses here what cannot be restored."""
    checkpoint = read_checkpoint(trainer, path)
    reader = lightning_schema.read if lightning_schema.is_lightning(checkpoint) else read_ours
    return Restore(trainer, Source(path, checkpoint), reader(trainer, checkpoint, path, fitting), fitting)


def read_ours(trainer: TrainerView, checkpoint: dict[str, Any], path: Path, fitting: bool) -> dict[str, Any]:
    """Our schema (``Checkpoint``, written by ``build_checkpoint``) as one state per part."""
    if not fitting:
        return {"module": checkpoint}
    kind = kind_of(checkpoint)  # of the file as written: read_checkpoint brought /1 to /2's names
    if not kind.resumes:
        raise ValueError(kind.why_not(path))
    data = checkpoint["loops"]["data"]
    return {
        "module": checkpoint,
        "callbacks": checkpoint.get("callbacks", {}),
        "optimizer_kinds": checkpoint.get("optimizer_classes"),
        "precision": checkpoint["precision"],
        "progress": checkpoint["loops"]["fit"],
        "data": data,
        "ranks": {"ranks": checkpoint["ranks"], "world_size": data.get("world_size", 1)},
        "metrics": checkpoint.get("callback_metrics", {}),
        "loggers": checkpoint.get("loggers", []),
        "optimizers": checkpoint["optimizer_states"],
        "schedulers": checkpoint["lr_schedulers"],
        "datamodule": checkpoint.get(type(getattr(trainer, "datamodule", None)).__qualname__),
    }


def _upgrade(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A ``steadytrain/1`` checkpoint (version 0.1) in this format's names (one that lacks parts stays as it is:
    ``read_ours`` names them)."""
    if checkpoint.get("format") != "steadytrain/1" or not kind_of(checkpoint).resumes:
        return checkpoint
    checkpoint["format"] = FORMAT
    loop = checkpoint.pop("loop")
    checkpoint["hyper_parameters"] = checkpoint.pop("hparams", {})
    checkpoint["optimizer_states"] = checkpoint.pop("optimizers", [])
    checkpoint["epoch"], checkpoint["global_step"] = loop["epoch"], loop["global_step"]
    fit = {k: loop[k] for k in ("epoch", "batches_done", "global_step", "epoch_finished")}
    checkpoint["loops"] = {"fit": fit, "data": {"world_size": loop["world_size"]}}
    return checkpoint


__all__ = [
    "FORMAT",
    "Checkpoint",
    "build_checkpoint",
    "checkpoint_folders",
    "load_checkpoint",
    "open_checkpoint",
    "read_checkpoint",
    "read_ours",
    "resolve_checkpoint_path",
]
