"""``SpikeDetection``: stop training at a loss spike, and write the batches to skip when resuming, as Lightning does.

A spike is a loss worse than the last one and farther than ``atol`` and ``rtol * mean`` from the mean of the last
``window`` losses. The decision reads the loss on the host, and on several ranks all of them decide together,
so a run with this callback waits for each step's loss (a run without it does not).

Non-finite losses: steadytrain's ``on_nonfinite_loss="raise"`` (the default) stops the run at a NaN/inf loss before
this callback sees it, and ``"skip"`` skips the batch; with ``on_nonfinite_loss="off"`` the callback sees it and,
with ``finite_only=True`` (Lightning's default), calls it a spike.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class TrainingSpikeException(RuntimeError):
    """Raised by ``SpikeDetection`` at a loss spike."""

    def __init__(self, batch_idx: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args, **kwargs)


class SpikeDetection(Callback):
    """Raise ``TrainingSpikeException`` at a loss spike (``mode`` "min": a loss that rises; "max": one that falls)
    after ``warmup`` batches, and write the spiking batch and the one before it to ``exclude_batches_path``
    (a ``.json`` file or a folder for ``skip_batches.json``; default: ``default_root_dir``). ``atol``/``rtol``
    None drop that test. ``finite_only=False`` also takes non-finite losses into the mean (see the module note)."""

    def __init__(
        self,
        mode: Literal["min", "max"] = "min",
        window: int = 10,
        warmup: int = 1,
        atol: float | None = None,
        rtol: float | None = 2.0,
        exclude_batches_path: str | os.PathLike | None = None,
        finite_only: bool = True,
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"Invalid mode. Has to be min or max, found {mode}")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"SpikeDetection(window={window!r}): the running mean needs a window of at least 1.")
        self.mode = mode
        self.window = window
        self.warmup = warmup
        self.atol = atol
        self.rtol = rtol
        self.exclude_batches_path = exclude_batches_path
        self.finite_only = finite_only
        self.last_val: torch.Tensor | float = 0.0
        self.bad_batches: list[int] = []
        self._recent: deque[torch.Tensor] = deque(maxlen=window)

    @torch.no_grad()
    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if isinstance(outputs, torch.Tensor):
            loss = outputs.detach()
        elif isinstance(outputs, Mapping):
            loss = outputs["loss"].detach()
        else:
            raise TypeError(f"outputs have to be of type torch.Tensor or Mapping, got {type(outputs).__qualname__}")
        self._resolve_path(trainer)
        is_spike = batch_idx >= self.warmup and self._is_spike(loss)
        if trainer.strategy.reduce_boolean_decision(is_spike):  # one rank's spike stops every rank
            self._handle_spike(trainer, batch_idx)
        finite = bool(torch.isfinite(loss).all())
        if self.finite_only or not trainer.strategy.reduce_boolean_decision(not finite):
            self._update_stats(loss)

    def _resolve_path(self, trainer: Trainer) -> None:
        if self.exclude_batches_path is None:
            self.exclude_batches_path = os.path.join(trainer.default_root_dir, "skip_batches.json")
        if not str(self.exclude_batches_path).endswith(".json"):
            self.exclude_batches_path = os.path.join(self.exclude_batches_path, "skip_batches.json")

    def _is_spike(self, loss: torch.Tensor) -> bool:
        if self.finite_only and not bool(torch.isfinite(loss).all()):
            return True
        if self._is_better(loss - self.last_val):
            return False
        recent = [v.to(loss.device) for v in self._recent]  # a resumed window comes back on the CPU
        mean = torch.stack(recent).mean() if recent else torch.tensor(float("nan"), device=loss.device)
        return self._check_atol(loss, mean) and self._check_rtol(loss, mean)

    def _handle_spike(self, trainer: Trainer, batch_idx: int) -> None:
        # the batch that spiked, and the one before it, whose step may have spoilt the weights
        self.bad_batches.extend([batch_idx - 1, batch_idx])
        if trainer.is_global_zero:
            path = str(self.exclude_batches_path)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as f:
                json.dump(self.bad_batches, f, indent=4)
        raise TrainingSpikeException(batch_idx=batch_idx)

    def _check_atol(self, value: torch.Tensor, mean: torch.Tensor) -> bool:
        return self.atol is None or bool(abs(value - mean) >= abs(self.atol))

    def _check_rtol(self, value: torch.Tensor, mean: torch.Tensor) -> bool:
        return self.rtol is None or bool(abs(value - mean) >= abs(self.rtol * mean))

    def _is_better(self, diff: torch.Tensor) -> bool:
        return bool((diff <= 0).all()) if self.mode == "min" else bool((diff >= 0).all())

    def _update_stats(self, value: torch.Tensor) -> None:
        self._recent.append(value)
        self.last_val = value

    def state_dict(self) -> dict[str, Any]:
        last = self.last_val.item() if isinstance(self.last_val, torch.Tensor) else self.last_val
        return {
            "last_val": last,
            "mode": self.mode,
            "warmup": self.warmup,
            "atol": self.atol,
            "rtol": self.rtol,
            "bad_batches": self.bad_batches,
            "bad_batches_path": None if self.exclude_batches_path is None else str(self.exclude_batches_path),
            "recent": [float(v) for v in self._recent],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_val = state_dict["last_val"]
        self.mode = state_dict["mode"]
        self.warmup = state_dict["warmup"]
        self.atol = state_dict["atol"]
        self.rtol = state_dict["rtol"]
        self.bad_batches = list(state_dict["bad_batches"])
        self.exclude_batches_path = state_dict["bad_batches_path"]
        self._recent = deque((torch.tensor(v) for v in state_dict.get("recent", [])), maxlen=self.window)
