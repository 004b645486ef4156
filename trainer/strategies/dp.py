"""DataParallel: one process drives several GPUs; each step is split across replicas.

The batch stays where the DataLoader left it (DataParallel scatters it), every replica runs the
user's ``*_step`` through ``StepWrapper``, and the per-replica losses come back gathered as a
vector that is averaged here. Exact same math as one device when the batch divides evenly.
Collectives are one-process no-ops; checkpoints hold the user's module without ``module.``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from trainer.exceptions import MisconfigurationException
from trainer.strategies.base import Stage, Strategy
from trainer.strategies.single import SingleDeviceStrategy
from trainer.strategies.step_wrapper import StepWrapper


def mean_of_replicas(output: Any) -> Any:
    """Average a loss that DataParallel gathered into one entry per replica (also under ``"loss"``)."""
    if isinstance(output, torch.Tensor) and output.ndim == 1:
        return output.mean()
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor) and output["loss"].ndim == 1:
        return {**output, "loss": output["loss"].mean()}
    return output


class DataParallelStrategy(SingleDeviceStrategy):
    """``torch.nn.DataParallel`` over the given CUDA devices, in one process.

    One process, so the collectives are the single-device no-ops it inherits.
    """

    name = "dp"

    def configure(
        self,
        accelerator: str,
        device_indices: list[int],
        num_nodes: int = 1,
        collective_timeout: timedelta | None = None,
    ) -> None:
        if accelerator != "cuda":
            raise MisconfigurationException(
                "strategy='dp' needs CUDA GPUs (torch.nn.DataParallel); on CPU use strategy='ddp' (gloo) "
                "with devices=N."
            )
        if num_nodes != 1:
            raise MisconfigurationException(
                f"strategy='dp' runs in one process on one machine; for num_nodes={num_nodes} use 'ddp'."
            )
        Strategy.configure(
            self, accelerator, device_indices, num_nodes, collective_timeout
        )  # several devices are the point

    @property
    def root_device(self) -> torch.device:
        return torch.device("cuda", self.device_indices[0])

    def check_fit(self, module: nn.Module) -> None:
        if not getattr(module, "automatic_optimization", True):
            raise MisconfigurationException(
                "manual optimization (automatic_optimization=False) cannot run under strategy='dp': each replica "
                "would step the optimizer. Use strategy='ddp'."
            )

    def setup_module(self, module: nn.Module) -> nn.Module:
        self.module = module.to(self.root_device)
        self.model = nn.DataParallel(
            StepWrapper(self.module), device_ids=self.device_indices, output_device=self.device_indices[0]
        )
        return self.model

    def batch_to_device(self, batch: Any) -> Any:
        return batch  # DataParallel scatters the batch to the replicas itself

    def step_function(self, stage: Stage) -> Callable[..., Any]:
        if stage == "training":
            return self._training_step
        return functools.partial(self._forward, stage=stage)

    def _training_step(self, batch: Any, batch_idx: int) -> Any:
        return mean_of_replicas(self._forward(batch, batch_idx, "training"))

    def _forward(self, batch: Any, batch_idx: int, stage: str, **kwargs: Any) -> Any:
        assert self.model is not None, "setup_module() must run before a step"
        with warnings.catch_warnings():
            # Gathering one scalar loss per replica into a vector is what we want; torch warns about it.
            warnings.filterwarnings("ignore", message=".*all input tensors were scalars.*")
            return self.model(batch, batch_idx, stage, **kwargs)
