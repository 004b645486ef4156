"""Devices: Lightning's ``Accelerator`` classes (``devices``) and the flags ``accelerator=``/``devices=``/
``strategy=`` turned into a Strategy (``select``)."""

from trainer.accelerators.devices import (
    ACCELERATOR_CLASSES,
    Accelerator,
    CPUAccelerator,
    CUDAAccelerator,
    MPSAccelerator,
    XLAAccelerator,
    accelerator_for,
)
from trainer.accelerators.host_stats import get_cpu_stats
from trainer.accelerators.select import ACCELERATORS, resolve_accelerator, resolve_devices, select_strategy

__all__ = [
    "ACCELERATORS",
    "ACCELERATOR_CLASSES",
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "MPSAccelerator",
    "XLAAccelerator",
    "accelerator_for",
    "get_cpu_stats",
    "resolve_accelerator",
    "resolve_devices",
    "select_strategy",
]
