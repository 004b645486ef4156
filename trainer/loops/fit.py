"""The fit loop: epochs of training batches, validation when due, in Lightning's order.

``FitLoop`` owns what a fit changes: its counters (``Progress``, changed through its own methods from
here and from the step), the optimizers, the training step, the training data and its position, the
stop signals. The Trainer shows them read-only. Per batch: the transfer hooks,
``on_train_batch_start``, the step (``trainer.loops.step``), ``on_train_batch_end``, then the
after-batch work: validation if due (``val_check_interval``) and plateau schedulers. Per epoch:
``on_train_epoch_start``, the batches (never one more than is trained on), ``on_train_epoch_end``
(monitoring callbacks last), epoch schedulers. A checkpoint taken at any of these points resumes
exactly: ``Progress`` records which after-batch work had run.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import trainer.loops.hooks as hooks
from trainer.data.train_source import TrainSource
from trainer.flags import max_epochs_limit
from trainer.loops.checks import (
    check_output_folders,
    warn_eval_modules,
    warn_logging_gap,
)
from trainer.loops.evaluation import EvaluationLoop
from trainer.loops.fit_validation import FitValidation
from trainer.loops.hparams_log import log_hyperparams
from trainer.loops.lifecycle import running
from trainer.loops.optimization import Optimization, configure_optimizers
from trainer.loops.progress import Progress
from trainer.loops.rank_state import load_rank_state, rank_state
from trainer.loops.step import TrainingStep, read_window
from trainer.loops.stop_signal import StopSignal, StopVotes
from trainer.loops.training_batch import STOP_EPOCH, BatchCalls, batch_runner
from trainer.signals import catch_stop_signals

if TYPE_CHECKING:
    from trainer.checkpoint.restore import Restore
    from trainer.graphs.captured import CapturedStep
    from trainer.module import Module
    from trainer.view import TrainerView


class FitLoop:
    """``Trainer.fit``: set-up, sanity check, epochs; a stop signal saves ``interrupted.ckpt`` and exits."""

    def __init__(self, trainer: TrainerView, max_epochs: int | None) -> None:
        self.trainer = trainer
        self.max_epochs = max_epochs  # as given until a fit starts, then the limit it runs (-1: none)
        self.progress = Progress()
        self.optimization: Optimization | None = None
        self.step: TrainingStep | None = None
        self.captured: CapturedStep | None = None  # the step as a CUDA graph (Trainer(cuda_graph=True))
        self.validation = FitValidation(trainer, self.progress, self._can_stop)
        self.data = TrainSource(trainer, self.progress, self._use_train_batches)  # the training data and its position
        self.stop = StopSignal(trainer)
        self.resumed = False
        self._restore: Restore | None = None  # read; its training phase (optimizer states) not loaded yet
        self.loader_restarts = False  # resuming a Lightning mid-epoch checkpoint: the loader starts over, as there
        self.is_last_batch = False  # the batch being trained is the epoch's last
        self.after_batch_due = False  # a batch stepped; its after-batch work (validation, plateau schedulers) is due
        self.warned_none_batch = False  # the loader yielded None this fit (training_batch.batch_runner)
        self.window_grads_restored = False  # the checkpoint's open accumulation window put its gradients back

    @property
    def train_dataloader(self) -> Iterable[Any] | None:
        return self.data.loader

    @property
    def num_training_batches(self) -> int | float:  # the data's, after limit_train_batches
        return self.data.num_batches

    @property
    def val_loop(self) -> EvaluationLoop:
        return self.validation.loop

    def run(self, module: Module, train: Any, val: Any, datamodule: Any, ckpt_path: Any) -> None:
        trainer = self.trainer
        self._reset()
        ckpt_path = trainer.state.checkpoint_for("fit", ckpt_path)
        from trainer.callbacks.timer import Timer  # only here: `import trainer` stays cheap

        timed = any(isinstance(cb, Timer) for cb in trainer.callbacks)
        self.max_epochs = max_epochs_limit(self.max_epochs, trainer.max_steps, timed)
        with running(trainer, module, "fit", datamodule):
            self._setup(module, train, val, datamodule, ckpt_path)
            hooks.call(trainer, "on_fit_start")
            log_hyperparams(trainer, module, datamodule)  # Lightning's place: after on_fit_start
            self._restore_optimizers()
            if not self.window_grads_restored:
                module.zero_grad()  # Lightning's, as each stage starts; a window a checkpoint left open keeps its own
            if not self.resumed:
                self.validation.sanity_check()  # requests the validation loaders
            self._place_train_data()
            if not self.resumed:
                self.data.start_first_epoch()
            self.validation.before_training()
            warn_eval_modules(module)
            hooks.call(trainer, "on_train_start")
            anomaly = torch.autograd.set_detect_anomaly(True) if trainer.detect_anomaly else contextlib.nullcontext()
            with catch_stop_signals(self.stop.names(), self.stop.on_signal), anomaly:
                self._run_epochs()
                assert self.step is not None
                self.step.check_nonfinite()  # fit's end: a deferred non-finite loss surfaces here at the latest
                if self.captured is not None:  # its graphs go; rank zero says what ran each batch
                    self.captured.close()
                if self.stop.received is not None:
                    self.stop.save_and_exit(self.progress)
            hooks.call(trainer, "on_train_end")
            hooks.call(trainer, "on_fit_end")

    def _reset(self) -> None:
        self.progress = Progress()
        self._restore = None
        self.loader_restarts = False
        self.validation = FitValidation(self.trainer, self.progress, self._can_stop)
        self.data = TrainSource(self.trainer, self.progress, self._use_train_batches)
        self.stop = StopSignal(self.trainer)
        self.resumed = False
        self.warned_none_batch = False
        self.window_grads_restored = False

    def _setup(self, module: Module, train: Any, val: Any, datamodule: Any, ckpt_path: Any) -> None:
        from trainer.checkpoint.elastic import fit_checkpoint_path
        from trainer.checkpoint.restore import Phase
        from trainer.checkpoint.state import open_checkpoint
        from trainer.hparams import drop_unpicklable

        trainer = self.trainer
        strategy = trainer.strategy
        if trainer.compile:
            module.compile()  # in place: state_dict keys stay free of "_orig_mod."
        module.configure_model()
        drop_unpicklable(module)  # Lightning's: what pickle cannot write leaves hparams, with a warning
        path = fit_checkpoint_path(trainer, ckpt_path)  # after an elastic restart: this run's newest
        self.data.setup(module, train, val, datamodule)
        assert self.data.source is not None
        self.validation.setup(self.data.source.request_val, self.data.source.defines_val)
        check_output_folders(trainer)
        restore = open_checkpoint(trainer, path, fitting=True) if path is not None else None
        on_meta = strategy.loads_weights_after_setup(module)  # built on the meta device: no memory before setup
        if restore is not None:
            trainer.state.loaded(restore.path)
            if not on_meta:
                restore.load(Phase.MODULE)
        trainer.precision_plugin.convert_module(module)
        strategy.setup_module(module)
        if restore is not None and on_meta:
            restore.load(Phase.MODULE)
        optimizers, schedulers = configure_optimizers(module)
        self.optimization = Optimization(trainer, optimizers, schedulers)
        self.step = TrainingStep(trainer, self.progress, self.optimization)
        self.captured = None
        if trainer.cuda_graph:  # before the optimizer states load: they load into the capturable optimizer
            from trainer.graphs.captured import capture_step

            self.captured = capture_step(trainer, self.step)
        self.data.draw_data_seed()
        if restore is not None:
            restore.load(Phase.LOOP)
            self._restore = restore  # optimizer states: after on_fit_start
            self.resumed = True

    def _place_train_data(self) -> None:
        """The training loader, requested where Lightning requests it (after the sanity check, before
        ``on_train_start``; once: one requested earlier, e.g. for ``estimated_stepping_batches``, is kept) and
        placed. A resumed run requests the loaders its epoch ran on as they were requested then, the hooks seeing
        that epoch as ``current_epoch``: epoch 0's, or those an earlier epoch's start requested (again from the
        RNG they started from)."""
        first = self.data.epoch_of_resumed_loaders() if self.resumed else None
        with self.progress.showing_epoch(first or 0):
            if first is not None:
                self.data.request_loaders_of(first)
            else:
                self.data.requested()
        if self.data.place():  # the resumed epoch's data changed: it trains again from its first batch
            self.progress.restart_epoch()
            if self.window_grads_restored:  # and its open window with it
                self.trainer.lightning_module.zero_grad()
                self.window_grads_restored = False
        warn_logging_gap(self.trainer, self.num_training_batches)

    def _restore_optimizers(self) -> None:
        """Lightning's order: callbacks' ``on_fit_start`` first, so they can rebuild what the saved states
        hold (``BaseFinetuning`` re-adds the parameter groups it added) before the states are loaded."""
        if self._restore is not None:
            from trainer.checkpoint.restore import Phase

            restore, self._restore = self._restore, None
            restore.load(Phase.TRAINING)
            if self.trainer.is_global_zero:
                progress = self.progress
                print(
                    f"steadytrain: resumed from {restore.path} at epoch {progress.epoch}, step {progress.global_step}."
                )

    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the whole fit will take (Lightning's rule), known from ``configure_optimizers`` on."""
        trainer = self.trainer
        no_step_limit = math.inf if trainer.max_steps == -1 else trainer.max_steps
        if self.max_epochs is None or self.max_epochs == -1:
            return no_step_limit
        batches = self.data.batches_per_epoch()
        if math.isinf(batches):
            return no_step_limit
        steps = read_window(trainer, batches).steps() * max(self.max_epochs, 1)
        return min(steps, trainer.max_steps) if trainer.max_steps != -1 else steps

    def _use_train_batches(self, num_training_batches: int | float) -> None:
        """How often validation runs in the (re)requested training data's epochs."""
        self.validation.use_train_batches(num_training_batches)

    def _run_epochs(self) -> None:
        trainer, progress = self.trainer, self.progress
        self.data.start_resumed_workers(self.resumed)
        while True:
            if 0 <= trainer.max_steps <= progress.global_step or self.num_training_batches == 0:
                break  # max_steps reached, or limit_train_batches=0: Lightning's "No training batches"
            if trainer.should_stop and self._can_stop():  # e.g. a resumed run whose max_time is spent
                break
            if 0 <= self.max_epochs <= progress.epoch:  # type: ignore[operator]
                break
            completed = self._run_epoch()
            # A signal may have reached some ranks after their last agreement: decide together.
            if trainer.strategy.reduce_boolean_decision(self.stop.received is not None):
                self.stop.received = self.stop.received or "SIGTERM"
                break
            self._end_epoch(completed)
            if not completed:  # max_steps or a stop mid-epoch: the position stays mid-epoch
                break
            progress.next_epoch()

    def _run_epoch(self) -> bool:
        """Train one epoch from ``progress.batches_done``; returns whether it ran to its end."""
        trainer, progress = self.trainer, self.progress
        assert self.step is not None
        skip = progress.batches_done
        if self.loader_restarts:  # Lightning's resume reads its loader from the start
            progress.loader_starts_at(skip)
            self.loader_restarts = False
        data_skip = skip - progress.loader_offset
        loader = self.data.epoch_loader(progress.epoch, data_skip)
        trainer.metric_log.start("train")
        if skip == 0:
            hooks.call(trainer, "on_train_epoch_start")
        self.step.start_epoch(self.num_training_batches)
        calls = BatchCalls(trainer, self.step, self._after_batch_work_possible(), self.captured)
        batches = self._batches(loader, data_skip, skip)
        if skip:  # what was due after the checkpoint's batch and had not run, at the RNG state it had then
            self._after_batch(skip - 1)
        votes = StopVotes(trainer.strategy) if trainer.world_size > 1 else None
        completed = self._batch_loop(calls, batches, skip, votes)
        if votes is not None:
            votes.finish()  # not on an exception: another rank may be gone, and the job ends anyway
        return completed

    def _batch_loop(self, calls: BatchCalls, batches: Iterator[Any], skip: int, votes: StopVotes | None) -> bool:
        progress, trainer, signal = self.progress, self.trainer, self.stop
        limit, after_batch_work, max_steps = self.num_training_batches, calls.after_batch_work, calls.max_steps
        train_batch = batch_runner(self, calls)
        batch_idx = skip - 1
        for batch_idx, batch in enumerate(batches, start=skip):
            if train_batch(batch, batch_idx) is STOP_EPOCH:
                self.step_epoch_schedulers(plateau=False)
                return True
            if after_batch_work:
                self._after_batch(batch_idx)
            self.after_batch_due = False
            stop = signal.received is not None
            if votes is not None:
                stop = votes.after_batch(batch_idx, stop)
            if stop:
                self.stop.received = self.stop.received or "SIGTERM"
                return False
            if trainer.should_stop and self._can_stop():
                return True  # Lightning's rule: an epoch stopped by should_stop counts as done (current_epoch moves on)
            if progress.global_step >= max_steps:
                return batch_idx + 1 >= limit  # max_steps mid-epoch: the position stays there, for an exact resume
        if batch_idx < 0:  # no batch at all: Lightning ends the epoch (a used-up iterator is refused)
            self.data.no_batches(progress.epoch)
            return True
        if math.isinf(limit):  # a loader without a length: its last batch is known only now
            self._validate_after_unsized_epoch(batch_idx)
            self.step_epoch_schedulers(plateau=False)
        return True

    def _validate_after_unsized_epoch(self, batch_idx: int) -> None:
        """Lightning validates after the last batch of an epoch whose length was not known; that batch is known only
        once the data ran out. (Before the epoch schedulers step, unlike Lightning's order, so a checkpoint saved by
        this validation resumes without stepping them twice.)"""
        progress, step = self.progress, self.step
        assert step is not None
        self.data.ran_out()  # a checkpoint saved from here on resumes past this epoch's data
        if self.validation.due(batch_idx, data_ended=True) and not progress.validated_last_batch:
            step.check_nonfinite()
            self.validation.run(zero_grad=step.window.ends(progress.batches_done - 1))

    def _batches(self, loader: Iterable[Any], data_skip: int, skip: int) -> Iterator[Any]:
        """The epoch's batches from ``skip`` up to ``limit_train_batches``, never one more: the loader is not
        asked for a batch that will not be trained on. Timed as Lightning's ``train_dataloader_next``."""
        batches = self.data.batches(loader, self.progress.epoch, data_skip)
        limit, profiler = self.num_training_batches, self.trainer.profiler
        if math.isfinite(limit):
            batches = itertools.islice(batches, max(int(limit) - skip, 0))
        action = "[_TrainingEpochLoop].train_dataloader_next"
        return batches if profiler is None else profiler.timed_iter(action, batches)

    def _after_batch(self, batch_idx: int) -> None:
        """A batch's after-batch work: validation if due, then plateau schedulers; each at most once per batch."""
        progress, step = self.progress, self.step
        assert step is not None and self.optimization is not None
        if progress.batch_closed:
            return
        if self.validation.due(batch_idx) and not progress.validated_last_batch:
            step.check_nonfinite()  # a validation reads values on the host anyway
            self.validation.run(zero_grad=step.window.ends(progress.batches_done - 1))
        if step.automatic and step.window.ends(batch_idx):
            self.optimization.step_schedulers("step", batch_idx, plateau=True)
        progress.close_batch()

    def _after_batch_work_possible(self) -> bool:
        """Whether anything can fall due after a batch: a validation, or a plateau scheduler stepped per step."""
        plateau = self.optimization is not None and any(
            c.reduce_on_plateau and c.interval == "step" for c in self.optimization.lr_scheduler_configs
        )
        return plateau or self.validation.may_run()

    def logger_step(self) -> int:
        """The step the loggers get, Lightning's: the batches that stepped (in manual optimization every batch),
        the current one counted once its validation and plateau schedulers ran (so they log at the step before)."""
        automatic = self.step is None or self.step.automatic
        return (self.progress.global_step if automatic else self.progress.total_batches) - self.after_batch_due

    def _end_epoch(self, completed: bool) -> None:
        """``on_train_epoch_end`` (monitoring callbacks after the module, which may log), with the epoch's
        metrics and, for an epoch that ran to its end, the epoch schedulers before those callbacks."""
        trainer, progress = self.trainer, self.progress
        assert self.step is not None
        self.step.end_epoch(progress.batches_done, report=trainer.is_global_zero)
        trainer.metric_log.before_epoch_end_hooks()  # every on_train_epoch_end reads this epoch's values
        trainer.metric_log.results.start_epoch_end()  # self.log in the hook defaults to on_epoch, as in Lightning
        with progress.ending_epoch(completed):
            between = functools.partial(self._epoch_metrics, completed)
            hooks.call_epoch_end(trainer, "on_train_epoch_end", between=between)
            trainer.metric_log.flush_loggers()

    def _epoch_metrics(self, completed: bool) -> None:
        """The epoch's metrics, then the plateau schedulers that monitor them (before the monitoring
        callbacks save, so a checkpoint holds the stepped scheduler)."""
        last_stepped = self.logger_step() - (not self.after_batch_due)  # Lightning's: the epoch's last stepped batch
        self.trainer.metric_log.epoch_end(self.progress.epoch, last_stepped)
        if completed:
            self.step_epoch_schedulers(plateau=True)

    def step_epoch_schedulers(self, plateau: bool) -> None:
        if self.step is not None and self.step.automatic:
            assert self.optimization is not None
            self.optimization.step_schedulers("epoch", self.progress.epoch, plateau)

    def _can_stop(self) -> bool:
        trainer, progress = self.trainer, self.progress
        return progress.epoch >= (trainer.min_epochs or 0) and progress.global_step >= (trainer.min_steps or 0)

    # ---- what a checkpoint records of the data position -------------------------------------------------
    def data_state(self) -> dict[str, Any]:
        return self.data.data_state()

    def load_data_state(self, state: dict[str, Any], path: Path) -> None:
        """The data position; ``loader_restarts``: the resumed epoch's loader starts from its first batch, where
        Lightning's own resume of a loader without ``state_dict`` goes on."""
        self.data.load_data_state(state, path)
        self.loader_restarts = bool(state.get("loader_restarts", False))

    def rank_state(self) -> dict[str, Any]:
        return rank_state(self.trainer, self.data, self.step, self.progress)

    def load_rank_state(self, ranks: list[dict[str, Any]], saved_world_size: int, path: Path) -> None:
        self.window_grads_restored = load_rank_state(self.trainer, self.data, self.progress, ranks, saved_world_size)

    def release(self) -> None:
        """After the run: the graph head kept between steps is only worth keeping between steps; graphs go."""
        if self.step is not None and self.step.step_loss is not None:
            self.step.step_loss = self.step.step_loss.detach()
        if self.captured is not None:
            self.captured.release()
