"""Lightning's precision plug-ins for hardware or libraries steadytrain does not support.

Each name exists so a ported import line runs; building one raises and names what to use instead.
"""

from __future__ import annotations

from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.precision.base import Precision


class _Refused(Precision):
    instead = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(f"{type(self).__name__}: steadytrain does not support it; {self.instead}")


class DeepSpeedPrecision(_Refused):
    instead = "DeepSpeed is not supported: use strategy='fsdp' with precision='bf16-mixed' for sharded training."


class XLAPrecision(_Refused):
    instead = "TPUs (XLA) are not supported: use accelerator='cuda' or 'cpu' with precision='bf16-mixed'."


class BitsandbytesPrecision(_Refused):
    instead = "bitsandbytes quantization is not supported: use precision='bf16-true' or '16-true' to halve memory."


class TransformerEnginePrecision(_Refused):
    instead = "Transformer Engine (FP8) is not supported: use precision='bf16-mixed'."


class FSDPPrecision(_Refused):
    instead = (
        "FSDPStrategy takes the Trainer's precision: Trainer(strategy='fsdp', precision='bf16-mixed') computes in "
        "bfloat16 with fp32 master weights (or pass FSDPStrategy(mixed_precision=MixedPrecisionPolicy(...)))."
    )
