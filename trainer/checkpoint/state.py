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

from trainer.checkpoint.io import CheckpointError, load_checkpoint
from trainer.checkpoint.sharded import is_checkpoint_path

if TYPE_CHECKING:
    from trainer.view import TrainerView

FORMAT = "steadytrain/2"


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


def build_checkpoint(trainer: TrainerView, weights_only: bool = False) -> Checkpoint:
    """Build the checkpoint on every rank (a collective: each rank's RNG is gathered)."""
    module = trainer.lightning_module
    strategy = trainer.strategy
    fit = trainer.fit_loop
    progress = fit.progress
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
    if weights_only:
        return checkpoint
    optimizers = fit.optimization.optimizers if fit.optimization else []
    schedulers = fit.optimization.lr_scheduler_configs if fit.optimization else []
    checkpoint["optimizer_states"] = [strategy.optimizer_state(opt) for opt in optimizers]
    checkpoint["optimizer_classes"] = [type(opt).__name__ for opt in optimizers]
    checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in schedulers]
    checkpoint["precision"] = trainer.precision.state_dict()
    checkpoint["loops"] = {"fit": progress.state_dict(), "data": fit.data_state()}
    checkpoint["ranks"] = strategy.gather_objects(fit.rank_state())
    checkpoint["callback_metrics"] = {k: v.detach().cpu() for k, v in trainer.callback_metrics.items()}
    checkpoint["callbacks"] = {cb.state_key: cb.state_dict() for cb in trainer.callbacks}
    checkpoint["loggers"] = [lg.state_dict() for lg in trainer.loggers]
    checkpoint["config"] = trainer.config
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


def _version() -> str:
    from trainer.version import __version__

    return __version__


# ---- restoring -----------------------------------------------------------------------------------------
def read_checkpoint(trainer: TrainerView, path: Path) -> dict[str, Any]:
    """Load the file (weights_only) and bring an older format to this one."""
    return _upgrade(trainer.strategy.load_checkpoint(path))


def restore_module_and_callbacks(trainer: TrainerView, checkpoint: dict[str, Any], fitting: bool) -> None:
    """Weights, then the module's ``on_load_checkpoint``; when fitting, each callback's hook and state
    (Lightning's order: before ``configure_optimizers``)."""
    module = trainer.lightning_module
    trainer.strategy.load_module_weights(module, checkpoint)
    module.on_load_checkpoint(checkpoint)
    if not fitting:
        return
    saved = checkpoint.get("callbacks", {})
    for cb in trainer.callbacks:
        cb.on_load_checkpoint(trainer, module, checkpoint)
        if cb.state_key in saved:
            cb.load_state_dict(saved[cb.state_key])


def restore_training(trainer: TrainerView, checkpoint: dict[str, Any], path: Path) -> None:
    """Scaler, the loop's progress and position, RNG, metrics and loggers (``restore_optimizers`` does the rest)."""
    if checkpoint.get("format") not in (FORMAT, "steadytrain/1") or "loops" not in checkpoint:
        raise ValueError(
            f"{path} holds weights only (no trainer state), so it cannot resume a run; load it with "
            "trainer.checkpoint.load_weights(module, path) before fit() instead."
        )
    fit = trainer.fit_loop
    optimization = fit.optimization
    assert optimization is not None
    _check_optimizer_classes(path, checkpoint.get("optimizer_classes"), optimization.optimizers)
    trainer.precision.load_state_dict(checkpoint["precision"])
    fit.progress.load_state_dict(checkpoint["loops"]["fit"])
    fit.load_data_state(checkpoint["loops"]["data"], path)
    fit.load_rank_state(checkpoint["ranks"], checkpoint["loops"]["data"].get("world_size", 1), path)
    trainer.metric_log.callback_metrics.update(checkpoint.get("callback_metrics", {}))
    if trainer.is_global_zero:
        for lg, lg_state in zip(trainer.loggers, checkpoint.get("loggers", [])):
            lg.load_state_dict(lg_state)


