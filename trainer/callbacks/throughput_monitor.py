"""``ThroughputMonitor``: log samples, batches, items and FLOPs per second for each stage, Lightning's names.

Each stage (``train``, ``validate``, ``test``, ``predict``) keeps a ``Throughput``; its metrics go to the loggers
as ``<stage><separator><name>`` on the logging steps (``log_every_n_steps``), from global rank zero. Timing a
CUDA step needs a synchronisation: a run with this callback pays it after each batch; a run without pays nothing.
``device/mfu`` needs the device's peak FLOPs, which steadytrain does not tabulate: pass ``available_flops``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trainer.callbacks.base import Callback
from trainer.callbacks.throughput import Throughput

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class ThroughputMonitor(Callback):
    """``batch_size_fn(batch)`` gives a batch's samples, ``length_fn(batch)`` its items (tokens, say; optional).
    A ``flops_per_batch`` attribute on the module (see ``trainer.utilities.measure_flops``) adds FLOPs.
    ``**kwargs`` go to ``Throughput``: ``window_size`` (100), ``separator`` ("/"), ``available_flops``."""

    def __init__(
        self, batch_size_fn: Callable[[Any], int], length_fn: Callable[[Any], int] | None = None, **kwargs: Any
    ) -> None:
        if not callable(batch_size_fn):
            raise TypeError(f"ThroughputMonitor(batch_size_fn={batch_size_fn!r}): give a function of the batch.")
        self.kwargs = kwargs
        self.available_flops: float | None = kwargs.pop("available_flops", None)
        Throughput(**kwargs)  # bad window_size/separator fail here, not at the first batch
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self._throughputs: dict[str, Throughput] = {}
        self._t0s: dict[str, float] = {}
        self._lengths: dict[str, int] = {}
        self._samples: dict[str, int] = {}
        self._batches: dict[str, int] = {}
        self._iters: dict[str, int] = {}  # evaluation batches over the Trainer's life: their logging step
        self._run: dict[str, int] = {}  # evaluation batches in this run: when to log
        self._module_has_flops: bool | None = None
        self._last_step = -1

    # ---- per stage ----------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """A new window for each entry point (fit: training and validation); an evaluation's counts carry on."""
        for name in ("train", "validate") if stage == "fit" else (stage,):
            self._throughputs[name] = Throughput(self.available_flops, trainer.world_size, **self.kwargs)

    def _start(self, trainer: Trainer, stage: str) -> None:
        if trainer.state.fn == "fit" or stage not in self._samples:
            self._throughputs[stage].reset()
            self._lengths[stage] = self._samples[stage] = self._batches[stage] = 0
        self._run[stage] = 0
        self._t0s[stage] = time.perf_counter()

    @torch.inference_mode()  # batch_size_fn/length_fn must not build a graph
    def _update(self, trainer: Trainer, pl_module: Module, batch: Any, stage: str) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # the time of the work queued, not of its queueing
        elapsed = time.perf_counter() - self._t0s[stage]
        if self.length_fn is not None:
            self._lengths[stage] += self.length_fn(batch)
        if self._module_has_flops is None:
            self._module_has_flops = hasattr(pl_module, "flops_per_batch")
            if not self._module_has_flops:
                warnings.warn(
                    "When using the `ThroughputMonitor`, you need to define a `flops_per_batch` attribute or property"
                    f" in {type(pl_module).__name__} to compute the FLOPs.",
                    stacklevel=2,
                )
        self._samples[stage] += self.batch_size_fn(batch)
        self._batches[stage] += 1
        self._throughputs[stage].update(
            time=elapsed,
            batches=self._batches[stage],
            samples=self._samples[stage],
            lengths=None if self.length_fn is None else self._lengths[stage],
            flops=getattr(pl_module, "flops_per_batch", None) if self._module_has_flops else None,
        )

    def _log(self, trainer: Trainer, stage: str, step: int, due: bool, epoch: int | None = None) -> None:
        if not trainer.loggers or not (due or trainer.should_stop):
            return
        throughput = self._throughputs[stage]
        metrics: dict[str, float] = {f"{stage}{throughput.separator}{k}": v for k, v in throughput.compute().items()}
        if epoch is not None:
            metrics["epoch"] = epoch
        for lg in trainer.loggers:
            lg.log_metrics(metrics, step=step)

    def _eval_batch_end(self, trainer: Trainer, pl_module: Module, batch: Any, stage: str) -> None:
        self._update(trainer, pl_module, batch, stage)
        self._iters[stage] = self._iters.get(stage, 0) + 1
        self._run[stage] += 1
        every = trainer.log_every_n_steps
        self._log(trainer, stage, self._iters[stage], bool(every) and self._run[stage] % every == 0)

    # ---- hooks --------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            self._last_step = trainer.global_step
            self._start(trainer, "train")

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not trainer.is_global_zero:
            return
        self._update(trainer, pl_module, batch, "train")
        step = trainer.global_step
        if step != self._last_step:  # an optimizer step ended the accumulation: its time includes the step
            self._last_step = step
            every = trainer.log_every_n_steps
            self._log(trainer, "train", step - 1, bool(every) and step % every == 0, trainer.current_epoch)

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._start(trainer, "validate")

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            self._eval_batch_end(trainer, pl_module, batch, "validate")

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        if not trainer.is_global_zero or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        if "train" not in self._t0s or "validate" not in self._t0s:
            return
        # the training clock skips the validation: move its start by the time validation took
        train_times = self._throughputs["train"]._time
        val_times = self._throughputs["validate"]._time
        train_end = self._t0s["train"] + (train_times[-1] if train_times else 0.0)
        gap = self._t0s["validate"] - train_end
        self._t0s["train"] += gap + (val_times[-1] if val_times else 0.0)

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            self._start(trainer, "test")

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if trainer.is_global_zero:
            self._eval_batch_end(trainer, pl_module, batch, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.is_global_zero:
            self._start(trainer, "predict")

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if trainer.is_global_zero:
            self._eval_batch_end(trainer, pl_module, batch, "predict")
