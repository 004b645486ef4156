"""Turn ``accelerator=``/``devices=``/``strategy=`` flags into a Strategy, checking them first."""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from trainer.strategies import Strategy, strategy_class

ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")


def _available(accelerator: str) -> int:
    if accelerator == "cuda":
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return os.cpu_count() or 1


def resolve_accelerator(accelerator: str) -> str:
    """ "auto" picks CUDA, then MPS, then CPU; a named one must exist."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator={accelerator!r} is not supported; choose one of {', '.join(ACCELERATORS)}.")
    if accelerator == "gpu":
        accelerator = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cuda"
    if accelerator == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    if accelerator == "cuda" and not torch.cuda.is_available():
        raise ValueError("accelerator='cuda' was asked for, but torch sees no CUDA device; use accelerator='cpu'.")
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ValueError("accelerator='mps' was asked for, but MPS is not available here; use accelerator='cpu'.")
    return accelerator


def _under_launcher() -> bool:
    """torchrun (or SLURM with several tasks) started this process as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def resolve_devices(devices: int | str | list[int], accelerator: str) -> list[int]:
    """Device indices to use: "auto" means 1 (CPU) or every visible GPU; under torchrun, its ranks per node."""
    available = _available(accelerator)
    if devices == "auto" and _under_launcher():
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        return list(range(per_node))
    if devices == "auto":
        return [0] if accelerator in ("cpu", "mps") else list(range(max(available, 1)))
    if isinstance(devices, str):
        try:
            devices = [int(d) for d in devices.split(",") if d.strip()] if "," in devices else int(devices)
        except ValueError:
            raise ValueError(
                f"devices={devices!r} is not a count, a comma-separated list of indices, -1 or 'auto'."
            ) from None
    if isinstance(devices, int):
        if devices == -1:
            devices = available
        if devices < 1:
            raise ValueError(f"devices={devices!r} must be a positive count, a list of indices, -1 or 'auto'.")
        indices = list(range(devices))
    else:
        indices = list(devices)
    limit = available
    if len(set(indices)) != len(indices):
        raise ValueError(f"devices={devices!r} lists an index more than once.")
    bad = [i for i in indices if i < 0 or i >= limit]
    if accelerator == "cpu" and len(indices) > limit:
        raise ValueError(
            f"devices={devices!r} asks for {len(indices)} CPU processes but this machine has {limit} cores; "
            f"use devices<={limit}."
        )
    if bad or not indices:
        raise ValueError(
            f"devices={devices!r} is out of range: {accelerator} has {limit} device(s) (indices 0..{limit - 1})."
        )
    return indices


def select_strategy(
    strategy: str | Strategy,
    accelerator: str,
    devices: int | str | list[int],
    num_nodes: int = 1,
    collective_timeout: timedelta | None = None,
) -> Strategy:
    """Build the strategy the flags describe; "auto" is single for one device, else ddp."""
    accelerator = resolve_accelerator(accelerator)
    indices = resolve_devices(devices, accelerator)
    if devices == "auto" and num_nodes == 1 and _under_launcher():
        num_nodes = int(os.environ["WORLD_SIZE"]) // len(indices)  # the launcher already knows the nodes
    if isinstance(strategy, Strategy):
        strategy.configure(accelerator, indices, num_nodes, collective_timeout)
        return strategy
    if not isinstance(strategy, str):
        raise TypeError(f"strategy must be a name or a Strategy instance, got {type(strategy).__name__}.")
    name = strategy
    if name == "auto":
        name = "single" if len(indices) == 1 and num_nodes == 1 and not _under_launcher() else "ddp"
    cls = strategy_class(name)
    instance = cls()
    instance.configure(accelerator, indices, num_nodes, collective_timeout)
    return instance
