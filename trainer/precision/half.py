"""True precision ("bf16-true", "16-true", "64-true"): weights, inputs and new tensors in one dtype.

Half precision takes half the memory of fp32 weights and keeps no fp32 master copy, so updates smaller
than the weight's precision are lost: for fine-tuning and inference more than for training from scratch.
Double precision ("64-true") is for numerically delicate models and checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from trainer.exceptions import MisconfigurationException
from trainer.precision.base import Precision

_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}


class TruePrecision(Precision):
    """The module cast once, float inputs cast per batch, and tensors made inside a step in the dtype."""

    def __init__(self, precision: str) -> None:
        if precision not in _DTYPES:
            raise MisconfigurationException(
                f"{type(self).__name__}(precision={precision!r}): choose one of {', '.join(_DTYPES)}."
            )
        self.name = precision
        self.dtype = _DTYPES[precision]

    @property
    def precision(self) -> str:
        """Lightning's name for the setting, e.g. ``"bf16-true"``."""
        return self.name

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module.to(dtype=self.dtype)

    def convert_input(self, batch: Any) -> Any:
        from lightning_utilities.core.apply_func import apply_to_collection  # ~40 ms at import: on use only

        return apply_to_collection(batch, torch.Tensor, self._cast)

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.dtype) if torch.is_floating_point(tensor) else tensor

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return _default_dtype(self.dtype)


class HalfPrecision(TruePrecision):
    """Lightning's ``HalfPrecision("bf16-true")`` / ``HalfPrecision("16-true")``."""

    def __init__(self, precision: str = "16-true") -> None:
        if precision not in ("bf16-true", "16-true"):
            raise MisconfigurationException(f"HalfPrecision(precision={precision!r}): choose 'bf16-true' or '16-true'.")
        super().__init__(precision)


class DoublePrecision(TruePrecision):
    """Lightning's ``DoublePrecision()``: ``precision="64-true"``, everything in float64."""

    def __init__(self) -> None:
        super().__init__("64-true")


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
