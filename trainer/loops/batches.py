"""What every loop does to a batch before its step: its step's arguments (its way to the device is
``trainer.data.device.transfer``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


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
