"""The plain precision: every hook is the plain PyTorch call, so the loops never branch on the precision."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch


class Precision:
    """Full fp32: every hook is the plain PyTorch call."""

    name = "32-true"

    @property
    def precision(self) -> str:
        """Lightning's name for the setting: ``"32-true"``, ``"bf16-mixed"``, ..."""
        return self.name

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module as it will train (true half precision casts its weights; others keep them)."""
        return module

    def convert_input(self, batch: Any) -> Any:
        """The batch as the step sees it, after the transfer hooks (true half precision casts floats)."""
        return batch

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

    def update(self) -> bool | torch.Tensor:
        """Called once after all optimizers stepped; False when the step was skipped (overflow).

        May answer with a device-side bool tensor, so the step does not wait for the device to know.
        """
        return True

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def has_grads(optimizer: torch.optim.Optimizer) -> bool:
    return any(p.grad is not None for group in optimizer.param_groups for p in group["params"])
