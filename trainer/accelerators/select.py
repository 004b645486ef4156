"""Turn ``accelerator=``/``devices=``/``strategy=`` flags into a Strategy, checking them first."""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from trainer.accelerators.devices import Accelerator, resolve_devices, under_launcher
from trainer.exceptions import MisconfigurationException
from trainer.strategies import Strategy, strategy_class

ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")


def resolve_accelerator(accelerator: str | Accelerator) -> str:
    """ "auto" picks CUDA, then MPS, then CPU; a named one (or an Accelerator instance) must exist."""
    if isinstance(accelerator, Accelerator):
        accelerator = accelerator.name()
    if accelerator not in ACCELERATORS:
        raise MisconfigurationException(
            f"accelerator={accelerator!r} is not supported; choose one of {', '.join(ACCELERATORS)}."
        )
    if accelerator == "gpu":
        accelerator = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cuda"
    if accelerator == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    if accelerator == "cuda" and not torch.cuda.is_available():
        raise MisconfigurationException(
            "accelerator='cuda' was asked for, but torch sees no CUDA device: `CUDAAccelerator` can not run on your "
            "system since the accelerator is not available. Use accelerator='cpu'."
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise MisconfigurationException(
            "accelerator='mps' was asked for, but MPS is not available here; use accelerator='cpu'."
        )
    return accelerator


def select_strategy(
    strategy: str | Strategy,
    accelerator: str | Accelerator,
    devices: int | str | list[int],
    num_nodes: int = 1,
    collective_timeout: timedelta | None = None,
) -> Strategy:
    """Build the strategy the flags describe; "auto" is single for one device, else ddp."""
    accelerator = resolve_accelerator(accelerator)
    indices = resolve_devices(devices, accelerator)
    if devices == "auto" and num_nodes == 1 and under_launcher():
        num_nodes = int(os.environ["WORLD_SIZE"]) // len(indices)  # the launcher already knows the nodes
    if isinstance(strategy, Strategy):
        strategy.configure(accelerator, indices, num_nodes, collective_timeout)
        return strategy
    if not isinstance(strategy, str):
        raise TypeError(f"strategy must be a name or a Strategy instance, got {type(strategy).__name__}.")
    name = strategy
    if name == "auto":
        name = "single" if len(indices) == 1 and num_nodes == 1 and not under_launcher() else "ddp"
    cls = strategy_class(name)
    instance = cls()
    instance.configure(accelerator, indices, num_nodes, collective_timeout)
    return instance
