"""Validation, test and prediction: every sample once across ranks, drawing from the RNG as Lightning does.

The first loader's iterator is created before ``on_<stage>_start`` (Lightning's point: its ``iter()``
draws the DataLoader's base seed from the default generator), and the draws stay: a validation during
``fit`` moves the training's stream on as it does under Lightning. Only the sanity check is isolated
(``FitLoop``), as Lightning's is.

Hooks in Lightning's order: ``on_<stage>_model_eval``, ``on_<stage>_start``,
``on_<stage>_epoch_start``, per batch the transfer hooks, ``on_<stage>_batch_start``, the step and
``on_<stage>_batch_end``, then ``on_<stage>_epoch_end``, the epoch's metrics, ``on_<stage>_end``; then each
submodule's mode as it was before (or ``on_<stage>_model_train`` where the module overrides it, but for predict).
Several loaders run one after the other; the step gets ``dataloader_idx`` and each loader's metrics are kept apart
(``name/dataloader_idx_<i>``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import torch

import trainer.data as data
import trainer.loops.hooks as hooks
from trainer.data.combined import CombinedBatches, ShapedLoaders, as_batches, as_given, map_loaders
from trainer.data.device import transfer
from trainer.loops.batches import check_dataloader_idx, step_with_index
from trainer.module import Module
from trainer.overrides import overrides
from trainer.signals import start_iterator

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

EvalStage = Literal["validation", "test", "predict"]
_STEP = {"validation": "validation_step", "test": "test_step", "predict": "predict_step"}


class EvaluationLoop:
    """Runs ``validation_step``, ``test_step`` or ``predict_step`` over this rank's share of each loader."""

    def __init__(self, trainer: TrainerView, stage: EvalStage) -> None:
        self.trainer = trainer
        self.stage = stage
        self.loaders: list[Iterable[Any]] = []  # this rank's share of each loader
        self.num_batches: list[int | float] = []  # Lightning's count: a CombinedLoader's each inner loader
        self.totals: list[int | float] = []  # batches each loader of ``loaders`` runs
        self.predictions: list[list[Any]] = []
        self.seen: list[int] = []  # batches per loader since setup: the step of their on_step values

    def setup(self, loaders: list[Iterable[Any]], limit: int | float | None) -> None:
        """Shard each loader without padding; count its batches under ``limit_*_batches``."""
        trainer = self.trainer
        shard = functools.partial(
            data.prepare_eval_loader,
            **trainer.strategy.distributed_sampler_kwargs,
            use_distributed_sampler=trainer.use_distributed_sampler,
        )
        placed = [as_batches(map_loaders(v, shard)) for v in loaders]  # a CombinedLoader's each sharded
        self.loaders = ShapedLoaders(placed, getattr(loaders, "unflatten", list))
        counts = [_count(loader, limit, self.stage) for loader in self.loaders]
        self.num_batches = [n for inner, _ in counts for n in inner]
        self.totals = [total for _, total in counts]
        self.seen = [0 for _ in self.loaders]

    @property
    def given(self) -> Any:
        """This stage's loaders as they were given (one, a list or a dict of them), placed; None before setup."""
        return as_given(self.loaders)

    def run(
        self,
        max_batches: int | None = None,
        before_end: Callable[[], None] | None = None,
        write: bool = True,
        keep_predictions: bool = False,
    ) -> list[dict[str, float]]:
        """One pass, hooks included, under ``torch.no_grad`` (``inference_mode``: ``torch.inference_mode``), as
        Lightning's; returns each loader's metrics. ``before_end`` runs before ``on_<stage>_end``."""
        trainer = self.trainer
        with _no_grad(trainer.inference_mode and trainer.strategy.supports_inference_mode):
            return self._run(max_batches, before_end, write, keep_predictions)

    def _run(
        self, max_batches: int | None, before_end: Callable[[], None] | None, write: bool, keep_predictions: bool
    ) -> list[dict[str, float]]:
        trainer, stage = self.trainer, self.stage
        module = trainer.lightning_module
        previous = trainer.metric_log.start(stage, len(self.loaders))
        started = self.loaders[0] if self.loaders else None
        if started is not None:  # Lightning calls each sampler's set_epoch with the current epoch
            data.set_epoch(started, trainer.current_epoch)
        first = start_iterator(started) if started is not None else None
        modes = {name: sub.training for name, sub in module.named_modules()}  # each submodule's own mode
        getattr(module, f"on_{stage}_model_eval")()
        hooks.call(trainer, f"on_{stage}_start")
        hooks.call(trainer, f"on_{stage}_epoch_start")
        if self.loaders and self.loaders[0] is not started:  # a hook set new loaders up (BatchSizeFinder)
            first = None
        self.predictions = [[] for _ in self.loaders]
        try:
            for idx, loader in enumerate(self.loaders):
                total = self.totals[idx] if max_batches is None else min(max_batches, self.totals[idx])
                self._run_loader(idx, loader, total, keep_predictions, first if idx == 0 else None)
        finally:
            trainer.metric_log.results.use_loader(None)  # what on_<stage>_epoch_end logs is every loader's
        hooks.call(trainer, f"on_{stage}_epoch_end")
        results = trainer.metric_log.results
        metrics = trainer.metric_log.epoch_end(trainer.current_epoch, trainer.fit_loop.logger_step(), write=write)
        trainer.metric_log.flush_loggers()
        if before_end is not None:
            before_end()
        hooks.call(trainer, f"on_{stage}_end")
        _restore_modes(module, stage, modes)
        trainer.metric_log.resume(previous)
        return results.per_loader(metrics)

    def _run_loader(
        self, idx: int, loader: Iterable[Any], total: int | float, keep: bool, started: Iterator[Any] | None
    ) -> None:
        trainer, stage = self.trainer, self.stage
        module = trainer.lightning_module
        results = trainer.metric_log.results
        results.use_loader(idx)
        several = len(self.loaders) > 1
        user_step = getattr(module, _STEP[stage])
        count, owner = len(self.loaders), type(module).__name__
        step = step_with_index(trainer.strategy.step_function(stage), user_step, _STEP[stage], count, idx, owner)
        _check_batch_hooks(module, stage, count)
        step = trainer.precision_plugin.autocast(step)
        to_device = transfer(trainer, idx)
        if started is None:  # the first loader's sampler was told its epoch before its iterator started
            data.set_epoch(loader, trainer.current_epoch)
        batches: Iterable[Any] = start_iterator(loader) if started is None else started
        if math.isfinite(total):  # never one batch more than is run: the loader is not asked for it
            batches = itertools.islice(batches, int(total))
        if trainer.profiler is not None:  # Lightning's action names
            step = trainer.profiler.timed(f"[Strategy]{type(trainer.strategy).__name__}.{_STEP[stage]}", step)
            to_device = None if to_device is None else trainer.profiler.timed("transfer_batch_to_device", to_device)
            prefix = "val" if stage == "validation" else stage
            loop = "_PredictionLoop" if stage == "predict" else "_EvaluationLoop"
            batches = trainer.profiler.timed_iter(f"[{loop}].{prefix}_next", batches)
        extra = (idx,) if several else ()
        start = hooks.resolved(trainer, f"on_{stage}_batch_start")
        end = hooks.resolved(trainer, f"on_{stage}_batch_end")
        outputs = self.predictions[idx]
        write = not trainer.sanity_checking
        if not math.isinf(total):  # never load a batch past the limit (Lightning's loaders stop there too)
            batches = itertools.islice(batches, int(total))
        returned_none = False
        for batch_idx, batch in enumerate(batches):
            if to_device is not None:
                batch = to_device(batch)
            results.batch = batch
            for hook in start:
                hook(batch, batch_idx, *extra)
            output = step(batch, batch_idx)
            returned_none = returned_none or output is None
            if keep:
                outputs.append(output)
            for hook in end:
                hook(output, batch, batch_idx, *extra)
            if results.step_values:  # logged with on_step=True
                trainer.metric_log.eval_step_end(self.seen[idx], write)
            self.seen[idx] += write  # not in the sanity check
        results.batch = None
        if returned_none and stage == "predict":  # Lightning's warning: a forgotten `return` loses the predictions
            warnings.warn(
                "predict returned None if it was on purpose, ignore this warning...", UserWarning, stacklevel=2
            )


