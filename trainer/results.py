"""What ``self.log`` collects: per-step values, epoch aggregates and torchmetrics objects.

Epoch means are weighted by batch size and kept as running (sum, count) tensors, so a value
logged with ``sync_dist=True`` is reduced once per epoch (sum the sums, sum the counts) and
equals the single-device value whatever the number of ranks or uneven last batches.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainer.strategies.base import Strategy

_REDUCE_FX = ("mean", "sum", "max", "min")


@dataclass
class _EpochValue:
    """Running aggregate of one logged name over an epoch."""

    reduce_fx: str
    sync_dist: bool
    total: torch.Tensor | None = None
    count: torch.Tensor | None = None
    metric: Any = None  # a torchmetrics Metric, computed at the epoch end

    def add(self, value: torch.Tensor, batch_size: int) -> None:
        value = value.detach().to(torch.float64)
        if self.reduce_fx == "mean":
            value = value * batch_size
        if self.total is None:
            self.total = value.clone()
            self.count = torch.tensor(float(batch_size), dtype=torch.float64, device=value.device)
            return
        if self.reduce_fx in ("mean", "sum"):
            self.total += value
        elif self.reduce_fx == "max":
            self.total = torch.maximum(self.total, value)
        else:
            self.total = torch.minimum(self.total, value)
        assert self.count is not None
        self.count += batch_size

    def compute(self, strategy: Strategy) -> torch.Tensor:
        if self.metric is not None:
            value: torch.Tensor = self.metric.compute()
            self.metric.reset()
            return value
        assert self.total is not None and self.count is not None
        total, count = self.total, self.count
        if self.sync_dist:
            op = "sum" if self.reduce_fx in ("mean", "sum") else self.reduce_fx
            total = strategy.reduce_metric(total, op)  # type: ignore[arg-type]
            count = strategy.reduce_metric(count, "sum")
        return total / count if self.reduce_fx == "mean" else total


@dataclass
class Results:
    """Collects one stage's logged values (a fresh instance per stage and epoch)."""

    stage: str = "train"
    strategy: Strategy | None = None
    step_values: dict[str, Any] = field(default_factory=dict)
    step_sync: set[str] = field(default_factory=set)
    unwritten: dict[str, torch.Tensor] = field(default_factory=dict)  # step values the loggers await
    epoch_values: dict[str, _EpochValue] = field(default_factory=dict)
    prog_bar: set[str] = field(default_factory=set)
    no_logger: set[str] = field(default_factory=set)
    step_only_metrics: dict[str, Any] = field(default_factory=dict)  # Metrics to reset at the epoch end
    batch: Any = None
    epoch_end: bool = False  # logging from on_train_epoch_end: defaults to on_epoch
    _lock: threading.Lock = field(default_factory=threading.Lock)  # DP replicas log from threads

    def log(
        self,
        name: str,
        value: Any,
        on_step: bool | None,
        on_epoch: bool | None,
        prog_bar: bool,
        logger: bool,
        sync_dist: bool,
        batch_size: int | None,
        reduce_fx: str,
    ) -> None:
        training = self.stage == "train" and not self.epoch_end
        on_step = training if on_step is None else on_step
        on_epoch = (not training) if on_epoch is None else on_epoch
        if reduce_fx not in _REDUCE_FX:
            raise ValueError(f"self.log({name!r}, reduce_fx={reduce_fx!r}): choose one of {', '.join(_REDUCE_FX)}.")
        if not (on_step or on_epoch):
            raise ValueError(f"self.log({name!r}) with on_step=False and on_epoch=False would record nothing.")
        both = on_step and on_epoch  # then the keys are name_step and name_epoch
        keys = {f"{name}_step", f"{name}_epoch"} if both else {name}
        with self._lock:
            self._record(name, value, on_step, on_epoch, sync_dist, batch_size, reduce_fx)
            if prog_bar:
                self.prog_bar.update(keys)
            if not logger:
                self.no_logger.update(keys)

    def _record(
        self,
        name: str,
        value: Any,
        on_step: bool,
        on_epoch: bool,
        sync: bool,
        batch_size: int | None,
        fx: str,
    ) -> None:
        is_metric = hasattr(value, "compute") and hasattr(value, "reset")
        step_key = f"{name}_step" if on_step and on_epoch else name
        epoch_key = f"{name}_epoch" if on_step and on_epoch else name
        if on_step:
            step_value = getattr(value, "_forward_cache", None) if is_metric else value
            if step_value is not None:
                self.step_values[step_key] = _as_tensor(step_value)
                if sync:
                    self.step_sync.add(step_key)
        if not on_epoch:
            if is_metric:
                self.step_only_metrics[name] = value
            return
        entry = self.epoch_values.get(epoch_key)
        if entry is None:
            entry = self.epoch_values[epoch_key] = _EpochValue(fx, sync, metric=value if is_metric else None)
        if not is_metric:
            entry.add(_as_tensor(value), batch_size if batch_size is not None else _infer_batch_size(self.batch))

    def pop_step_metrics(self, strategy: Strategy) -> dict[str, torch.Tensor]:
        """Per-step values since the last call, reduced across ranks where asked."""
        values = self.step_values
        self.step_values = {}
        for key in self.step_sync & values.keys():
            values[key] = strategy.reduce_metric(values[key].detach().float(), "mean")
        return values

    def epoch_metrics(self, strategy: Strategy) -> dict[str, torch.Tensor]:
        """Compute every epoch aggregate (collective: every rank must call it)."""
        for metric in self.step_only_metrics.values():
            metric.reset()  # a Metric logged per step still starts each epoch afresh
        return {key: entry.compute(strategy) for key, entry in sorted(self.epoch_values.items())}


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"self.log expects a scalar, got a tensor of shape {tuple(value.shape)}.")
        return value.detach().reshape(())
    if isinstance(value, bool | int | float):
        return torch.tensor(float(value))
    raise TypeError(f"self.log expects a number, a scalar tensor or a torchmetrics Metric, got {type(value).__name__}.")


def _infer_batch_size(batch: Any) -> int:
    """Size of the first dimension of the first tensor in the batch (1 if none)."""
    from lightning_utilities.core.apply_func import apply_to_collection

    sizes: list[int] = []
    apply_to_collection(batch, torch.Tensor, lambda t: sizes.append(t.shape[0] if t.dim() else 1))
    return sizes[0] if sizes else 1
