"""``DeviceStatsMonitor``: the device's memory (and the host's CPU and memory use) in the loggers, as Lightning does.

Keys are Lightning's: ``DeviceStatsMonitor.on_train_batch_start/allocated_bytes.all.current`` (every
entry of ``torch.cuda.memory_stats``) on CUDA; ``cpu_percent``, ``cpu_vm_percent`` and
``cpu_swap_percent`` for the host. They are written at the training logging steps
(``log_every_n_steps``), from the batch hooks of training, validation and testing, at the number of
optimizer steps done. Host figures come from ``psutil`` when installed, else from Linux's ``/proc``
(Lightning requires psutil). Reading them never touches the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from trainer.accelerators.host_stats import get_cpu_stats, host_stats_available
from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class DeviceStatsMonitor(Callback):
    """Log device statistics at every logging step; ``cpu_stats``: None (host stats on CPU only), True, False."""

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats not in (None, True, False):
            raise MisconfigurationException(f"DeviceStatsMonitor(cpu_stats={cpu_stats!r}): choose None, True or False.")
        self._cpu_stats = cpu_stats
        self._step = 0
        self._due = False

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `DeviceStatsMonitor` callback with `Trainer(logger=False)`: "
                "DeviceStatsMonitor needs a logger to write to, and this Trainer has none. "
                "Pass a logger (e.g. Trainer(logger=True) or a CSVLogger), or remove the callback."
            )
        if self._wants_cpu(trainer.strategy.root_device) and not host_stats_available():
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
            every = trainer.log_every_n_steps
            self._due = every > 0 and (self._step + 1) % every == 0
        due = self._due or (trainer.should_stop and trainer.log_every_n_steps > 0)  # 0: never (Lightning's)
        if not due or not trainer.is_global_zero or not trainer.loggers:
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
            stats.update(get_cpu_stats())
        return stats

    def _wants_cpu(self, device: torch.device) -> bool:
        return self._cpu_stats is True or (self._cpu_stats is None and device.type == "cpu")