def restore_optimizers(trainer: TrainerView, checkpoint: dict[str, Any], path: Path) -> None:
    """Optimizer and scheduler states; after ``on_fit_start`` (Lightning's order), where a callback may first
    rebuild what they hold, such as the parameter groups ``BaseFinetuning`` added."""
    optimization = trainer.fit_loop.optimization
    assert optimization is not None
    _restore_list("optimizer state", path, checkpoint["optimizer_states"], optimization.optimizers, trainer)
    schedulers = [config.scheduler for config in optimization.lr_scheduler_configs]
    _restore_list("LR scheduler", path, checkpoint["lr_schedulers"], schedulers, trainer)


def _check_optimizer_classes(path: Path, saved: list[str] | None, optimizers: list[Any]) -> None:
    now = [type(opt).__name__ for opt in optimizers]
    if saved is not None and len(saved) == len(now) and saved != now:
        raise ValueError(
            f"{path} holds the state of {saved} but configure_optimizers() made {now}: an optimizer's state only "
            "fits its own kind. Resume with the same optimizers, or load the weights alone "
            "(trainer.checkpoint.load_weights(module, path)) and start a new run."
        )


def _restore_list(what: str, path: Path, saved: list[Any], current: list[Any], trainer: TrainerView) -> None:
    if len(saved) != len(current):
        raise ValueError(f"{path} has {len(saved)} {what}(s) but configure_optimizers() made {len(current)}.")
    for i, (target, state) in enumerate(zip(current, saved)):
        try:
            if what == "optimizer state":
                trainer.strategy.load_optimizer_state(target, state)
            else:
                target.load_state_dict(state)
        except (KeyError, ValueError, TypeError, RuntimeError) as err:
            raise ValueError(
                f"{path}: {what} {i} does not fit {type(target).__name__} ({type(err).__name__}: {err}). Was "
                "configure_optimizers() changed since the checkpoint? Resume with the same optimizers and "
                "schedulers, or load the weights alone and start a new run."
            ) from err


def _upgrade(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A ``steadytrain/1`` checkpoint (version 0.1) in this format's names."""
    if checkpoint.get("format") != "steadytrain/1":
        return checkpoint
    loop = checkpoint.pop("loop")
    checkpoint["hyper_parameters"] = checkpoint.pop("hparams", {})
    checkpoint["optimizer_states"] = checkpoint.pop("optimizers", [])
    checkpoint["epoch"], checkpoint["global_step"] = loop["epoch"], loop["global_step"]
    fit = {k: loop[k] for k in ("epoch", "batches_done", "global_step", "epoch_finished")}
    checkpoint["loops"] = {"fit": fit, "data": {"world_size": loop["world_size"]}}
    return checkpoint


def resolve_checkpoint_path(trainer: TrainerView, ckpt_path: Any) -> Path | None:
    """``"last"`` is the newest complete checkpoint under the run folders, or None (fresh start)."""
    if str(ckpt_path) != "last":
        path = Path(ckpt_path)
        if not is_checkpoint_path(path):
            raise FileNotFoundError(f"ckpt_path={str(ckpt_path)!r} does not exist or is not a file.")
        return path
    from trainer.checkpoint.io import newest_checkpoint

    folders = checkpoint_folders(trainer)
    found = newest_checkpoint(folders)
    torn = sorted(str(p) for d in folders for p in d.glob("*.ckpt"))
    if found is None and torn:
        raise CheckpointError(
            f"ckpt_path='last' found checkpoints, but none is complete: {', '.join(torn[:5])}. They were cut off "
            "(a copy that did not finish?); resume from another one by path, or move them away to start fresh."
        )
    if found is None and trainer.is_global_zero:
        print(f"steadytrain: ckpt_path='last' found no checkpoint under {trainer.default_root_dir}; starting fresh.")
    return found


def checkpoint_folders(trainer: TrainerView) -> list[Path]:
    """Where a run's checkpoints are: every ModelCheckpoint's dirpath, and ``default_root_dir``'s checkpoint folders."""
    folders = [Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if cb.dirpath]
    folders += [p for p in Path(trainer.default_root_dir).glob("**/checkpoints") if p.is_dir() and p not in folders]
    return folders


__all__ = [
    "FORMAT",
    "Checkpoint",
    "build_checkpoint",
    "load_checkpoint",
    "read_checkpoint",
    "resolve_checkpoint_path",
    "restore_module_and_callbacks",
    "restore_optimizers",
    "restore_training",
]
