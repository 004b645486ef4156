"""What ``self.log`` collects in one stage: per-step values, epoch aggregates, torchmetrics objects.

Epoch means are weighted by batch size and kept as running (sum, count) tensors. At the epoch end
they are reduced across ranks (sum the sums, sum the counts) in one collective per reduction, so
an epoch value equals the single-device value whatever the number of ranks or uneven last
batches. As in Lightning, only ``sync_dist=True`` values are reduced; the others stay each rank's
own (with Lightning's warning, once per name, for an epoch value under several ranks).
"""

from __future__ import annotations

import math
import numbers
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from trainer.exceptions import MisconfigurationException
from trainer.log_rules import loggable_error

if TYPE_CHECKING:
    from trainer.strategies.base import ReduceOp, Strategy

REDUCE_FX = ("mean", "sum", "max", "min")
_CALLABLES: dict[Any, str] = {
    torch.mean: "mean",
    torch.sum: "sum",
    sum: "sum",
    torch.max: "max",
    max: "max",
    torch.min: "min",
    min: "min",
}


def parse_reduce_fx(name: str, reduce_fx: Any) -> str:
    """Lightning's accepted reductions: the names (any case, "avg" for "mean"), torch.mean/sum/max/min and the
    builtins sum/max/min. A custom reduction is a torchmetrics ``Metric``, as Lightning says too."""
    if isinstance(reduce_fx, str):
        fx = "mean" if reduce_fx.lower() == "avg" else reduce_fx.lower()
    else:
        fx = next((fx for fn, fx in _CALLABLES.items() if fn is reduce_fx), "")
    if fx not in REDUCE_FX:
        raise MisconfigurationException(
            f"self.log({name!r}, reduce_fx={reduce_fx!r}): only `self.log(..., reduce_fx={{min,max,mean,sum}})` are "
            "supported (or torch.mean, torch.sum, torch.max, torch.min); for a custom reduction log a torchmetrics "
            "Metric instead."
        )
    return fx


@dataclass
class _EpochValue:
    """Running aggregate of one logged name over an epoch."""

    reduce_fx: str
    sync: bool
    total: torch.Tensor | None = None
    count: torch.Tensor | None = None
    metric: Any = None  # a torchmetrics Metric, computed at the epoch end

    def add(self, value: torch.Tensor, batch_size: int) -> None:
        """Lightning's accumulation, op for op: the sum starts at 0 (-inf, inf for max, min) in the default
        float dtype and takes each value in its own (promoting), the count is an int64 tensor."""
        value = value.detach()
        if self.total is None:
            start = {"max": -math.inf, "min": math.inf}.get(self.reduce_fx, 0.0)
            # a fill, not torch.tensor(..., device=): that copies from the host and waits for the device
            self.total = torch.full((), start, dtype=default_float(), device=value.device)
            self.count = torch.zeros((), dtype=torch.int64, device=value.device)
        assert self.count is not None
        if self.reduce_fx == "mean":
            self.total = self.total + value * batch_size
        elif self.reduce_fx == "sum":
            self.total = self.total + value
        elif self.reduce_fx == "max":
            self.total = torch.maximum(self.total, value)
        else:
            self.total = torch.minimum(self.total, value)
        self.count = self.count + batch_size

    def value(self) -> torch.Tensor:
        assert self.total is not None and self.count is not None
        return self.total / self.count if self.reduce_fx == "mean" else self.total


