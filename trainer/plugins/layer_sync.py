"""Lightning's ``LayerSync`` plugins: layers whose statistics cover the global batch across ranks.

``TorchSyncBatchNorm`` (what ``Trainer(sync_batchnorm=True)`` uses) swaps every BatchNorm for one that
all-reduces its batch statistics: torch's ``SyncBatchNorm`` on CUDA, ``CPUSyncBatchNorm`` (below) on CPU
ranks (gloo), where torch's runs only on GPUs. ``revert`` puts plain BatchNorm layers back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from trainer.exceptions import MisconfigurationException


class LayerSync(ABC):
    """Converts a module's layers to synchronised ones (``apply``) and back (``revert``)."""

    @abstractmethod
    def apply(self, model: nn.Module) -> nn.Module:
        """The module with its layers synchronised across ranks."""

    @abstractmethod
    def revert(self, model: nn.Module) -> nn.Module:
        """The module with plain layers again."""


class TorchSyncBatchNorm(LayerSync):
    """BatchNorm statistics over the global batch: ``SyncBatchNorm`` on CUDA, ``CPUSyncBatchNorm`` on CPU."""

    def apply(self, model: nn.Module) -> nn.Module:
        on_cuda = any(t.is_cuda for t in [*model.parameters(), *model.buffers()])
        if on_cuda:
            return nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return convert_cpu_sync_batchnorm(model)

    def revert(self, model: nn.Module) -> nn.Module:
        """Each synchronised BatchNorm back to a plain ``BatchNorm{1,2,3}d``-like layer, same tensors."""
        if isinstance(model, nn.SyncBatchNorm | CPUSyncBatchNorm):
            plain = _RevertedBatchNorm(
                model.num_features, model.eps, model.momentum, model.affine, model.track_running_stats
            )
            _share_tensors(model, plain)
            return plain
        for name, child in model.named_children():
            model.add_module(name, self.revert(child))
        return model

    def __repr__(self) -> str:
        return "TorchSyncBatchNorm()"


def as_layer_sync(plugin: Any) -> LayerSync:
    if not isinstance(plugin, LayerSync):
        raise MisconfigurationException(f"{plugin!r} is not a LayerSync plugin (e.g. TorchSyncBatchNorm()).")
    return plugin


class _SumOverRanks(torch.autograd.Function):
    """all_reduce(SUM) whose gradient is the all_reduce(SUM) of the incoming gradients."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        total = grad.clone()
        dist.all_reduce(total)
        return total


class CPUSyncBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover the global batch, for CPU ranks on gloo.

    ``torch.nn.SyncBatchNorm`` runs only on GPUs. This one sums per-channel count, sum and sum of
    squares with a differentiable all_reduce, so forward, backward and running statistics match
    BatchNorm on the whole batch (up to float rounding of the one-pass variance).
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise MisconfigurationException(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(input)
        self._check_input_dim(input)
        channels, dims = input.size(1), [0, *range(2, input.dim())]
        count = torch.full((1,), input.numel() / channels, dtype=input.dtype, device=input.device)
        totals = _SumOverRanks.apply(torch.cat([input.sum(dims), (input * input).sum(dims), count]))
        n = totals[-1]
        mean = totals[:channels] / n
        var = totals[channels : 2 * channels] / n - mean * mean
        self._update_running_stats(mean.detach(), var.detach(), n.item())
        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out

    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, n: float) -> None:
        if not self.track_running_stats or self.running_mean is None or self.running_var is None:
            return
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        with torch.no_grad():
            self.running_mean.lerp_(mean, momentum)
            self.running_var.lerp_(var * n / max(n - 1.0, 1.0), momentum)  # unbiased, as BatchNorm keeps


def convert_cpu_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Swap every BatchNorm for ``CPUSyncBatchNorm``, keeping the same parameter and buffer tensors."""
    if isinstance(module, _BatchNorm) and not isinstance(module, CPUSyncBatchNorm | nn.SyncBatchNorm):
        synced = CPUSyncBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        if module.affine:
            synced.weight, synced.bias = module.weight, module.bias  # the optimizer's tensors
        synced.running_mean, synced.running_var = module.running_mean, module.running_var
        synced.num_batches_tracked = module.num_batches_tracked
        synced.train(module.training)
        return synced
    for name, child in module.named_children():
        module.add_module(name, convert_cpu_sync_batchnorm(child))
    return module


class _RevertedBatchNorm(_BatchNorm):
    """A plain BatchNorm of any input rank (what ``TorchSyncBatchNorm.revert`` gives back)."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise MisconfigurationException(f"expected at least 2D input (got {input.dim()}D input)")


def _share_tensors(source: _BatchNorm, target: _BatchNorm) -> None:
    if source.affine:
        target.weight, target.bias = source.weight, source.bias  # the optimizer's tensors
    target.running_mean, target.running_var = source.running_mean, source.running_var
    target.num_batches_tracked = source.num_batches_tracked
    target.train(source.training)
