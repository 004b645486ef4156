"""The batch's way to the device: the strategy's move and the transfer hooks, looked up once per epoch.

The loops apply it to every batch; ``ModelSummary`` to the module's ``example_input_array``, so the
example reaches the layers as a batch would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.datamodule import DataModule
from trainer.module import Module
from trainer.overrides import overrides
from trainer.precision.base import Precision

if TYPE_CHECKING:
    from trainer.view import TrainerView


def transfer(trainer: TrainerView, dataloader_idx: int = 0) -> Callable[[Any], Any] | None:
    """The batch's way to the device, looked up once per epoch: the strategy's move (None on CPU), or
    ``on_before_batch_transfer``, ``transfer_batch_to_device``, ``on_after_batch_transfer`` where the
    module or the DataModule overrides them (the DataModule's hook wins, as in Lightning)."""
    return transfer_with(trainer, trainer.strategy.batch_mover(), dataloader_idx)


def transfer_with(
    trainer: TrainerView, mover: Callable[[Any], Any] | None, dataloader_idx: int = 0
) -> Callable[[Any], Any] | None:
    """``transfer`` around the strategy's ``mover``: ``mover`` itself (the same object) where no hook applies,
    so a caller can tell the plain move by identity (``batch_mover()`` makes a new one at each call)."""
    strategy = trainer.strategy
    before = _hook(trainer, "on_before_batch_transfer")
    custom = _hook(trainer, "transfer_batch_to_device")
    after = _hook(trainer, "on_after_batch_transfer")
    precision = trainer.precision_plugin
    if type(precision).convert_input is not Precision.convert_input:  # true half precision casts the floats
        after = _then(after, precision.convert_input)
    if before is None and custom is None and after is None:
        return mover
    device = strategy.root_device

    def run(batch: Any) -> Any:
        if before is not None:
            batch = before(batch, dataloader_idx)
        if custom is not None:
            batch = custom(batch, device, dataloader_idx)
        elif mover is not None:
            batch = mover(batch)
        if after is not None:
            batch = after(batch, dataloader_idx)
        return batch

    return run


def _then(hook: Callable[[Any, int], Any] | None, convert: Callable[[Any], Any]) -> Callable[[Any, int], Any]:
    if hook is None:
        return lambda batch, _idx: convert(batch)
    return lambda batch, idx: convert(hook(batch, idx))


def _hook(trainer: TrainerView, name: str) -> Callable[..., Any] | None:
    datamodule = trainer.datamodule
    if datamodule is not None and overrides(datamodule, name, DataModule, through_wrappers=True):
        return getattr(datamodule, name)  # type: ignore[no-any-return]
    module = trainer.lightning_module
    return getattr(module, name) if overrides(module, name, Module) else None
