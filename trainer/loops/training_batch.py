"""One training batch: what it calls around its step, looked up once per epoch (``BatchCalls``), the runner that
calls them in Lightning's order (``batch_runner``), and what ``on_train_batch_end`` gets."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.data.device import transfer_with

if TYPE_CHECKING:
    from trainer.graphs.captured import CapturedStep
    from trainer.loops.fit import FitLoop
    from trainer.loops.step import TrainingStep
    from trainer.view import TrainerView

STOP_EPOCH = object()  # on_train_batch_start returned -1: the epoch ends here
SKIPPED = object()  # the loader yielded None: no step ran, on_train_batch_end gets None
NONE_BATCH = "train_dataloader yielded None. If this was on purpose, ignore this warning..."  # Lightning's text


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
        outputs = None if output is SKIPPED else batch_end_outputs(output, self.step_loss())
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


def batch_runner(loop: FitLoop, calls: BatchCalls) -> Callable[[Any, int], Any]:
    """One training batch of ``loop``, as a closure over what it reads (built once per epoch: locals cost less
    than attribute reads, and this runs every batch).

    A batch that is None (a ``collate_fn`` that drops one) runs neither ``on_train_batch_start`` nor the step, as
    in Lightning, which warns (once per fit here); it still counts as a batch and ``on_train_batch_end`` gets None.
    """
    progress, results, metric_log = loop.progress, calls.results, loop.trainer.metric_log
    to_device, step, flush = calls.to_device, calls.step, calls.flush
    batch_start, batch_end, log_every = calls.batch_start, calls.batch_end, calls.log_every
    manual = not calls.automatic  # Lightning logs its every batch
    limit, finish_batch = loop.num_training_batches, progress.finish_batch
    publish_step = calls.publish_step

    def train_batch(batch: Any, batch_idx: int) -> Any:
        if to_device is not None:
            batch = to_device(batch)
        results.batch = batch
        loop.is_last_batch = last = batch_idx + 1 >= limit
        steps_before = progress.global_step
        if batch is None:
            output = _skip_none_batch(loop)
        else:
            for hook in batch_start:
                if hook(batch, batch_idx) == -1:
                    return STOP_EPOCH
            output = step(batch, batch_idx)
        finish_batch()
        if last:
            loop.step_epoch_schedulers(plateau=False)  # Lightning: at the last batch, before its end hooks
        stepped = progress.global_step
        counted = progress.total_batches if manual else stepped  # Lightning's "batches that stepped"
        write = False
        if stepped != steps_before or manual:  # callbacks see every step's values; loggers every log_every_n_steps
            loop.after_batch_due = True
            write = log_every > 0 and counted % log_every == 0  # 0: never (Lightning's barebones)
            if write or results.step_values:
                publish_step(write)
        if batch_end:
            calls.end_batch(output, batch, batch_idx, loop.after_batch_due and not write)
        if write:
            metric_log.write_step(progress.epoch, counted - 1)  # Lightning's step: counted before it
        if flush is not None and stepped != steps_before:
            flush()  # after the batch-end hooks: what they log joins this step's row
        results.batch = None  # let the allocator reuse this batch's memory for the next one
        return output

    return train_batch


def _skip_none_batch(loop: FitLoop) -> object:
    if not loop.warned_none_batch:
        loop.warned_none_batch = True
        warnings.warn(NONE_BATCH, UserWarning, stacklevel=4)
    return SKIPPED


def batch_end_outputs(output: Any, loss: torch.Tensor | None) -> Any:
    """What ``on_train_batch_end`` gets, as in Lightning: ``{"loss": <detached loss>, **extras}``."""
    if isinstance(output, dict):
        return {**output, "loss": output["loss"].detach()} if "loss" in output else output
    if isinstance(output, torch.Tensor):
        return {"loss": output.detach()}
    if loss is not None and output is not None:
        return {"loss": loss.detach()}
    return {} if output is None else output
