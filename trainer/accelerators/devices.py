"""Lightning's ``Accelerator`` classes: which kind of device a Trainer runs on, what it counts as "auto" and what it
reports to ``DeviceStatsMonitor``.

``Trainer(accelerator=CPUAccelerator())`` is ``accelerator="cpu"``; ``trainer.accelerator`` is the instance for
the device the strategy chose. XLA (TPU) is named so a port's ``isinstance`` and ``is_available()`` checks run,
and refused when built: steadytrain does not run on TPUs.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainer.accelerators.host_stats import get_cpu_stats
from trainer.exceptions import MisconfigurationException


class Accelerator:
    """One kind of device. Subclasses name it (``name``) and say whether it is here (``is_available``)."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != self.name():
            raise MisconfigurationException(f"{type(self).__name__} runs on {self.name()} devices, got {device}.")

    def setup(self, trainer: Any) -> None:
        """Called once the Trainer's strategy is set up; nothing to do for the devices steadytrain runs on."""

    def teardown(self) -> None:
        """Release what ``setup`` took; nothing by default."""

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        return {}

    @staticmethod
    def name() -> str:
        raise NotImplementedError

    @staticmethod
    def is_available() -> bool:
        raise NotImplementedError

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @classmethod
    def parse_devices(cls, devices: int | str | list[int]) -> list[int]:
        """Device indices for ``devices`` (a count, "auto", -1, a list or a comma-separated string)."""
        return resolve_devices(devices, cls.name())

    @classmethod
    def get_parallel_devices(cls, devices: int | str | list[int]) -> list[torch.device]:
        indices = cls.parse_devices(devices)
        if cls.name() == "cpu":
            return [torch.device("cpu")] * len(indices)
        return [torch.device(cls.name(), i) for i in indices]


class CPUAccelerator(Accelerator):
    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        return get_cpu_stats()

    @staticmethod
    def name() -> str:
        return "cpu"

    @staticmethod
    def is_available() -> bool:
        return True


class CUDAAccelerator(Accelerator):
    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        return dict(torch.cuda.memory_stats(device))

    def teardown(self) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    @staticmethod
    def name() -> str:
        return "cuda"

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.device_count() > 0

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()


class MPSAccelerator(Accelerator):
    @staticmethod
    def name() -> str:
        return "mps"

    @staticmethod
    def is_available() -> bool:
        return bool(torch.backends.mps.is_available())


class XLAAccelerator(Accelerator):
    """TPUs through torch_xla: not supported. The class exists so ``XLAAccelerator.is_available()`` answers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(
            "XLAAccelerator: steadytrain does not run on TPUs (XLA); use accelerator='cuda', 'mps' or 'cpu'."
        )

    @staticmethod
    def name() -> str:
        return "tpu"

    @staticmethod
    def is_available() -> bool:
        return False


ACCELERATOR_CLASSES: dict[str, type[Accelerator]] = {
    "cpu": CPUAccelerator,
    "cuda": CUDAAccelerator,
    "mps": MPSAccelerator,
}


def accelerator_for(given: str | Accelerator, device_type: str) -> Accelerator:
    """``trainer.accelerator``: the instance given, else one for the device the strategy runs on."""
    if isinstance(given, Accelerator):
        return given
    return ACCELERATOR_CLASSES[device_type]()


def _available(accelerator: str) -> int:
    if accelerator == "cuda":
        return torch.cuda.device_count()
    if accelerator == "mps":
        return int(torch.backends.mps.is_available())
    return os.cpu_count() or 1


def under_launcher() -> bool:
    """torchrun (or SLURM with several tasks) started this process as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _check_device_type(devices: object) -> None:
    """An int, a string, or a sequence of ints (Lightning's rule): ``["0"]`` or ``[False]`` are refused by type."""
    ok = isinstance(devices, str) or (isinstance(devices, int) and not isinstance(devices, bool))
    if isinstance(devices, list | tuple):
        ok = all(isinstance(d, int) and not isinstance(d, bool) for d in devices)
    if not ok:
        raise TypeError(
            f"Device IDs (GPU/TPU) must be an int, a string, a sequence of ints, but you passed {devices!r} "
            f"({type(devices).__name__})."
        )


def resolve_devices(devices: int | str | list[int], accelerator: str) -> list[int]:
    """Device indices to use: "auto" means 1 (CPU) or every visible GPU; under torchrun, its ranks per node."""
    _check_device_type(devices)
    available = _available(accelerator)
    if devices == "auto" and under_launcher():
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        return list(range(per_node))
    if devices == "auto":
        return [0] if accelerator in ("cpu", "mps") else list(range(max(available, 1)))
    if isinstance(devices, str):
        try:
            devices = [int(d) for d in devices.split(",") if d.strip()] if "," in devices else int(devices)
        except ValueError:
            raise MisconfigurationException(
                f"devices={devices!r} is not a count, a comma-separated list of indices, -1 or 'auto'."
            ) from None
    if isinstance(devices, int):
        if devices == -1:
            devices = available
        if devices < 1:
            raise MisconfigurationException(
                f"devices={devices!r} must be a positive count, a list of indices, -1 or 'auto'."
            )
        indices = list(range(devices))
    else:
        indices = list(devices)
    limit = available
    if len(set(indices)) != len(indices):
        raise MisconfigurationException(f"devices={devices!r} lists an index more than once.")
    bad = [i for i in indices if i < 0 or i >= limit]
    if accelerator == "cpu" and len(indices) > limit:
        raise MisconfigurationException(
            f"devices={devices!r} asks for {len(indices)} CPU processes but this machine has {limit} cores; "
            f"use devices<={limit}."
        )
    if bad or not indices:
        raise MisconfigurationException(
            f"devices={devices!r} is out of range: {accelerator} has {limit} device(s) (indices 0..{limit - 1})."
        )
    return indices
