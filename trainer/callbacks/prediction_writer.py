"""``BasePredictionWriter``: write predictions as ``Trainer.predict`` makes them, per batch or per epoch.

Subclass it and override ``write_on_batch_end`` and/or ``write_on_epoch_end`` (Lightning's
signatures). Under DDP each rank writes its own share: name the files by ``trainer.global_rank``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from torch.utils.data import BatchSampler, SequentialSampler

from trainer.callbacks.base import Callback
from trainer.data import EvalShardSampler
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class WriteInterval(str, enum.Enum):
    """When a writer writes; compares equal to its string ("batch", "epoch", "batch_and_epoch")."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Calls ``write_on_batch_end`` after each predict batch and/or ``write_on_epoch_end`` after each loader pass.

    ``batch_indices`` are the dataset indices of a batch's samples, as in Lightning. They are known
    when the loader's order is fixed: a sequential sampler (the default without ``shuffle``), also
    when sharded across ranks. Otherwise (a shuffling or custom sampler, an iterable that is not a
    DataLoader) they are not: a batch gets ``[]`` and the epoch's lists stay empty, where
    Lightning records them through a sampler wrapper. ``write_on_epoch_end`` gets the predictions
    the writer collected itself, so they come even with ``predict(return_predictions=False)``:
    one list when there is one loader, else a list per loader (Lightning's shape); ``batch_indices``
    is always a list per loader of a list per batch.
    """

    def __init__(self, write_interval: Literal["batch", "epoch", "batch_and_epoch"] = "batch") -> None:
        choices = [i.value for i in WriteInterval]
        if write_interval not in choices:
            raise MisconfigurationException(
                f"BasePredictionWriter(write_interval={write_interval!r}): `write_interval` should be one of {choices}."
            )
        self.interval = WriteInterval(write_interval)
        self._predictions: list[list[Any]] = []
        self._epoch_indices: list[list[list[int]]] = []
        self._loader_indices: list[list[list[int]] | None] = []

    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: Module,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Override: write one batch's prediction."""
        raise NotImplementedError(f"{type(self).__name__} writes per batch: define write_on_batch_end().")

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: Module, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        """Override: write every prediction of the pass."""
        raise NotImplementedError(f"{type(self).__name__} writes per epoch: define write_on_epoch_end().")

    # ---- hooks --------------------------------------------------------------------------------------
    def on_predict_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        loaders = trainer.predict_loop.loaders
        self._loader_indices = [_fixed_batches(loader) for loader in loaders]
        self._predictions = [[] for _ in loaders]
        self._epoch_indices = [[] for _ in loaders]

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        known = self._loader_indices[dataloader_idx]
        indices = known[batch_idx] if known is not None and batch_idx < len(known) else []
        if self.interval.on_epoch:
            self._predictions[dataloader_idx].append(outputs)
            if indices:
                self._epoch_indices[dataloader_idx].append(indices)
        if self.interval.on_batch:
            self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if not self.interval.on_epoch:
            return
        predictions: list[Any] = self._predictions[0] if len(self._predictions) == 1 else self._predictions
        try:
            self.write_on_epoch_end(trainer, pl_module, predictions, self._epoch_indices)
        finally:  # the writer keeps no reference to them after writing
            self._predictions, self._epoch_indices = [], []


def _fixed_batches(loader: Iterable[Any]) -> list[list[int]] | None:
    """Each batch's sample indices, when the loader's batches come in a fixed order (drawing them then
    takes no random number); else None."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler: Any = batch_sampler
    while type(sampler) in (BatchSampler, EvalShardSampler):  # exact types: a subclass may reorder
        sampler = sampler.sampler
    if batch_sampler is None or type(sampler) is not SequentialSampler:
        return None
    return [list(batch) for batch in batch_sampler]
