"""``GradientAccumulationScheduler``: change ``accumulate_grad_batches`` at epoch starts, as Lightning's does.

``scheduling={epoch: factor}``, epochs counted from 0; epochs before the first key accumulate 1.
The factor is set on the Trainer in ``on_train_epoch_start`` (and in ``on_train_start``, so a run
resumed in the middle of an epoch gets that epoch's factor); the training step reads it when the
epoch's batches start. Every strategy steadytrain ships can change it between epochs (DDP and FSDP
skip the gradient sync per micro-batch, nothing is fixed at set-up); Lightning's refusals are kept:
manual optimization, and ``Trainer(accumulate_grad_batches=N)`` given as well.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class GradientAccumulationScheduler(Callback):
    """``GradientAccumulationScheduler(scheduling={0: 4, 2: 1})``: 4 micro-batches per step in epochs 0-1, then 1."""

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not isinstance(scheduling, dict) or not scheduling:
            raise TypeError(
                f"GradientAccumulationScheduler(scheduling={scheduling!r}): give a non-empty dict "
                "{epoch: accumulation factor}."
            )
        keys, values = list(scheduling), list(scheduling.values())
        if any(not isinstance(k, int) or isinstance(k, bool) or k < 0 for k in keys):
            raise MisconfigurationException(f"Epoch should be an int greater than or equal to 0. Got {keys}.")
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
            raise MisconfigurationException(f"Accumulation factor should be an int greater than 0. Got {values}.")
        self.scheduling = {0: 1, **scheduling}  # Lightning's default before the first key (a copy: theirs is mutated)
        self.epochs = sorted(self.scheduling)
        self._set: int | None = None  # the factor this callback last put on the Trainer

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(v > 1 for v in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        return self.scheduling[max(e for e in self.epochs if e <= epoch)]

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                "Automatic gradient accumulation and the `GradientAccumulationScheduler` is not supported for "
                "manual optimization (automatic_optimization=False): remove the callback, or accumulate in "
                "training_step."
            )
        given = trainer.accumulate_grad_batches
        if given != 1 and given != self._set:
            raise MisconfigurationException(
                f"You have set `accumulate_grad_batches` and are using the `GradientAccumulationScheduler` callback: "
                f"Trainer(accumulate_grad_batches={given}) and a GradientAccumulationScheduler both set the "
                "accumulation. Either remove `accumulate_grad_batches` from the Trainer or remove the callback."
            )
        from trainer.module import Module

        custom = [
            n
            for n in ("optimizer_step", "optimizer_zero_grad")
            if getattr(type(pl_module), n) is not getattr(Module, n)
        ]
        if self.going_to_accumulate_grad_batches() and custom:
            warnings.warn(
                f"{type(pl_module).__name__} overrides optimizer_step/optimizer_zero_grad: with gradient accumulation "
                "the hooks will not be called on every batch (rather, they are called on every optimization step).",
                stacklevel=2,
            )
        self._apply(trainer)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._apply(trainer)

    def _apply(self, trainer: Trainer) -> None:
        self._set = trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)