def _count(loader: Iterable[Any], limit: int | float | None, stage: EvalStage) -> tuple[list[int | float], int | float]:
    """A loader's batches under ``limit_*_batches``: the counts Lightning reports, and the batches it runs. A
    ``CombinedLoader`` (min_size, max_size_cycle, max_size) has the limit applied to each inner loader, as in
    Lightning; its mode then decides how many batches the pass yields (``trainer.num_val_batches`` is ``[3, 2]``
    for loaders of 3 and 2 batches, the ``max_size`` pass runs 3)."""
    if not isinstance(loader, CombinedBatches):
        total = data.count_batches(loader, limit, stage)
        return [total], total
    combined = loader.combined
    inner = [data.count_batches(each, limit, stage) for each in combined.flattened]
    combined.limits = inner
    return inner, combined.batches_per_epoch()


def _check_batch_hooks(module: Module, stage: EvalStage, count: int) -> None:
    """The module's batch start/end hooks take ``dataloader_idx`` as its steps must (Lightning's rule)."""
    prefix = "val" if stage == "validation" else stage
    for name in (f"on_{stage}_batch_start", f"on_{stage}_batch_end"):
        if overrides(module, name, Module):
            check_dataloader_idx(getattr(module, name), name, type(module).__name__, count, prefix)


def _restore_modes(module: Module, stage: EvalStage, modes: dict[str, bool]) -> None:
    """Lightning's end of an evaluation: each submodule back in the mode it had (a frozen one stays in eval), unless
    the module overrides ``on_validation_model_train``/``on_test_model_train``, which then decides (predict has no
    such hook in Lightning)."""
    from trainer.module import Module
    from trainer.overrides import overrides

    name = f"on_{stage}_model_train"
    if stage != "predict" and overrides(module, name, Module, through_wrappers=True):  # a wrapper is what it wraps
        getattr(module, name)()
        return
    for name, sub in module.named_modules():
        if name in modes:
            sub.training = modes[name]


def _no_grad(inference_mode: bool) -> contextlib.AbstractContextManager[Any]:
    return torch.inference_mode() if inference_mode else torch.no_grad()
