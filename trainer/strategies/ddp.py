"""DistributedDataParallel: one process per device, gradients averaged in backward.

Every rank starts from rank 0's weights: DDP's constructor broadcasts parameters and buffers from
rank 0. The training step goes through the DDP-wrapped module so DDP's forward hooks (buffer
broadcast, unused-parameter search) run; evaluation calls the user's module directly, after one
broadcast of rank 0's buffers (what DDP's forward would do), so every rank evaluates the model
that rank 0 checkpoints.
``sync_batchnorm`` uses torch's SyncBatchNorm on CUDA and ``CPUSyncBatchNorm`` (below) on gloo.
Processes, the process group and the collectives are ``ParallelStrategy``'s.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel

from trainer.exceptions import MisconfigurationException
from trainer.strategies.base import Stage
from trainer.strategies.parallel import ParallelStrategy
from trainer.strategies.step_wrapper import StepWrapper

__all__ = ["CPUSyncBatchNorm", "DDPStrategy", "StepWrapper", "convert_cpu_sync_batchnorm"]


class DDPStrategy(ParallelStrategy):
    """One process per device (gloo on CPU, NCCL on CUDA); DDP averages gradients."""

    name = "ddp"
    step_collectives = "a collective inside the step (DDP's gradient all-reduce in backward, or your own)"

    def __init__(
        self,
        *,
        process_group_backend: str | None = None,
        timeout: timedelta | None = None,
        rendezvous_timeout: timedelta = timedelta(minutes=3),
        find_unused_parameters: bool = False,
        broadcast_buffers: bool = True,
        bucket_cap_mb: float | None = None,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        sync_batchnorm: bool = False,
        start_method: str = "popen",
    ) -> None:
        """``timeout`` bounds each collective (default: ``Trainer(collective_timeout=...)``, 10 minutes);
        ``rendezvous_timeout`` bounds waiting for all ranks to join."""
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            rendezvous_timeout=rendezvous_timeout,
            start_method=start_method,
        )
        self.sync_batchnorm = sync_batchnorm
        self.syncs_buffers = broadcast_buffers  # per forward in training, once per evaluation loop
        self._params: list[nn.Parameter] = []  # the wrapped module's, and which of them DDP reduces
        self._trainable: list[bool] = []
        self._ddp_kwargs: dict[str, Any] = {
            "find_unused_parameters": find_unused_parameters,
            "gradient_as_bucket_view": gradient_as_bucket_view,
            "static_graph": static_graph,
            **_buffer_sync_kwargs(broadcast_buffers),
        }
        if bucket_cap_mb is not None:
            self._ddp_kwargs["bucket_cap_mb"] = bucket_cap_mb

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move, optionally convert BatchNorm to SyncBatchNorm, and wrap in DDP (rank 0's weights win).

        A module that optimizes itself (``automatic_optimization=False``) may call backward several
        times per step with some parameters frozen, which DDP's reducer cannot follow: it is not
        wrapped. Its weights start as rank 0's, its buffers are rank 0's before every step (as DDP
        does), and each ``manual_backward`` averages the gradients it adds (``manual_backward_sync``).
        """
        module = module.to(self.root_device)
        if self.sync_batchnorm and self.accelerator == "cuda":
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
        elif self.sync_batchnorm:
            module = convert_cpu_sync_batchnorm(module)
        self.module = module
        if not getattr(module, "automatic_optimization", True):
            self._broadcast(list(module.parameters()) + list(module.buffers()))
            self.model = module
            return self.model
        self.model = self._wrap(module)
        return self.model

    def _wrap(self, module: nn.Module) -> DistributedDataParallel:
        """DDP reduces the parameters that are trainable now; remember which, to notice a later (un)freeze."""
        self._params = list(module.parameters())
        self._trainable = [p.requires_grad for p in self._params]
        device_ids = [self.root_device.index] if self.accelerator == "cuda" else None
        return DistributedDataParallel(StepWrapper(module), device_ids=device_ids, **self._ddp_kwargs)

    # ---- the step ------------------------------------------------------------------------
    def step_function(self, stage: Stage) -> Callable[..., Any]:
        """Training goes through DDP's forward; evaluation is ``ParallelStrategy``'s (rank 0's buffers first)."""
        if stage != "training":
            return super().step_function(stage)
        assert self.model is not None, "setup_module() must run before a step"
        if isinstance(self.model, DistributedDataParallel):
            return self._ddp_training_step
        return self._manual_training_step

    def _ddp_training_step(self, batch: Any, batch_idx: int) -> Any:
        """DDP's forward (StepWrapper calls training_step), wrapped again when layers were (un)frozen.

        DDP fixes the parameters it all-reduces when it wraps; a layer unfrozen later (fine-tuning)
        would train on this rank's samples alone. Every rank changes its flags at the same step, so
        every rank wraps again there (a collective: DDP broadcasts rank 0's weights, equal already).
        """
        if [p.requires_grad for p in self._params] != self._trainable:
            assert self.module is not None
            self.model = self._wrap(self.module)
        return self.model(batch, batch_idx)  # type: ignore[misc]

    def _manual_training_step(self, batch: Any, batch_idx: int) -> Any:
        assert self.module is not None
        if self.syncs_buffers:
            self._broadcast(list(self.module.buffers()))
        return self.module.training_step(batch, batch_idx)  # type: ignore[operator]

    def manual_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """The unwrapped module of manual optimization: average what each backward adds, as DDP would in it.

        So ``clip_gradients`` before ``opt.step()`` clips the global batch's gradient (Lightning's rule),
        and the step averages nothing more. A wrapped module's gradients DDP's reducer averages itself.
        """
        if isinstance(self.model, DistributedDataParallel):
            return contextlib.nullcontext()
        return self._averaged_backward()

    @contextlib.contextmanager
    def _averaged_backward(self) -> Iterator[None]:
        """Set the trainable parameters' gradients aside, run the backward, average only what it gave.

        The gradients set aside (an earlier backward's, averaged then) get the average added, so each
        backward's share is averaged exactly once and frozen or untouched parameters cost nothing. A
        gradient some ranks lack (a branch unused on their samples) counts as zero there; one no rank
        has stays as it was (None stays None, so the optimizer skips that parameter as on one device).
        """
        assert self.module is not None
        params = [p for p in self.module.parameters() if p.requires_grad]
        earlier = [p.grad for p in params]
        for param in params:
            param.grad = None
        try:
            yield
        finally:
            added = [p.grad for p in params]
            for param, grad in zip(params, earlier):
                param.grad = grad
        if params:
            self._add_average(params, added)

    def _add_average(self, params: list[nn.Parameter], added: list[torch.Tensor | None]) -> None:
        """Add to each gradient the mean over ranks of what the backward ``added`` (two all_reduces)."""
        has = torch.tensor([g is not None for g in added], dtype=torch.int32, device=params[0].device)
        with self._collective("all_reduce (which parameters a manual_backward gave gradients)"):
            dist.all_reduce(has)
        active = [i for i, n in enumerate(has.tolist()) if n > 0]
        if not active:
            return
        grads = [g if (g := added[i]) is not None else torch.zeros_like(params[i]) for i in active]
        flat = _flatten_dense_tensors(grads)
        with self._collective("all_reduce of the gradients (manual_backward)"):
            dist.all_reduce(flat)
        flat /= self.world_size
        for i, mean in zip(active, _unflatten_dense_tensors(flat, grads)):
            param, fresh = params[i], added[i]
            if param.grad is not None:
                param.grad.add_(mean)  # onto an earlier backward's gradient, the global batch's already
            elif fresh is not None:
                param.grad = fresh.copy_(mean)
            else:
                param.grad = mean.clone()

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        if isinstance(self.model, DistributedDataParallel):
            return self.model.no_sync()
        return contextlib.nullcontext()


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


def _buffer_sync_kwargs(broadcast_buffers: bool) -> dict[str, bool]:
    """Buffers are synced from rank 0 at wrap time; ``False`` only skips the per-forward sync.

    torch 2.13 renamed ``broadcast_buffers`` to ``forward_sync_buffers`` (and warns on the old name).
    """
    if broadcast_buffers:
        return {}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}
