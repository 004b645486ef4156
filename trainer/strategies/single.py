"""One process, one device: the do-nothing case of every collective."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch

from trainer.exceptions import MisconfigurationException
from trainer.plugins.io import CheckpointIO
from trainer.strategies.base import ReduceOp, Strategy


class SingleDeviceStrategy(Strategy):
    """Runs on one device (CPU, one CUDA GPU or MPS). Collectives return their input."""

    name = "single"

    def __init__(self, device: str | torch.device | None = None, checkpoint_io: CheckpointIO | None = None) -> None:
        super().__init__(checkpoint_io=checkpoint_io)
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._fixed = device is not None

    def configure(
        self,
        accelerator: str,
        device_indices: list[int],
        num_nodes: int = 1,
        collective_timeout: timedelta | None = None,
    ) -> None:
        if len(device_indices) != 1 or num_nodes != 1:
            raise MisconfigurationException(
                f"strategy='single' runs on one device, but devices={device_indices} and num_nodes={num_nodes}; "
                "use strategy='ddp' (or 'dp' on CUDA) for several."
            )
        super().configure(accelerator, device_indices, num_nodes, collective_timeout)
        if not self._fixed:
            self._device = torch.device("cpu") if accelerator == "cpu" else torch.device(accelerator, device_indices[0])

    @property
    def root_device(self) -> torch.device:
        return self._device

    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.unsqueeze(0)

    def barrier(self) -> None:
        pass

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj
