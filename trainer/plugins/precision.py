"""Lightning's ``lightning.pytorch.plugins.precision``: steadytrain's precision plug-ins under Lightning's path."""

from trainer.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from trainer.precision.unsupported import (
    BitsandbytesPrecision,
    DeepSpeedPrecision,
    FSDPPrecision,
    TransformerEnginePrecision,
    XLAPrecision,
)

__all__ = [
    "BitsandbytesPrecision",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "FSDPPrecision",
    "HalfPrecision",
    "MixedPrecision",
    "Precision",
    "TransformerEnginePrecision",
    "XLAPrecision",
]
