"""Turn ``accelerator=``/``devices=``/``strategy=``/``plugins=`` flags into a Strategy, checking them first."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

import torch

from trainer.accelerators.devices import Accelerator, resolve_devices, under_launcher
from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments import SLURMEnvironment
from trainer.plugins.flag import Plugins
from trainer.strategies import Strategy, build_strategy

ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")


def is_interactive() -> bool:
    """A REPL or a notebook kernel: no script that a launcher could run again (Lightning's test)."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def resolve_accelerator(accelerator: str | Accelerator) -> str:
    """ "auto" picks CUDA, then MPS, then CPU; a named one (or an Accelerator instance) must exist."""
    if isinstance(accelerator, Accelerator):
        accelerator = accelerator.name()
    if not isinstance(accelerator, str) or accelerator.lower() not in ACCELERATORS:
        raise MisconfigurationException(
            f"You selected an invalid accelerator name: `accelerator={accelerator!r}`. Available names are: "
            f"{', '.join(ACCELERATORS)}."
        )
    accelerator = accelerator.lower()
    if accelerator == "gpu":
        if not (torch.cuda.is_available() or torch.backends.mps.is_available()):
            raise MisconfigurationException(
                "No supported gpu backend found! accelerator='gpu' was asked for, but torch sees no CUDA device and "
                "no MPS device here; use accelerator='cpu' (or 'auto', which takes a GPU where there is one)."
            )
        accelerator = "cuda" if torch.cuda.is_available() else "mps"
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
    plugins: Plugins | None = None,
) -> Strategy:
    """Build the strategy the flags describe; "auto" is single for one device, else ddp (ddp_fork in a notebook)."""
    _check_counts(devices, num_nodes, accelerator)
    if not isinstance(strategy, str | Strategy):
        raise MisconfigurationException(
            f"You selected an invalid strategy name: `strategy={strategy!r}`. It must be a name (auto, ddp, "
            "ddp_spawn, ddp_notebook, fsdp, ...) or a Strategy instance."
        )
    accelerator = _accelerator_of(strategy, accelerator)
    resolved = resolve_accelerator(accelerator)
    if resolved == "mps" and _data_parallel(strategy):
        raise MisconfigurationException(
            f"You set `strategy={strategy}` but strategies from the DDP family are not supported on the MPS "
            "accelerator. Either explicitly set `accelerator='cpu'` or change the strategy."
        )
    indices = _indices(strategy, devices, resolved)
    if devices == "auto" and num_nodes == 1 and under_launcher():
        num_nodes = int(os.environ["WORLD_SIZE"]) // len(indices)  # the launcher already knows the nodes
    instance = strategy if isinstance(strategy, Strategy) else build_strategy(_auto_name(strategy, indices, num_nodes))
    _plug_in(instance, plugins or Plugins())
    instance.configure(resolved, indices, num_nodes, collective_timeout)
    _check_interactive(instance)
    return instance


def _check_counts(devices: Any, num_nodes: Any, accelerator: Any) -> None:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise MisconfigurationException(f"`num_nodes` must be a positive integer, but got {num_nodes!r}.")
    if devices in ([], 0, "0") and not isinstance(devices, bool):
        name = type(accelerator).__qualname__ if isinstance(accelerator, Accelerator) else accelerator
        raise MisconfigurationException(
            f"`Trainer(devices={devices!r})` value is not a valid input using {name} accelerator: give a positive "
            "count, a list of device indices, -1 (all) or 'auto'."
        )


def _accelerator_of(strategy: str | Strategy, accelerator: str | Accelerator) -> str | Accelerator:
    """A strategy built with ``parallel_devices`` names its device type; the accelerator flag must agree."""
    devices = getattr(strategy, "parallel_devices", None)
    if not isinstance(strategy, Strategy) or not devices:
        return accelerator
    kind = devices[0].type
    given = accelerator.name() if isinstance(accelerator, Accelerator) else accelerator
    same = {"cpu": ("auto", "cpu"), "cuda": ("auto", "cuda", "gpu")}.get(kind, ("auto", kind))
    if given not in same:
        raise MisconfigurationException(
            f"{kind.upper()} parallel_devices set through {type(strategy).__name__} class, but accelerator set to "
            f"{given!r}, please choose one device type."
        )
    return kind if given == "auto" else accelerator


def _indices(strategy: str | Strategy, devices: int | str | list[int], accelerator: str) -> list[int]:
    parallel = getattr(strategy, "parallel_devices", None)
    if isinstance(strategy, Strategy) and parallel and devices == "auto":
        return [d.index if d.index is not None else i for i, d in enumerate(parallel)]
    return resolve_devices(devices, accelerator)


def _data_parallel(strategy: str | Strategy) -> bool:
    if isinstance(strategy, str):
        return "ddp" in strategy.lower()
    from trainer.strategies.parallel import ParallelStrategy

    return isinstance(strategy, ParallelStrategy)


def _auto_name(strategy: str, indices: list[int], num_nodes: int) -> str:
    if strategy.lower() != "auto":
        return strategy
    if len(indices) == 1 and num_nodes == 1 and not under_launcher():
        return "single"
    return "ddp_fork" if is_interactive() and num_nodes == 1 and not under_launcher() else "ddp"


def _plug_in(strategy: Strategy, plugins: Plugins) -> None:
    """The plug-ins the strategy uses: its checkpoint writer, cluster environment and layer sync."""
    if plugins.checkpoint_io is not None:
        strategy.checkpoint_io = plugins.checkpoint_io
    if plugins.cluster_environment is not None:
        setter = getattr(strategy, "set_cluster_environment", None)
        if setter is None and isinstance(plugins.cluster_environment, SLURMEnvironment):
            pass  # one process on SLURM: the environment only names the requeue signal (the Trainer reads it)
        elif setter is None:
            raise MisconfigurationException(
                f"plugins=[{plugins.cluster_environment!r}]: strategy={strategy.name!r} runs one process and needs no "
                "cluster environment; use strategy='ddp' (or 'fsdp') for several processes."
            )
        else:
            setter(plugins.cluster_environment)
    if plugins.layer_sync is not None:
        if not hasattr(strategy, "layer_sync"):
            raise MisconfigurationException(
                f"plugins=[{plugins.layer_sync!r}] synchronises layers across processes; strategy={strategy.name!r} "
                "runs one process. Use strategy='ddp'."
            )
        strategy.layer_sync = plugins.layer_sync  # type: ignore[attr-defined]


def _check_interactive(strategy: Strategy) -> None:
    """A notebook cannot be re-run as a script: strategies that self-launch by re-running it are refused now."""
    launches_itself = getattr(strategy, "start_method", None) == "popen" and strategy.world_size > 1
    if launches_itself and is_interactive() and not under_launcher():
        raise MisconfigurationException(
            f"`Trainer(strategy={strategy.name!r})` is not compatible with an interactive environment: it starts the "
            "other ranks by re-running your script. Run your code as a script, or choose a notebook-compatible "
            "strategy: `Trainer(strategy='ddp_notebook')`."
        )
