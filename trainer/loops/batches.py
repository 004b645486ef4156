"""What every loop does to a batch before its step: its step's arguments (its way to the device is
``trainer.data.device.transfer``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from trainer.exceptions import SignatureError


def check_dataloader_idx(hook: Callable[..., Any], name: str, owner: str, num_loaders: int, prefix: str) -> None:
    """Lightning's rule for ``hook`` (a step, or a batch start/end hook): with several loaders it must take
    ``dataloader_idx``; with one it may, with a default."""
    params = inspect.signature(hook).parameters
    takes = "dataloader_idx" in params or any(p.kind is p.VAR_POSITIONAL for p in params.values())  # as Lightning
    required = "dataloader_idx" in params and params["dataloader_idx"].default is inspect.Parameter.empty
    if num_loaders > 1 and not takes:
        raise SignatureError(
            f"You provided multiple `{prefix}_dataloader`, but no `dataloader_idx` argument in `{owner}.{name}()`. "
            f"Try adding `dataloader_idx=0` to its signature ({num_loaders} loaders: the index tells them apart)."
        )
    if num_loaders == 1 and required:
        raise SignatureError(
            f"You provided only a single `{prefix}_dataloader`, but have included `dataloader_idx` in "
            f"`{owner}.{name}()`. Either remove the argument or give it a default value i.e. `dataloader_idx=0`."
        )


def step_with_index(
    step: Callable[..., Any],
    user_step: Callable[..., Any],
    name: str,
    num_loaders: int,
    dataloader_idx: int,
    owner: str,
) -> Callable[..., Any]:
    """``step`` with ``dataloader_idx=...`` bound when there are several loaders, as Lightning passes it; a step
    that cannot take it with several loaders, or needs it with one, is refused before any batch runs."""
    prefix = {"validation_step": "val", "test_step": "test", "predict_step": "predict"}.get(name, "train")
    check_dataloader_idx(user_step, name, owner, num_loaders, prefix)
    return functools.partial(step, dataloader_idx=dataloader_idx) if num_loaders > 1 else step
