"""What the fit loop builds once per epoch or fit and reads per batch: the stop votes of several ranks,
the calls a batch makes, the outputs ``on_train_batch_end`` gets, Lightning's validation interval
and the hyper-parameters the loggers get."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.loops.batches import transfer

if TYPE_CHECKING:
    from trainer.loops.training import AutomaticStep, ManualStep
    from trainer.module import Module
    from trainer.strategies.base import Strategy
    from trainer.view import TrainerView

SIGNAL_CHECK_EVERY = 8  # batches between the ranks' agreement on a received signal


class StopVotes:
    """Several ranks agree on a stop signal every ``SIGNAL_CHECK_EVERY`` batches without waiting for it:
    the vote started after one batch is read after the next, its latency hidden behind that batch.

    Every rank starts and reads each vote at the same batch, so all stop at the same one (at most
    ``SIGNAL_CHECK_EVERY + 1`` batches after the signal); the epoch's end decides once more, waiting.
    """

    def __init__(self, strategy: Strategy) -> None:
        self.start = strategy.start_boolean_decision
        self.pending: Callable[[], bool] | None = None

    def after_batch(self, batch_idx: int, stop: bool) -> bool:
        pending = self.pending
        if pending is not None:
            self.pending = None
            return pending()
        if batch_idx % SIGNAL_CHECK_EVERY == 0:
            self.pending = self.start(stop)
        return False

    def finish(self) -> None:
        """Read a vote still open when the loop ended (its answer is asked again at the epoch's end)."""
        if self.pending is not None:
            self.pending()
            self.pending = None


class BatchCalls:
    """What a training batch calls and reads, looked up once per epoch; nothing for what cannot happen
    (no loggers to flush, no validation or plateau scheduler that could fall due)."""

    def __init__(self, trainer: TrainerView, step: AutomaticStep | ManualStep, followups: bool) -> None:
        self.to_device = transfer(trainer)
        self.batch_start = hooks.resolved(trainer, "on_train_batch_start")
        self.batch_end = hooks.resolved(trainer, "on_train_batch_end")
        self.flush = trainer.metric_log.flush_loggers if trainer.loggers and trainer.is_global_zero else None
        self.followups = followups
        self.step = step.entry()
        if trainer.profiler is not None:
            self.step = trainer.profiler.timed("run_training_batch", self.step)
            if self.to_device is not None:
                self.to_device = trainer.profiler.timed("transfer_batch_to_device", self.to_device)
        self.check_nonfinite = step.check_nonfinite
        self.step_loss = lambda: step.step_loss
        self.results = trainer.metric_log.results  # the epoch's; a validation puts it back when it ends
        self.log_every = trainer.log_every_n_steps
        self.max_steps = trainer.max_steps if trainer.max_steps >= 0 else math.inf
        self.step_end = trainer.metric_log.step_end

    def publish_step(self, write: bool) -> bool:
        """A batch that stepped: callbacks see its values now; the loggers get them (``write``) after its hooks."""
        if write:
            self.check_nonfinite()
        if write or self.results.step_values:
            self.step_end()
        return write


def logged_hparams(module: Module, datamodule: Any) -> dict[str, Any]:
    """The module's and the DataModule's hyper-parameters saved by ``save_hyperparameters`` (``logger=False``
    keeps either out; the automatic record stays in checkpoints); a name both hold with different values is an
    error, as in Lightning."""
    state = module._hparams_state()
    logged = dict(module.hparams_initial) if state.log and state.explicit else {}
    saved = getattr(datamodule, "_hparams_state", lambda: None)()
    if saved is None or not (saved.log and saved.explicit):
        return logged
    extra = dict(datamodule.hparams_initial)
    clash = sorted(k for k in logged.keys() & extra.keys() if logged[k] != extra[k])
    if clash:
        raise ValueError(
            f"the hyper-parameters {clash} are saved by both {type(module).__name__} and {type(datamodule).__name__} "
            "with different values; rename one, or save_hyperparameters(ignore=...) it in one of them."
        )
    return {**logged, **extra}


def log_hparams(trainer: TrainerView, module: Module, datamodule: Any) -> None:
    """Lightning's hyper-parameter logging at a stage's start (every stage: fit, validate, test, predict), on
    global rank zero; nothing when nothing was saved (no hparams.yaml then)."""
    if not trainer.is_global_zero:
        return
    params = {**logged_hparams(module, datamodule), **({"config": trainer.config} if trainer.config else {})}
    for lg in trainer.loggers if params else ():
        lg.log_hyperparams(params)


def batch_end_outputs(output: Any, loss: torch.Tensor | None) -> Any:
    """What ``on_train_batch_end`` gets, as in Lightning: ``{"loss": <detached loss>, **extras}``."""
    if isinstance(output, dict):
        return {**output, "loss": output["loss"].detach()} if "loss" in output else output
    if isinstance(output, torch.Tensor):
        return {"loss": output.detach()}
    if loss is not None and output is not None:
        return {"loss": loss.detach()}
    return {} if output is None else output


def val_check_batch(interval: int | float, num_batches: int | float, every_n_epochs: int | None) -> int | float:
    """Training batches between validations (Lightning's ``val_check_batch``)."""
    if isinstance(interval, int) and not isinstance(interval, bool):
        if math.isfinite(num_batches) and interval > num_batches and every_n_epochs is not None:
            raise ValueError(
                f"val_check_interval={interval} is more than the {int(num_batches)} training batches of an epoch; "
                "validate less often with check_val_every_n_epoch, or count across epochs with "
                "check_val_every_n_epoch=None."
            )
        return interval
    if math.isinf(num_batches):
        if interval != 1.0:
            raise ValueError(
                f"val_check_interval={interval} is a fraction of an epoch, but the training loader has no length; "
                "give an int (every N batches) or 1.0 (at the end of the data)."
            )
        return math.inf
    return max(1, int(num_batches * interval))
