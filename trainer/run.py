"""What every stage shares: set-up and teardown around a run, hooks, logger writes, signals."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset

from trainer import data

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
        raise
    finally:
        trainer.step_loss = trainer.last_loss  # the graph head is only worth keeping between steps
        for cb in trainer.callbacks:
            cb.teardown(trainer, module, stage)
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.finalize(status)
        strategy.teardown()


# ---- data --------------------------------------------------------------------------------
def _is_batch(obj: Any) -> bool:
    """A tensor, a dict or a tuple of tensors: what a loader yields, never a loader itself."""
    if isinstance(obj, torch.Tensor | Mapping):
        return True
    return isinstance(obj, tuple) and bool(obj) and all(isinstance(x, torch.Tensor) for x in obj)


def _as_list(loaders: Any, what: str) -> list[Any]:
    """One loader, or several in a list or tuple.

    A list of batches would be read as several loaders, each iterated row by row (or key by
    key): refused, as a silent wrong answer is worse than an error.
    """
    if loaders is None:
        return []
    if not isinstance(loaders, Sequence) or isinstance(loaders, str):
        return [loaders]
    for i, item in enumerate(loaders):
        if _is_batch(item):
            raise TypeError(
                f"the {what} loaders ({type(loaders).__name__}) hold a {type(item).__name__} at index {i}, which is "
                "a batch, but a list means several loaders. Pass [batches] for one loader of these batches, "
                "or a DataLoader."
            )
    return list(loaders)


def _check_loader(loader: Any, what: str) -> None:
    """Refuse, naming its type, what is not an iterable of batches, before any work is done."""
    name = type(loader).__name__
    if isinstance(loader, Dataset):
        problem, fix = "a Dataset, which yields samples, not batches", "wrap it in DataLoader(dataset, batch_size=...)"
    elif isinstance(loader, torch.Tensor | Mapping):
        problem, fix = "one batch (iterating it gives rows or keys)", "pass [batch], a list of batches or a DataLoader"
    elif isinstance(loader, str | bytes) or not isinstance(loader, Iterable):
        problem, fix = "not an iterable of batches", "pass a DataLoader, a list of batches or another iterable of them"
    else:
        return
    raise TypeError(f"the {what} loader ({name}) is {problem}; {fix}.")


def _is_datamodule(obj: Any) -> bool:
    return hasattr(obj, "setup") and hasattr(obj, "train_dataloader") and not hasattr(obj, "dataset")


def _check_usable(trainer: Trainer, loader: Any, what: str) -> None:
    """Type, sharding and emptiness checks of one loader, so a mistake fails before any batch runs."""
    _check_loader(loader, what)
    data.check_shardable(loader, trainer.world_size, trainer.use_distributed_sampler, what)
    if data.has_len(loader) and len(loader) == 0:
        if isinstance(loader, DataLoader):
            raise ValueError(f"the {what} DataLoader is empty (0 batches): check its dataset and batch_size.")
        raise ValueError(f"the {what} loader ({type(loader).__name__}) is empty (0 batches).")


def resolve_loaders(
    trainer: Trainer, module: Module, stage: str, primary: Any, val: Any, datamodule: Any
) -> tuple[Any, list[Any]]:
    """(train loader, val loaders) for "fit"; (list of loaders, []) for evaluation stages.

    A DataModule's ``prepare_data`` (downloads, generation) runs on global rank zero while the
    other ranks wait; then ``setup(stage)`` runs on every rank.
    """
    if _is_datamodule(primary):
        datamodule, primary = primary, None
    source: Any = datamodule if datamodule is not None else module
    if datamodule is not None:
        if trainer.is_global_zero and callable(getattr(datamodule, "prepare_data", None)):
            datamodule.prepare_data()
        trainer.strategy.barrier()
        datamodule.setup(stage)
    name = {"fit": "train", "validation": "val"}.get(stage, stage)
    if primary is None and callable(getattr(source, f"{name}_dataloader", None)):
        primary = getattr(source, f"{name}_dataloader")()
    if stage == "fit":
        if primary is None:
            raise ValueError("fit() needs a training DataLoader (train_dataloaders=) or a DataModule.")
        if val is None and callable(getattr(source, "val_dataloader", None)):
            val = source.val_dataloader()
        _check_usable(trainer, primary, "training")
        vals = _as_list(val, "validation")
        for v in vals:
            _check_usable(trainer, v, "validation")
        return primary, vals
    loaders = _as_list(primary, stage)
    if not loaders:
        raise ValueError(f"{stage} needs dataloaders= or a DataModule with {name}_dataloader().")
    for loader in loaders:
        _check_usable(trainer, loader, stage)
    return loaders, []


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


# ---- signals -----------------------------------------------------------------------------
_STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")


def start_iterator(loader: Iterable[Any]) -> Iterator[Any]:
    """``iter(loader)`` with the stop signals blocked while DataLoader workers are forked.

    Workers inherit the mask, so a SIGTERM sent to the whole process group (SLURM at a time
    limit, Ctrl-C, ``timeout``) cannot kill them mid-epoch: the main process finishes its step
    and saves, then shuts its workers down itself.
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return iter(loader)
    blocked = {getattr(signal, name) for name in _STOP_SIGNALS if hasattr(signal, name)}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        return iter(loader)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def signals_to_flags(trainer: Trainer) -> Iterator[None]:
    """SIGTERM/SIGUSR1 and a first Ctrl-C only set a flag: the loop finishes the step and saves.

    A second Ctrl-C raises KeyboardInterrupt at once.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = ["SIGTERM", "SIGINT"] + ([trainer.requeue_signal] if trainer.requeue_signal else [])
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if name == "SIGINT" and trainer.signal_received == "SIGINT":
            raise KeyboardInterrupt
        trainer.signal_received = name

    for name in names:
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
