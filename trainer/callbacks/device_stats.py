"""``DeviceStatsMonitor``: the device's memory (and the host's CPU and memory use) in the loggers, as Lightning does.

Keys are Lightning's: ``DeviceStatsMonitor.on_train_batch_start/allocated_bytes.all.current`` (every
entry of ``torch.cuda.memory_stats``) on CUDA; ``cpu_percent``, ``cpu_vm_percent`` and
``cpu_swap_percent`` for the host. They are written at the training logging steps
(``log_every_n_steps``), from the batch hooks of training, validation and testing, at the number of
optimizer steps done. Host figures come from ``psutil`` when installed, else from Linux's ``/proc``
(Lightning requires psutil). Reading them never touches the device.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

_PROC = Path("/proc")


class DeviceStatsMonitor(Callback):
    """Log device statistics at every logging step; ``cpu_stats``: None (host stats on CPU only), True, False."""

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats not in (None, True, False):
            raise ValueError(f"DeviceStatsMonitor(cpu_stats={cpu_stats!r}): choose None, True or False.")
        self._cpu_stats = cpu_stats
        self._cpu_times: tuple[float, float] | None = None  # /proc/stat's (busy, total) at the last reading
        self._step = 0
        self._due = False

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise ValueError(
                "DeviceStatsMonitor needs a logger to write to, and this Trainer has none (logger=False). "
                "Pass a logger (e.g. Trainer(logger=True) or a CSVLogger), or remove the callback."
            )
        if self._wants_cpu(trainer.strategy.root_device) and not _host_stats_available():
            raise ModuleNotFoundError(
                "DeviceStatsMonitor cannot read CPU stats on this system: install psutil (`pip install psutil`), "
                "or pass DeviceStatsMonitor(cpu_stats=False)."
            )

    # ---- hooks: Lightning's six --------------------------------------------------------------------
    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_start")

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_end", self._step)

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log(trainer, "on_validation_batch_start")

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log(trainer, "on_validation_batch_end")

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log(trainer, "on_test_batch_start")

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log(trainer, "on_test_batch_end")

    # ---- values -------------------------------------------------------------------------------------
    def _log(self, trainer: Trainer, hook: str, step: int | None = None) -> None:
        """Lightning's rule: a batch logs when the step it leads to is a logging step; its end shares its step."""
        if step is None:
            self._step = trainer.global_step
            self._due = (self._step + 1) % trainer.log_every_n_steps == 0
        if not (self._due or trainer.should_stop) or not trainer.is_global_zero or not trainer.loggers:
            return
        stats = self.device_stats(trainer.strategy.root_device)
        for lg in trainer.loggers:
            separator = getattr(lg, "group_separator", "/")
            lg.log_metrics({f"{type(self).__qualname__}.{hook}{separator}{k}": v for k, v in stats.items()}, self._step)

    def device_stats(self, device: torch.device) -> dict[str, float]:
        """This device's figures: CUDA's allocator statistics, and the host's where ``cpu_stats`` asks for them."""
        stats: dict[str, float] = {}
        if device.type == "cuda":
            stats.update({k: float(v) for k, v in torch.cuda.memory_stats(device).items()})
        if self._wants_cpu(device):
            stats.update(self._host_stats())
        return stats

    def _wants_cpu(self, device: torch.device) -> bool:
        return self._cpu_stats is True or (self._cpu_stats is None and device.type == "cpu")

    def _host_stats(self) -> dict[str, float]:
        if importlib.util.find_spec("psutil") is not None:
            import psutil

            return {
                "cpu_vm_percent": float(psutil.virtual_memory().percent),
                "cpu_percent": float(psutil.cpu_percent()),
                "cpu_swap_percent": float(psutil.swap_memory().percent),
            }
        memory = _meminfo()
        return {
            "cpu_vm_percent": _percent_used(memory["MemTotal"], memory["MemAvailable"]),
            "cpu_percent": self._cpu_percent(),
            "cpu_swap_percent": _percent_used(memory["SwapTotal"], memory["SwapFree"]),
        }

    def _cpu_percent(self) -> float:
        """System-wide CPU use since the last reading (psutil's ``cpu_percent()``: 0.0 the first time)."""
        fields = [float(v) for v in (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
        total = sum(fields[:8])  # guest time is already counted in user time
        previous, self._cpu_times = self._cpu_times, (total - idle, total)
        if previous is None or total <= previous[1]:
            return 0.0
        return round(100.0 * (total - idle - previous[0]) / (total - previous[1]), 1)


def _host_stats_available() -> bool:
    return importlib.util.find_spec("psutil") is not None or (_PROC / "meminfo").is_file()


def _meminfo() -> dict[str, float]:
    """``/proc/meminfo`` in kB, by name."""
    values: dict[str, float] = {}
    for line in (_PROC / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if rest.split():
            values[name] = float(rest.split()[0])
    return values


def _percent_used(total: float, free: float) -> float:
    return round(100.0 * (total - free) / total, 1) if total > 0 else 0.0
