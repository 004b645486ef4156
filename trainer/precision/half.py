"""True half precision ("bf16-true", "16-true"): weights, inputs and new tensors in the half dtype.

Half the memory of fp32 weights and no fp32 master copy, so updates smaller than the weight's
precision are lost: for fine-tuning and inference more than for training from scratch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from trainer.precision.base import Precision


class HalfPrecision(Precision):
    """Lightning's ``HalfPrecision``: the module cast once, float inputs cast per batch, and tensors made
    inside a step default to the half dtype."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype = torch.bfloat16 if name == "bf16-true" else torch.float16

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(dtype=self.dtype)

    def convert_input(self, batch: Any) -> Any:
        from lightning_utilities.core.apply_func import apply_to_collection  # ~40 ms at import: on use only

        return apply_to_collection(batch, torch.Tensor, self._cast)

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.dtype) if torch.is_floating_point(tensor) else tensor

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return _default_dtype(self.dtype)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
