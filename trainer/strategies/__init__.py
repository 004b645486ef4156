"""Strategies by name: ``Trainer(strategy="ddp")`` looks the name up here."""

from __future__ import annotations

import importlib
from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.strategies.base import Strategy
from trainer.strategies.single import SingleDeviceStrategy

# name -> "module:Class"; imported on use so `import trainer` stays cheap.
STRATEGIES: dict[str, str] = {
    "single": "trainer.strategies.single:SingleDeviceStrategy",
    "ddp": "trainer.strategies.ddp:DDPStrategy",
    "dp": "trainer.strategies.dp:DataParallelStrategy",
    "fsdp": "trainer.strategies.fsdp:FSDPStrategy",
}


def strategy_class(name: str) -> type[Strategy]:
    """The class registered under ``name``, or an error listing the valid names."""
    if name not in STRATEGIES:
        valid = ", ".join(["auto", *STRATEGIES])
        raise MisconfigurationException(f"strategy={name!r} is not a known strategy; choose one of {valid}.")
    module_name, cls_name = STRATEGIES[name].split(":")
    cls: type[Strategy] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def register_strategy(name: str, target: str) -> None:
    """Register ``"package.module:Class"`` under ``name`` for ``Trainer(strategy=name)``."""
    STRATEGIES[name] = target


__all__ = [
    "STRATEGIES",
    "DDPStrategy",
    "DataParallelStrategy",
    "FSDPStrategy",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "register_strategy",
    "strategy_class",
]


def __getattr__(name: str) -> Any:
    # Lazy public names for the distributed strategies (torch.distributed loads on use).
    lazy = {"DDPStrategy": "ddp", "DataParallelStrategy": "dp", "FSDPStrategy": "fsdp"}
    if name in lazy:
        return strategy_class(lazy[name])
    if name == "ParallelStrategy":  # the base of DDP and FSDP: `isinstance(trainer.strategy, ParallelStrategy)`
        return importlib.import_module("trainer.strategies.parallel").ParallelStrategy  # by name, as STRATEGIES
    raise AttributeError(f"module 'trainer.strategies' has no attribute {name!r}")
