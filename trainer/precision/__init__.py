"""Numerical precision as a plug-in, one file per kind; ``build_precision`` reads the ``precision=`` flag.

Every hook has a no-op default, so "32-true" is the plain ``Precision`` and the loops never
branch on the precision in use.
"""

from __future__ import annotations

import warnings

from trainer.exceptions import MisconfigurationException
from trainer.precision.amp import MixedPrecision
from trainer.precision.base import Precision
from trainer.precision.half import DoublePrecision, HalfPrecision, TruePrecision

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true")
_ALIASES = {
    "32": "32-true",
    32: "32-true",
    "16": "16-mixed",
    16: "16-mixed",
    "bf16": "bf16-mixed",
    "64": "64-true",
    64: "64-true",
}


def build_precision(precision: str | int | Precision | None, device_type: str) -> Precision:
    """Turn the ``precision=`` flag into a plug-in (None: "32-true"), or say which names are valid."""
    if isinstance(precision, Precision):
        return precision
    if precision is None:
        return Precision()
    name = _ALIASES.get(precision, precision)
    if name not in PRECISIONS:
        if isinstance(precision, str) and precision.startswith("transformer-engine"):
            from trainer.precision.unsupported import TransformerEnginePrecision

            TransformerEnginePrecision()  # raises, naming what to use instead
        raise MisconfigurationException(
            f"Precision {precision!r} is invalid: precision= takes one of {', '.join(PRECISIONS)} (or Lightning's "
            "aliases 64, 32, 16, bf16)."
        )
    if name == "32-true":
        return Precision()
    if name == "64-true":
        return DoublePrecision()
    if name in ("16-true", "bf16-true"):
        return HalfPrecision(str(name))
    if device_type not in ("cpu", "cuda", "mps"):
        raise MisconfigurationException(f"precision={name!r} has no autocast for device type {device_type!r}.")
    if name == "16-mixed" and device_type == "cpu":
        warnings.warn(
            "precision='16-mixed' on CPU: most CPUs emulate float16, which runs many times slower than fp32 "
            "(10x on a small MLP here), and a GradScaler buys nothing on CPU. Use precision='bf16-mixed' on a CPU "
            "with bfloat16 units (AVX512-BF16, AMX), else '32-true'.",
            stacklevel=3,
        )
    return MixedPrecision(str(name), device_type)


__all__ = [
    "PRECISIONS",
    "DoublePrecision",
    "HalfPrecision",
    "MixedPrecision",
    "Precision",
    "TruePrecision",
    "build_precision",
]
