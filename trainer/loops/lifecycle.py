"""The frame around every stage: processes up, set-up hooks, failures reported, everything released.

Lightning's order: ``configure_callbacks``, ``prepare_data`` (local rank zero of each machine,
the DataModule's then the module's, while the other ranks wait), ``setup(stage)`` (DataModule,
callbacks, module); at the end ``teardown(stage)`` (callbacks, module, DataModule), whether the
stage succeeded or not. A failure reaches ``on_exception`` of callbacks and DataModule first; a Ctrl-C
(``KeyboardInterrupt``) then ends the stage with ``SystemExit(1)`` after the teardown, as Lightning's.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import trainer.loops.hooks as hooks
from trainer.callbacks.base import Checkpoint
from trainer.exceptions import TunerExit
from trainer.failures import note_worker_failure
from trainer.loggers.folder import share_run_folders
from trainer.loops.checks import check_fit, check_module, check_uncalled_hooks
from trainer.loops.oom import explain_out_of_memory
from trainer.loops.optional_batch_idx import batch_idx_optional
from trainer.states import TrainerFn

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

STAGE_NAMES = {"fit": "fit", "validation": "validate", "test": "test", "predict": "predict"}


@contextlib.contextmanager
def running(trainer: TrainerView, module: Module, fn: str, datamodule: Any) -> Iterator[None]:
    """Run a stage (``fn``: "fit", "validate", "test" or "predict") inside set-up and teardown."""
    check_module(module, fn)
    trainer.strategy.setup_environment()
    trainer.attach(module, datamodule, fn)  # trainer.state starts the stage: nothing loaded yet
    trainer.metric_log.reset()
    status, sigint = "failed", None
    try:
        _set_up(trainer, module, datamodule, fn)
        with batch_idx_optional(module):
            yield
        status = "success"
    except TunerExit:  # the Tuner's search is done: a clean end, which the Tuner catches
        status = "success"
        raise
    except BaseException as exc:
        status = "interrupted" if isinstance(exc, KeyboardInterrupt | SystemExit) else "failed"
        clearer = _report_failure(trainer, module, datamodule, exc)
        if clearer is not None:
            raise clearer from exc
        if isinstance(exc, KeyboardInterrupt):  # Lightning's graceful shutdown: teardown, then exit status 1
            sigint = _ignore_sigint()
            if trainer.is_global_zero:
                print("steadytrain: Detected KeyboardInterrupt, attempting graceful shutdown ... (exit 1)", flush=True)
            raise SystemExit(1) from exc
        raise
    finally:
        _tear_down(trainer, datamodule, fn, status)
        if sigint is not None:
            signal.signal(signal.SIGINT, sigint)


def _set_up(trainer: TrainerView, module: Module, datamodule: Any, fn: str) -> None:
    strategy = trainer.strategy
    if fn == "fit":  # before any hook or folder: a module fit cannot train leaves nothing behind (Lightning's)
        check_fit(trainer, module)
    _add_module_callbacks(trainer, module)
    _lend_logging(trainer, module)
    check_uncalled_hooks(module, list(trainer.callbacks))
    _prepare_data(trainer, module, datamodule)
    share_run_folders(trainer.loggers, strategy)  # every rank writes to the folder rank zero claimed
    stage = TrainerFn(fn)  # Lightning's: a str enum, so `stage == "fit"` and `stage.value` both work
    hooks.call_datamodule(trainer, datamodule, "setup", stage=stage)
    hooks.call(trainer, "setup", stage=stage)
    if trainer.profiler is not None:
        rank = strategy.global_rank if strategy.world_size > 1 else None  # unique across machines too
        trainer.profiler.lightning_module = module
        trainer.profiler.setup(fn, rank, trainer.log_dir)


def _lend_logging(trainer: TrainerView, module: Module) -> None:
    """Lightning's callbacks may call ``self.log``/``self.log_dict``: the module's, lent for the stage (a callback
    class with its own ``log`` keeps it)."""
    for cb in trainer.callbacks:
        for name in ("log", "log_dict"):
            if not hasattr(type(cb), name):
                setattr(cb, name, getattr(module, name))


def _report_failure(trainer: TrainerView, module: Module, datamodule: Any, exc: BaseException) -> BaseException | None:
    """``on_exception`` of callbacks, DataModule and strategy; a clearer error to raise instead, if any (asked
    before other ranks are stopped: they may still tell)."""
    strategy = trainer.strategy
    clearer = strategy.explain_failure(exc) or explain_out_of_memory(trainer, exc)  # reads the failing batch
    trainer.metric_log.close()  # on_exception and later code cannot log, as in Lightning
    for cb in trainer.callbacks:
        cb.on_exception(trainer, module, exc)
    if datamodule is not None and callable(getattr(datamodule, "on_exception", None)):
        datamodule.on_exception(exc)
    strategy.on_exception(clearer or exc)
    note_worker_failure(clearer or exc)  # the worker and its error on the last line
    return clearer


def report_spawned_failure(
    trainer: TrainerView, module: Module | None, datamodule: Any, fn: str, exc: BaseException
) -> None:
    """A stage failed in the ranks ``ddp_spawn`` started: this process's Trainer looks as after a one-process
    failure, as in Lightning (the module attached, the stage interrupted, ``on_exception`` of its callbacks and
    DataModule). Checkpoint callbacks are left out: the ranks already saved, and the weights here are not the
    trained ones."""
    module = module if module is not None else trainer.module
    if module is None:
        return
    trainer.attach(module, datamodule, fn)
    for cb in trainer.callbacks:
        if not isinstance(cb, Checkpoint):
            cb.on_exception(trainer, module, exc)
    if datamodule is not None and callable(getattr(datamodule, "on_exception", None)):
        datamodule.on_exception(exc)
    trainer.release(interrupted=True)


def _tear_down(trainer: TrainerView, datamodule: Any, fn: str, status: str) -> None:
    strategy = trainer.strategy
    trainer.metric_log.close()
    _report_profile(trainer, fn)
    trainer.release(interrupted=status != "success")
    hooks.call(trainer, "teardown", stage=TrainerFn(fn))
    hooks.call_datamodule(trainer, datamodule, "teardown", stage=TrainerFn(fn))
    if trainer.is_global_zero:
        for lg in trainer.loggers:
            lg.finalize(status)
    strategy.teardown()
    strategy.offload(trainer.optimizers)  # Lightning's teardown: module and optimizer state to the CPU


def _ignore_sigint() -> Any:
    """Ignore further Ctrl-C while the stage shuts down (Lightning's rule); the handler it had, to put back."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, signal.SIG_IGN)


def _report_profile(trainer: TrainerView, fn: str) -> None:
    profiler = trainer.profiler
    if profiler is None:
        return
    profiler.teardown(fn)
    if trainer.is_global_zero and (report := profiler.summary()):
        print(report, flush=True)


def _add_module_callbacks(trainer: TrainerView, module: Module) -> None:
    """``configure_callbacks``: a module's callback replaces the Trainer's of the same type."""
    from trainer.callbacks.base import Callback

    given = module.configure_callbacks()
    extra = [given] if isinstance(given, Callback) else list(given or [])
    bad = [type(cb).__name__ for cb in extra if not isinstance(cb, Callback)]
    if bad:
        raise TypeError(f"configure_callbacks() must return Callback instances; got {', '.join(bad)}.")
    if extra:
        trainer.set_callbacks(
            [cb for cb in trainer.callbacks if not any(type(cb) is type(new) for new in extra)] + extra
        )


def _prepare_data(trainer: TrainerView, module: Module, datamodule: Any) -> None:
    """Downloads and preprocessing run once per machine (or once per job with ``prepare_data_per_node =
    False``, for a shared file system), before any rank reads the data; the DataModule's first."""
    strategy = trainer.strategy
    for owner in (datamodule, module):
        if owner is None or not callable(getattr(owner, "prepare_data", None)):
            continue
        zero = strategy.local_rank == 0 if getattr(owner, "prepare_data_per_node", True) else strategy.is_global_zero
        if zero and owner is datamodule:
            hooks.call_datamodule(trainer, datamodule, "prepare_data")
        elif zero:
            owner.prepare_data()
    strategy.barrier()
