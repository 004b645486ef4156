"""Strategies by name: ``Trainer(strategy="ddp")`` looks the name up here (any letter case, as Lightning).

The DDP family takes Lightning's ``_find_unused_parameters_true``/``_false`` suffix (``"ddp_spawn_find_unused_
parameters_true"``); DeepSpeed and XLA names are refused with what to use instead.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.strategies.base import Strategy
from trainer.strategies.single import SingleDeviceStrategy

# name -> "module:Class"; imported on use so `import trainer` stays cheap.
STRATEGIES: dict[str, str] = {
    "single": "trainer.strategies.single:SingleDeviceStrategy",
    "single_device": "trainer.strategies.single:SingleDeviceStrategy",
    "ddp": "trainer.strategies.ddp:DDPStrategy",
    "ddp_spawn": "trainer.strategies.ddp:DDPStrategy",
    "ddp_fork": "trainer.strategies.ddp:DDPStrategy",
    "ddp_notebook": "trainer.strategies.ddp:DDPStrategy",
    "dp": "trainer.strategies.dp:DataParallelStrategy",
    "fsdp": "trainer.strategies.fsdp:FSDPStrategy",
    "fsdp_cpu_offload": "trainer.strategies.fsdp:FSDPStrategy",
}
# the arguments a registered name builds its class with
PRESETS: dict[str, dict[str, Any]] = {
    "ddp_spawn": {"start_method": "spawn"},
    "ddp_fork": {"start_method": "fork"},
    "ddp_notebook": {"start_method": "fork"},
    "fsdp_cpu_offload": {"cpu_offload": True},
}
_UNUSED = re.compile(r"^(?P<base>ddp\w*?)_find_unused_parameters_(?P<flag>true|false)$")
_REFUSED = {
    "deepspeed": "DeepSpeed is not supported: use strategy='fsdp' to shard parameters, gradients and optimizer state.",
    "xla": "TPUs (XLA) are not supported: use accelerator='cuda' or 'cpu' with strategy='ddp'.",
    "single_xla": "TPUs (XLA) are not supported: use accelerator='cuda' or 'cpu'.",
    "single_tpu": "TPUs (XLA) are not supported: use accelerator='cuda' or 'cpu'.",
    "hpu": "Habana HPUs are not supported: use accelerator='cuda' or 'cpu'.",
}


def _split(name: str) -> tuple[str, dict[str, Any]]:
    """``"DDP_Spawn_Find_Unused_Parameters_True"`` -> ``("ddp_spawn", {"find_unused_parameters": True})``."""
    name = name.lower()
    match = _UNUSED.match(name)
    if match and match["base"] in STRATEGIES:
        return match["base"], {"find_unused_parameters": match["flag"] == "true"}
    return name, {}


def strategy_class(name: str) -> type[Strategy]:
    """The class registered under ``name``, or an error listing the valid names."""
    base, _ = _split(name)
    if base not in STRATEGIES:
        refused = next((why for prefix, why in _REFUSED.items() if base.startswith(prefix)), None)
        if refused is not None:
            raise MisconfigurationException(f"strategy={name!r}: {refused}")
        valid = ", ".join(["auto", *STRATEGIES])
        raise MisconfigurationException(
            f"You selected an invalid strategy name: `strategy={name!r}`; choose one of {valid} (a 'ddp' name may end "
            "in '_find_unused_parameters_true'), or pass a Strategy instance."
        )
    module_name, cls_name = STRATEGIES[base].split(":")
    cls: type[Strategy] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def build_strategy(name: str) -> Strategy:
    """An instance of the strategy registered under ``name``, with the arguments the name stands for."""
    cls = strategy_class(name)
    base, extra = _split(name)
    return cls(**PRESETS.get(base, {}), **extra)


def register_strategy(name: str, target: str, **init_kwargs: Any) -> None:
    """Register ``"package.module:Class"`` under ``name`` for ``Trainer(strategy=name)``, built with ``init_kwargs``."""
    STRATEGIES[name.lower()] = target
    if init_kwargs:
        PRESETS[name.lower()] = init_kwargs


__all__ = [
    "PRESETS",
    "STRATEGIES",
    "DDPStrategy",
    "DataParallelStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "SingleDeviceXLAStrategy",
    "Strategy",
    "XLAStrategy",
    "build_strategy",
    "register_strategy",
    "strategy_class",
]

_LAZY = {
    "DDPStrategy": "trainer.strategies.ddp",
    "DataParallelStrategy": "trainer.strategies.dp",
    "FSDPStrategy": "trainer.strategies.fsdp",
    "ParallelStrategy": "trainer.strategies.parallel",  # the base of DDP, FSDP and ModelParallel
    "DeepSpeedStrategy": "trainer.strategies.unsupported",
    "XLAStrategy": "trainer.strategies.unsupported",
    "SingleDeviceXLAStrategy": "trainer.strategies.unsupported",
    "ModelParallelStrategy": "trainer.strategies.model_parallel",
}


def __getattr__(name: str) -> Any:
    # Lazy public names for the distributed strategies (torch.distributed loads on use).
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trainer.strategies' has no attribute {name!r}")
