"""Lightning's strategies for hardware or libraries steadytrain does not support.

Each name exists so a ported import line (and an ``isinstance`` check) runs; building one raises and names
what to use instead.
"""

from __future__ import annotations

from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.strategies.single import SingleDeviceStrategy


class _Refused(SingleDeviceStrategy):
    instead = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(f"{type(self).__name__}: steadytrain does not support it; {self.instead}")


class DeepSpeedStrategy(_Refused):
    instead = (
        "for ZeRO-style sharding of parameters, gradients and optimizer state use strategy='fsdp' "
        "(FSDPStrategy(cpu_offload=True) for ZeRO-offload)."
    )


class XLAStrategy(_Refused):
    instead = "TPUs (XLA) are not supported: use accelerator='cuda' or 'cpu' with strategy='ddp'."


class SingleDeviceXLAStrategy(_Refused):
    instead = "TPUs (XLA) are not supported: use accelerator='cuda' or 'cpu'."
