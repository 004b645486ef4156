"""``grad_norm``: each parameter's gradient norm and their total, for ``self.log_dict`` (Lightning's keys)."""

from __future__ import annotations

import torch
from torch import nn

from trainer.exceptions import MisconfigurationException


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """``{"grad_2.0_norm/<param>": norm, ..., "grad_2.0_norm_total": norm}`` over the parameters that have a gradient.

    The total is the norm of all gradients as one vector. Values stay tensors on their device (no sync
    here): log them, e.g. in ``on_before_optimizer_step``, and the logger reads them at its interval.
    """
    norm = float(norm_type)
    if not norm > 0:
        raise MisconfigurationException(f"`norm_type` must be a positive number or 'inf' (infinity norm). Got {norm}")
    norms = {
        f"grad_{norm}_norm{group_separator}{name}": p.grad.detach().norm(norm)
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    if norms:
        norms[f"grad_{norm}_norm_total"] = torch.stack([n.to(torch.float32) for n in norms.values()]).norm(norm)
    return norms
