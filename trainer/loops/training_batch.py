"""What a training batch calls around its step, looked up once per epoch, and what ``on_train_batch_end``
gets. The fit loop's batch runner (``FitLoop._batch_runner``) calls them in Lightning's order."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.data.device import transfer_with

if TYPE_CHECKING:
    from trainer.graphs.captured import CapturedStep
    from trainer.loops.step import TrainingStep
    from trainer.view import TrainerView

STOP_EPOCH = object()  # on_train_batch_start returned -1: the epoch ends here


class BatchCalls:
    """What a training batch calls and reads, looked up once per epoch; nothing for what cannot happen
    (no loggers to flush, no validation or plateau scheduler that could fall due)."""

    def __init__(
        self, trainer: TrainerView, step: TrainingStep, after_batch_work: bool, captured: CapturedStep | None = None
    ) -> None:
        mover = trainer.strategy.batch_mover()
        self.to_device = transfer_with(trainer, mover)
        if captured is not None and self.to_device is mover:  # the plain transfer (no hook): one copy per batch,
            self.to_device = captured.mover(mover)  # from the loader's (pinned) memory into the graph's inputs
        self.batch_start = hooks.resolved(trainer, "on_train_batch_start")
        self.batch_end = hooks.resolved(trainer, "on_train_batch_end")
        self.flush = trainer.metric_log.flush_loggers if trainer.loggers and trainer.is_global_zero else None
        self.after_batch_work = after_batch_work  # a validation or a plateau scheduler can fall due after a batch
        self.automatic = step.automatic
        self.step = step.batch_step() if captured is None else captured.batch_step()
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

    def end_batch(self, output: Any, batch: Any, batch_idx: int, publish: bool) -> None:
        """``on_train_batch_end``; with ``publish`` (a step that the loggers do not get now), what it logged
        reaches ``callback_metrics`` at once, as in Lightning (the loggers get it at the next write)."""
        outputs = batch_end_outputs(output, self.step_loss())
        for hook in self.batch_end:
            hook(outputs, batch, batch_idx)
        if publish and self.results.step_values:
            self.step_end()

    def publish_step(self, write: bool) -> None:
        """A batch that stepped and logged, or whose values the loggers get (``write``, after its hooks):
        callbacks see its values now."""
        if write:
            self.check_nonfinite()  # the values reach the host now anyway
        self.step_end()


def batch_end_outputs(output: Any, loss: torch.Tensor | None) -> Any:
    """What ``on_train_batch_end`` gets, as in Lightning: ``{"loss": <detached loss>, **extras}``."""
    if isinstance(output, dict):
        return {**output, "loss": output["loss"].detach()} if "loss" in output else output
    if isinstance(output, torch.Tensor):
        return {"loss": output.detach()}
    if loss is not None and output is not None:
        return {"loss": loss.detach()}
    return {} if output is None else output
