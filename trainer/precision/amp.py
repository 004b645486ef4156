"""Autocast (fp16 or bf16 compute on fp32 weights); fp16 adds a GradScaler."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from trainer.exceptions import MisconfigurationException
from trainer.precision.base import Precision, has_grads


class MixedPrecision(Precision):
    """Autocast to fp16 or bf16; fp16 adds a GradScaler (unscale before clip, skip on overflow)."""

    def __init__(self, precision: str, device: str, scaler: torch.amp.GradScaler | None = None) -> None:
        """Lightning's ``MixedPrecision(precision, device, scaler=None)``: a ``scaler`` only for "16-mixed"."""
        if precision not in ("16-mixed", "bf16-mixed"):
            raise MisconfigurationException(
                f"MixedPrecision(precision={precision!r}): choose '16-mixed' or 'bf16-mixed'."
            )
        if scaler is not None and precision == "bf16-mixed":
            raise MisconfigurationException(
                "MixedPrecision('bf16-mixed', scaler=...): bfloat16 needs no GradScaler; pass scaler=None."
            )
        self.name = precision
        self.device_type = device
        self.dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16
        self.scaler: torch.amp.GradScaler | None = None
        if precision == "16-mixed":
            self.scaler = scaler if scaler is not None else torch.amp.GradScaler(device)
        self._unscaled: set[int] = set()
        self._stepped = False  # whether the scaler stepped any optimizer since the last update

    @property
    def device(self) -> str:
        """Lightning's name: the device type autocast runs on."""
        return self.device_type

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=self.dtype)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None and id(optimizer) not in self._unscaled and has_grads(optimizer):
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        if self.scaler is None:
            return super().optimizer_step(optimizer, closure, **kwargs)
        result = closure() if closure is not None else None  # GradScaler cannot pass a closure on
        if has_grads(optimizer):  # none when every batch of the window was skipped (non-finite loss)
            self.scaler.step(optimizer, **kwargs)  # skips the step itself when grads hold inf/nan
            self._stepped = True
        return result

    def update(self) -> bool | torch.Tensor:
        """The scaler's update; whether the step was taken, on the device (reading it waits for the device).

        The scale only shrinks when an overflow was found, i.e. when the steps were skipped: the scale
        tensors before and after tell it without reading them back (``get_scale()`` would synchronize).
        """
        self._unscaled.clear()
        if self.scaler is None:
            return True
        if not self._stepped:  # the scaler saw no gradients: nothing to update, nothing stepped
            return False
        self._stepped = False
        if not self.scaler.is_enabled():
            self.scaler.update()
            return True  # a disabled scaler steps every time
        scale = getattr(self.scaler, "_scale", None)
        if not isinstance(scale, torch.Tensor):  # torch no longer keeps it there: ask, which waits for the device
            value = self.scaler.get_scale()
            self.scaler.update()
            return self.scaler.get_scale() >= value
        before = scale.clone()
        self.scaler.update()
        return self.scaler._scale >= before  # type: ignore[operator]

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
