"""What every stage shares: set-up and teardown around a run, hooks, logger writes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.results import Results
    from trainer.trainer import Trainer


def attach(trainer: Trainer, module: Module) -> None:
    object.__setattr__(module, "_trainer", trainer)
    trainer.module = module


def call_hook(trainer: Trainer, name: str) -> None:
    """The module's hook first, then each callback's."""
    module = trainer.module
    getattr(module, name)()
    for cb in trainer.callbacks:
        getattr(cb, name)(trainer, module)


def _check_module(module: Any, stage: str) -> None:
    from trainer.module import Module

    if not isinstance(module, Module):
        raise TypeError(f"Trainer.{stage}() takes a trainer.Module; got {type(module).__name__}.")
    if stage == "fit":
        if not callable(getattr(module, "training_step", None)):
            raise AttributeError(f"{type(module).__name__} must define training_step(batch, batch_idx).")
        if type(module).configure_optimizers is Module.configure_optimizers:
            raise AttributeError(f"{type(module).__name__} must define configure_optimizers().")


class Run:
    """Handle the body of a stage uses to restore a checkpoint."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.resumed = False

    def restore(self, ckpt_path: Any, weights_only: bool = False) -> None:
        if ckpt_path is None:
            return
        from trainer.state import resolve_checkpoint_path, restore_trainer_checkpoint

        path = resolve_checkpoint_path(self.trainer, ckpt_path)
        if path is None:
            return
        restore_trainer_checkpoint(self.trainer, path, weights_only=weights_only)
        self.resumed = not weights_only


@contextlib.contextmanager
def prepare_run(trainer: Trainer, module: Module, stage: str) -> Iterator[Run]:
    """Processes, module placement, callbacks and loggers up; always torn down again."""
    _check_module(module, stage)
    strategy = trainer.strategy
    strategy.setup_environment()
    attach(trainer, module)
    trainer.should_stop = False
    trainer.signal_received = None
    trainer.resume_rng = None
    trainer.epoch_rng = {}
    trainer.epoch_finished = False
    trainer.step_loss = None
    trainer.first_nonfinite_step = None
    status = "failed"
    try:
        if trainer.compile:
            module.compile()  # in place: state_dict keys stay free of "_orig_mod."
        strategy.setup_module(module)
        for cb in trainer.callbacks:
            cb.setup(trainer, module, stage)
        if stage == "fit":
            _check_output_folders(trainer)
        if stage == "fit" and trainer.is_global_zero:
            params = {**module.hparams, **({"config": trainer.config} if trainer.config else {})}
            for lg in trainer.loggers:
                lg.log_hyperparams(params)
        yield Run(trainer)
        status = "success"
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt | SystemExit) else "failed"
        strategy.on_exception(exc)
        for cb in trainer.callbacks:
            cb.on_exception(trainer, module, exc)
        if (clearer := strategy.explain_failure(exc)) is not None:
            raise clearer from exc
        raise
    finally:
        trainer.step_loss = trainer.last_loss  # the graph head is only worth keeping between steps
        for cb in trainer.callbacks:
            cb.teardown(trainer, module, stage)
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.finalize(status)
        strategy.teardown()


def _check_output_folders(trainer: Trainer) -> None:
    """Refuse, on every rank, folders rank zero cannot write logs or checkpoints to."""
    from trainer.checkpoint import unwritable_reason

    problem = None
    if trainer.is_global_zero:
        folders = {"default_root_dir / the logger's folder": trainer.log_dir} if trainer.loggers else {}
        callback = trainer.checkpoint_callback
        if callback is not None:
            folders["the checkpoint folder (ModelCheckpoint dirpath)"] = trainer.checkpoint_dir
        for what, folder in folders.items():
            if (reason := unwritable_reason(folder)) is not None:
                problem = f"{what} {folder} is not writable: {reason}. Choose a folder you can write to."
                break
    problem = trainer.strategy.broadcast(problem)
    if problem is not None:
        raise PermissionError(problem)


# ---- logging -----------------------------------------------------------------------------
def _to_floats(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def log_step_metrics(trainer: Trainer, results: Results, write: bool = True) -> None:
    """Push this step's values to callback_metrics; with ``write``, the interval's to the loggers."""
    values = results.pop_step_metrics(trainer.strategy)
    trainer.callback_metrics.update(values)
    results.unwritten.update(values)
    if not write or not results.unwritten:
        return
    values, results.unwritten = results.unwritten, {}
    if trainer.is_global_zero and trainer.loggers:
        floats = {k: v for k, v in _to_floats(values).items() if k not in results.no_logger}
        floats["epoch"] = trainer.current_epoch
        trainer.logged_metrics.update(floats)
        for lg in trainer.loggers:
            lg.log_metrics(floats, trainer.global_step)


def log_epoch_metrics(trainer: Trainer, results: Results, stage: str) -> dict[str, float]:
    """Reduce the epoch aggregates (every rank), then log them (rank zero)."""
    values = results.epoch_metrics(trainer.strategy)
    floats = _to_floats(values)
    if trainer.sanity_checking:
        return floats
    trainer.callback_metrics.update(values)
    if floats and trainer.is_global_zero and trainer.loggers:
        logged = {k: v for k, v in floats.items() if k not in results.no_logger}
        logged["epoch"] = trainer.current_epoch
        trainer.logged_metrics.update(logged)
        for lg in trainer.loggers:
            lg.log_metrics(logged, trainer.global_step)
    return floats