@dataclass
class Results:
    """Collects one stage's logged values (a fresh instance per stage and epoch)."""

    stage: str = "train"
    num_dataloaders: int = 1
    dataloader_idx: int | None = None  # the evaluation loader running now; None in epoch-level hooks
    loaders_of: dict[str, set[int | None]] = field(default_factory=dict)  # key -> the loaders it was logged under
    step_values: dict[str, Any] = field(default_factory=dict)
    step_sync: dict[str, ReduceOp] = field(default_factory=dict)  # step key -> its reduce_fx across ranks
    epoch_values: dict[str, _EpochValue] = field(default_factory=dict)
    prog_bar: set[str] = field(default_factory=set)
    no_logger: set[str] = field(default_factory=set)
    step_only_metrics: dict[str, Any] = field(default_factory=dict)  # Metrics to reset at the epoch end
    reduced: dict[str, torch.Tensor] = field(default_factory=dict)  # ``take_epoch_metrics``'s, for the epoch's row
    forks: dict[str, str] = field(default_factory=dict)  # name_step / name_epoch -> name
    options: dict[tuple[str | None, str], tuple[Any, ...]] = field(default_factory=dict)  # (hook, name) -> options
    # The batch being run, whose size weighs epoch means. The fit and evaluation loops set it per batch (and None
    # after it) by a plain store, on purpose: the one field written from outside, a method call per batch costs more.
    batch: Any = None
    epoch_end: bool = False  # logging from on_train_epoch_end: defaults to on_epoch
    before_loop: bool = False  # no stage runs yet (or any more): only on_train_start may log, into the first epoch
    _lock: threading.Lock = field(default_factory=threading.Lock)  # DP replicas log from threads

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its lock (a Trainer pickles, as Lightning's does); a new lock on unpickling."""
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def use_loader(self, idx: int | None) -> None:
        """The evaluation loader that runs now; None in the epoch-level hooks, which log for every loader."""
        self.dataloader_idx = idx

    def start_epoch_end(self) -> None:
        """``on_train_epoch_end`` runs: what it logs defaults to ``on_epoch``, as in Lightning."""
        self.epoch_end = True

    def log(
        self,
        name: str,
        value: Any,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        prog_bar: bool = False,
        logger: bool = True,
        sync_dist: bool = False,
        batch_size: int | None = None,
        reduce_fx: Any = "mean",
        add_dataloader_idx: bool = True,
        hook: str | None = None,
    ) -> None:
        """Record ``value``; ``hook``: the hook logging it (None: the step or a per-batch hook)."""
        training = self.stage == "train" and not self.epoch_end
        on_step = training if on_step is None else on_step
        on_epoch = (not training) if on_epoch is None else on_epoch
        reduce_fx = parse_reduce_fx(name, reduce_fx)
        if not (on_step or on_epoch):
            raise MisconfigurationException(
                f"`self.log({name!r}, on_step=False, on_epoch=False)` is not useful: it records nothing."
            )
        several = add_dataloader_idx and self.num_dataloaders > 1 and self.dataloader_idx is not None
        suffix = f"/dataloader_idx_{self.dataloader_idx}" if several else ""  # after _step/_epoch, as Lightning
        both = on_step and on_epoch  # then the keys are name_step and name_epoch
        step_key, epoch_key = (f"{name}_step{suffix}", f"{name}_epoch{suffix}") if both else (name + suffix,) * 2
        keys = {step_key, epoch_key}
        options = (on_step, on_epoch, prog_bar, logger, sync_dist, reduce_fx, add_dataloader_idx)
        with self._lock:
            if self.options.setdefault((hook, name + suffix), options) != options:
                where = hook or {"train": "training_step"}.get(self.stage, f"{self.stage}_step")
                raise MisconfigurationException(
                    f"You called `self.log({name}, ...)` twice in `{where}` with different arguments "
                    f"(on_step, on_epoch, prog_bar, logger, sync_dist, reduce_fx, add_dataloader_idx: "
                    f"{self.options[(hook, name + suffix)]}, then {options}). This is not allowed: one name, one "
                    "meaning; log the other under another name."
                )
            if both:
                self.forks.update({key: name + suffix for key in keys})
            for key in keys if self.num_dataloaders > 1 else ():  # one loader: every key is its (per_loader)
                self.loaders_of.setdefault(key, set()).add(self.dataloader_idx)
            step, epoch = step_key if on_step else None, epoch_key if on_epoch else None
            self._record(name, value, step, epoch, sync_dist, batch_size, reduce_fx)
            if prog_bar:
                self.prog_bar.update(keys)
            if not logger:
                self.no_logger.update(keys)

    def _record(
        self,
        name: str,
        value: Any,
        step_key: str | None,
        epoch_key: str | None,
        sync: bool,
        batch_size: int | None,
        fx: str,
    ) -> None:
        is_metric = hasattr(value, "compute") and hasattr(value, "reset")
        if step_key is not None:
            step_value = getattr(value, "_forward_cache", None) if is_metric else value
            if step_value is not None or not is_metric:  # a Metric only updated (no forward) has no step value
                self.step_values[step_key] = as_scalar(step_value, name)
                if sync:
                    self.step_sync[step_key] = fx  # type: ignore[assignment]  # one of REDUCE_FX, checked in log
        if epoch_key is None:
            if is_metric:
                self.step_only_metrics[step_key or name] = value
            return
        entry = self.epoch_values.get(epoch_key)
        if entry is None:
            entry = self.epoch_values[epoch_key] = _EpochValue(fx, sync, metric=value if is_metric else None)
        if not is_metric:
            entry.add(as_scalar(value, name), batch_size if batch_size is not None else extract_batch_size(self.batch))

    def per_loader(self, metrics: dict[str, float]) -> list[dict[str, float]]:
        """Lightning's results of an evaluation: the i-th dict holds what was logged while loader i ran, and
        what the epoch-level hooks logged; no ``logger=False`` key. (A name logged with ``add_dataloader_idx=False``
        under several loaders is pooled over them and in each of their dicts; Lightning refuses it.)"""
        logged = {k: v for k, v in metrics.items() if k not in self.no_logger}
        loaders = range(max(self.num_dataloaders, 1))
        return [{k: v for k, v in logged.items() if {i, None} & self.loaders_of.get(k, {None})} for i in loaders]

    def unforked(self, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``name`` for each ``name_step`` / ``name_epoch``: callbacks see both (``monitor="name"``), as Lightning."""
        return {self.forks[k]: v for k, v in values.items() if k in self.forks}

    def pop_step_metrics(self, strategy: Strategy) -> dict[str, torch.Tensor]:
        """Per-step values since the last call, reduced across ranks with their ``reduce_fx`` where asked (a
        collective then), as Lightning's: ``sum`` adds the ranks' values, ``max`` takes the largest."""
        values = self.step_values
        self.step_values = {}
        for key in sorted(self.step_sync.keys() & values.keys()):
            values[key] = strategy.all_reduce(values[key].detach(), self.step_sync[key])  # in its dtype (as_scalar)
        return values

    def take_epoch_metrics(self, strategy: Strategy) -> dict[str, torch.Tensor]:
        """``epoch_metrics`` so far, kept for the final ``epoch_metrics``; the aggregates start afresh, so what is
        logged next (the epoch-end hooks) is reduced on its own (collective, as ``epoch_metrics``)."""
        values = self.epoch_metrics(strategy)
        # what was reduced or reset here is not again at the epoch's end (a Metric is reset once per epoch)
        self.epoch_values, self.reduced, self.step_only_metrics = {}, values, {}
        return values

    def epoch_metrics(self, strategy: Strategy) -> dict[str, torch.Tensor]:
        """Every epoch aggregate (collective: every rank must call it, with the same names logged)."""
        for metric in self.step_only_metrics.values():
            metric.reset()  # a Metric logged per step still starts each epoch afresh
        values: dict[str, torch.Tensor] = {}
        for key, entry in sorted(self.epoch_values.items()):
            if entry.metric is not None:  # torchmetrics syncs its own state across ranks
                values[key] = entry.metric.compute()
                entry.metric.reset()
        plain = {k: e for k, e in sorted(self.epoch_values.items()) if e.metric is None}
        values.update(_reduce(plain, strategy))
        return dict(sorted({**self.reduced, **values}.items()))


def _reduce(entries: dict[str, _EpochValue], strategy: Strategy) -> dict[str, torch.Tensor]:
    """Reduce the synced aggregates with one all_reduce per operation, then divide the means."""
    if strategy.world_size > 1:  # every rank takes part, whether or not it logged anything
        _warn_unsynced(entries, strategy)
        synced = _on_every_rank(entries, strategy)
        summed = [e for e in synced if e.reduce_fx in ("mean", "sum")]
        if summed:  # in float64 (exact for the counts), each back in its own dtype
            flat = strategy.all_reduce(torch.stack([t.double() for e in summed for t in (e.total, e.count)]), "sum")  # type: ignore[union-attr]
            for i, entry in enumerate(summed):
                entry.total = flat[2 * i].to(entry.total.dtype)  # type: ignore[union-attr]
                entry.count = flat[2 * i + 1].to(torch.int64)
        for op in ("max", "min"):
            if group := [e for e in synced if e.reduce_fx == op]:
                flat = strategy.all_reduce(torch.stack([e.total.double() for e in group]), op)  # type: ignore[union-attr]
                for i, entry in enumerate(group):
                    entry.total = flat[i].to(entry.total.dtype)  # type: ignore[union-attr]
    return {key: entry.value() for key, entry in entries.items()}


_WARNED_UNSYNCED: set[str] = set()


def _warn_unsynced(entries: dict[str, _EpochValue], strategy: Strategy) -> None:
    """Lightning's hint, once per name: an epoch value without ``sync_dist=True`` is rank 0's own."""
    names = sorted(k for k, e in entries.items() if not e.sync and k not in _WARNED_UNSYNCED)
    if names and strategy.is_global_zero:
        _WARNED_UNSYNCED.update(names)
        for name in names:
            warnings.warn(
                f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)` when logging on epoch level in "
                "distributed setting to accumulate the metric across devices (without it each rank keeps its own "
                "value and rank 0's is logged).",
                stacklevel=4,
            )


def _on_every_rank(entries: dict[str, _EpochValue], strategy: Strategy) -> list[_EpochValue]:
    """The synced entries every rank logged: a name logged on some ranks only stays per rank (with a
    warning), as a reduction over differing names would wait forever for the ranks that lack it."""
    mine = sorted(k for k, e in entries.items() if e.sync)
    every = [set(names) for names in strategy.gather_objects(mine)]
    common = set.intersection(*every)
    partial = sorted(set.union(*every) - common)
    if partial and strategy.is_global_zero:
        warnings.warn(
            f"{partial} were logged on some ranks only, so they are not reduced across ranks (each rank keeps its "
            "own value). Log them on every rank, or pass rank_zero_only=True where only rank 0 logs.",
            stacklevel=4,
        )
    return [entries[k] for k in mine if k in common]


def default_float() -> torch.dtype:
    """Lightning's dtype for logged values: torch's default float dtype, but not below float32."""
    dtype = torch.get_default_dtype()
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def as_scalar(value: Any, name: str) -> torch.Tensor:
    """A logged value as a 0-dim tensor in Lightning's dtype: float32 or float64 kept, anything else (ints,
    half precision) in ``default_float()``, numbers too."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise MisconfigurationException(
                f"`self.log({name}, ...)` was called with a tensor of shape {tuple(value.shape)}, but the tensor must "
                f"have a single element. You can try doing `self.log({name}, value.mean())`."
            )
        value = value.detach().reshape(())
        return value if value.dtype in (torch.float32, torch.float64) else value.to(default_float())
    if isinstance(value, numbers.Real):
        return torch.tensor(float(value), dtype=default_float())
    raise loggable_error(name, value)


def extract_batch_size(batch: Any) -> int:
    """Size of the first dimension of the first tensor in the batch (1 if none)."""
    from lightning_utilities.core.apply_func import apply_to_collection

    sizes: list[int] = []
    apply_to_collection(batch, torch.Tensor, lambda t: sizes.append(t.shape[0] if t.dim() else 1))
    return sizes[0] if sizes else 1
