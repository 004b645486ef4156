"""What every loop does to a batch before its step: the transfer hooks, and the step's arguments."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.datamodule import DataModule
from trainer.loops.hooks import overrides
from trainer.module import Module
from trainer.precision.base import Precision

if TYPE_CHECKING:
    from trainer.view import TrainerView


def transfer(trainer: TrainerView, dataloader_idx: int = 0) -> Callable[[Any], Any] | None:
    """The batch's way to the device, looked up once per epoch: the strategy's move (None on CPU), or
    ``on_before_batch_transfer``, ``transfer_batch_to_device``, ``on_after_batch_transfer`` where the
    module or the DataModule overrides them (the DataModule's hook wins, as in Lightning)."""
    strategy = trainer.strategy
    mover = strategy.batch_mover()
    before = _hook(trainer, "on_before_batch_transfer")
    custom = _hook(trainer, "transfer_batch_to_device")
    after = _hook(trainer, "on_after_batch_transfer")
    precision = trainer.precision
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
    if datamodule is not None and overrides(datamodule, name, DataModule):
        return getattr(datamodule, name)  # type: ignore[no-any-return]
    module = trainer.lightning_module
    return getattr(module, name) if overrides(module, name, Module) else None


def step_with_index(
    step: Callable[..., Any], user_step: Callable[..., Any], name: str, num_loaders: int, dataloader_idx: int
) -> Callable[..., Any]:
    """``step`` with ``dataloader_idx=...`` bound when there are several loaders, as Lightning passes it.

    A step that cannot take it with several loaders, or needs it with one, is refused before any
    batch runs (Lightning's rule).
    """
    params = inspect.signature(user_step).parameters
    takes = "dataloader_idx" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    required = "dataloader_idx" in params and params["dataloader_idx"].default is inspect.Parameter.empty
    if num_loaders > 1 and not takes:
        raise TypeError(
            f"{num_loaders} loaders were given for {name}, but {name}(batch, batch_idx) takes no dataloader_idx; "
            f"define {name}(self, batch, batch_idx, dataloader_idx=0) to tell them apart."
        )
    if num_loaders == 1 and required:
        raise TypeError(
            f"one loader was given for {name}, but {name} requires dataloader_idx; give it a default "
            "(dataloader_idx=0) or pass several loaders."
        )
    return functools.partial(step, dataloader_idx=dataloader_idx) if num_loaders > 1 else step
