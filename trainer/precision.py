"""Numerical precision as a plug-in: autocast for forward, GradScaler for fp16 backward/step.

Every hook has a no-op default, so "32-true" is the plain ``Precision`` and the loop never
branches on the precision in use.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
_ALIASES = {"32": "32-true", 32: "32-true", "16": "16-mixed", 16: "16-mixed", "bf16": "bf16-mixed"}


class Precision:
    """Full fp32: every hook is the plain PyTorch call."""

    name = "32-true"

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def autocast(self, step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
        """``step`` run inside ``forward_context``; built once per epoch by the loops.

        Without a context (fp32) this is ``step`` itself, so a batch pays no extra call.
        """
        if type(self).forward_context is Precision.forward_context:
            return step

        def in_context(batch: Any, batch_idx: int) -> Any:
            with self.forward_context():
                return step(batch, batch_idx)

        return in_context

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call ``backward`` on (fp16 multiplies it by the scaler's factor)."""
        return loss

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients to their true scale before clipping or inspecting them."""

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        """Step one optimizer (the scaler may turn it into a no-op on overflow).

        ``closure`` computes the gradients (and runs the hooks due before a step); torch optimizers
        call it themselves, which LBFGS needs, as it evaluates the loss several times.
        """
        if closure is None:
            return optimizer.step(**kwargs)
        return optimizer.step(closure=closure, **kwargs)

    def update(self) -> bool:
        """Called once after all optimizers stepped; False when the step was skipped (overflow)."""
        return True

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class MixedPrecision(Precision):
    """Autocast to fp16 or bf16; fp16 adds a GradScaler (unscale before clip, skip on overflow)."""

    def __init__(self, name: str, device_type: str) -> None:
        self.name = name
        self.device_type = device_type
        self.dtype = torch.float16 if name == "16-mixed" else torch.bfloat16
        self.scaler: torch.amp.GradScaler | None = None
        if name == "16-mixed":
            self.scaler = torch.amp.GradScaler(device_type)
        self._unscaled: set[int] = set()
        self._stepped = False  # whether the scaler stepped any optimizer since the last update

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
        if self.scaler is not None and id(optimizer) not in self._unscaled and _has_grads(optimizer):
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        if self.scaler is None:
            return super().optimizer_step(optimizer, closure, **kwargs)
        result = closure() if closure is not None else None  # GradScaler cannot pass a closure on
        if _has_grads(optimizer):  # none when every batch of the window was skipped (non-finite loss)
            self.scaler.step(optimizer, **kwargs)  # skips the step itself when grads hold inf/nan
            self._stepped = True
        return result

    def update(self) -> bool:
        self._unscaled.clear()
        if self.scaler is None:
            return True
        if not self._stepped:  # the scaler saw no gradients: nothing to update, nothing stepped
            return False
        self._stepped = False
        # The scale only shrinks when an overflow was found, i.e. when the steps were skipped.
        before = self.scaler.get_scale()
        self.scaler.update()
        return self.scaler.get_scale() >= before

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


def _has_grads(optimizer: torch.optim.Optimizer) -> bool:
    return any(p.grad is not None for group in optimizer.param_groups for p in group["params"])


def build_precision(precision: str | int | Precision, device_type: str) -> Precision:
    """Turn the ``precision=`` flag into a plug-in, or say which names are valid."""
    if isinstance(precision, Precision):
        return precision
    name = _ALIASES.get(precision, precision)
    if name not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not supported; choose one of {', '.join(PRECISIONS)}.")
    if name == "32-true":
        return Precision()
    if device_type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"precision={name!r} has no autocast for device type {device_type!r}.")
    if name == "16-mixed" and device_type == "cpu":
        warnings.warn(
            "precision='16-mixed' on CPU: most CPUs emulate float16, which runs many times slower than fp32 "
            "(10x on a small MLP here), and a GradScaler buys nothing on CPU. Use precision='bf16-mixed' on a CPU "
            "with bfloat16 units (AVX512-BF16, AMX), else '32-true'.",
            stacklevel=3,
        )
    return MixedPrecision(str(name), device_type)
