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
from torch.nn.parallel import DistributedDataParallel

from trainer.exceptions import MisconfigurationException
from trainer.plugins.environments import ClusterEnvironment
from trainer.plugins.io import CheckpointIO
from trainer.plugins.layer_sync import CPUSyncBatchNorm, LayerSync, TorchSyncBatchNorm, convert_cpu_sync_batchnorm
from trainer.strategies.base import Stage
from trainer.strategies.parallel import ParallelStrategy
from trainer.strategies.step_wrapper import StepWrapper

__all__ = ["CPUSyncBatchNorm", "DDPStrategy", "StepWrapper", "convert_cpu_sync_batchnorm"]
_OWN_KWARGS = ("module", "device_ids", "output_device", "process_group")  # the strategy sets these


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
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        parallel_devices: list[torch.device] | None = None,
        ddp_comm_state: object | None = None,
        ddp_comm_hook: Callable[..., Any] | None = None,
        ddp_comm_wrapper: Callable[..., Any] | None = None,
        model_averaging_period: int | None = None,
        **kwargs: Any,
    ) -> None:
        """``timeout`` bounds each collective (default: ``Trainer(collective_timeout=...)``, 10 minutes);
        ``rendezvous_timeout`` bounds waiting for all ranks to join. ``ddp_comm_hook`` (wrapped by
        ``ddp_comm_wrapper``, with ``ddp_comm_state``) replaces DDP's gradient all-reduce; other keyword
        arguments go to ``DistributedDataParallel``."""
        super().__init__(
            process_group_backend=process_group_backend,
            timeout=timeout,
            rendezvous_timeout=rendezvous_timeout,
            start_method=start_method,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            parallel_devices=parallel_devices,
        )
        self.layer_sync: LayerSync | None = TorchSyncBatchNorm() if sync_batchnorm else None
        self.syncs_buffers = broadcast_buffers  # per forward in training, once per evaluation loop
        self._params: list[nn.Parameter] = []  # the wrapped module's, and which of them DDP reduces
        self._trainable: list[bool] = []
        self._ddp_kwargs: dict[str, Any] = {
            "find_unused_parameters": find_unused_parameters,
            "gradient_as_bucket_view": gradient_as_bucket_view,
            "static_graph": static_graph,
            **_buffer_sync_kwargs(broadcast_buffers),
            **_checked_ddp_kwargs(kwargs),
        }
        if bucket_cap_mb is not None:
            self._ddp_kwargs["bucket_cap_mb"] = bucket_cap_mb
        self.comm_hook = _checked_comm_hook(ddp_comm_hook, ddp_comm_wrapper, ddp_comm_state)
        self.ddp_comm_state = ddp_comm_state
        self.model_averaging_period = _checked_averaging(model_averaging_period, ddp_comm_state)
        self._averaging: Any = None  # the optimizer-step hook that averages, while a stage runs

    @property
    def find_unused_parameters(self) -> bool:
        return bool(self._ddp_kwargs["find_unused_parameters"])

    @property
    def sync_batchnorm(self) -> bool:
        """``Trainer(sync_batchnorm=True)``: BatchNorm statistics over the global batch (a ``TorchSyncBatchNorm``)."""
        return self.layer_sync is not None

    @sync_batchnorm.setter
    def sync_batchnorm(self, value: bool) -> None:
        if value and self.layer_sync is None:
            self.layer_sync = TorchSyncBatchNorm()
        elif not value:
            self.layer_sync = None

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move, optionally convert BatchNorm to SyncBatchNorm, and wrap in DDP (rank 0's weights win).

        A module that optimizes itself (``automatic_optimization=False``) may call backward several
        times per step with some parameters frozen, which DDP's reducer cannot follow: it is not
        wrapped. Its weights start as rank 0's, its buffers are rank 0's before every step (as DDP
        does), and each ``manual_backward`` averages the gradients it adds (``manual_backward_sync``).
        """
        module = module.to(self.root_device)
        if self.layer_sync is not None:
            module = self.layer_sync.apply(module)
        self.module = module
        if not getattr(module, "automatic_optimization", True):
            self._broadcast(list(module.parameters()) + list(module.buffers()))
            self.model = module
            return self.model
        self.model = self._wrap(module)
        self._start_model_averaging(module)
        return self.model

    def _start_model_averaging(self, module: nn.Module) -> None:
        """Post-local SGD: after each optimizer step of this module's parameters, the periodic average across
        ranks (torch's ``PeriodicModelAverager``, what Lightning's ``PostLocalSGDOptimizer`` runs)."""
        if self.model_averaging_period is None or self._averaging is not None:
            return
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

        averager = PeriodicModelAverager(
            period=self.model_averaging_period,
            warmup_steps=self.ddp_comm_state.start_localSGD_iter,  # type: ignore[union-attr]
        )
        owned = {id(p) for p in module.parameters()}

        def after_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            params = [p for group in optimizer.param_groups for p in group["params"] if id(p) in owned]
            if params:
                averager.average_parameters(params)

        self._averaging = torch.optim.optimizer.register_optimizer_step_post_hook(after_step)

    def teardown(self) -> None:
        if self._averaging is not None:
            self._averaging.remove()
            self._averaging = None
        super().teardown()

    def _wrap(self, module: nn.Module) -> DistributedDataParallel:
        """DDP reduces the parameters that are trainable now; remember which, to notice a later (un)freeze."""
        self._params = list(module.parameters())
        self._trainable = [p.requires_grad for p in self._params]
        device_ids = [self.root_device.index] if self.accelerator == "cuda" else None
        wrapped = DistributedDataParallel(StepWrapper(module), device_ids=device_ids, **self._ddp_kwargs)
        if self.comm_hook is not None:
            wrapped.register_comm_hook(state=self.ddp_comm_state, hook=self.comm_hook)
        return wrapped

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


def _buffer_sync_kwargs(broadcast_buffers: bool) -> dict[str, bool]:
    """Buffers are synced from rank 0 at wrap time; ``False`` only skips the per-forward sync.

    torch 2.13 renamed ``broadcast_buffers`` to ``forward_sync_buffers`` (and warns on the old name).
    """
    if broadcast_buffers:
        return {}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def _checked_ddp_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``DistributedDataParallel``: a name it does not take is refused with the ones it does."""
    accepted = [n for n in inspect.signature(DistributedDataParallel.__init__).parameters if n not in ("self",)]
    bad = [name for name in kwargs if name not in accepted or name in _OWN_KWARGS]
    if bad:
        valid = ", ".join(n for n in accepted if n not in _OWN_KWARGS and n not in ("args", "kwargs"))
        raise MisconfigurationException(
            f"DDPStrategy({bad[0]}=...): DistributedDataParallel takes no {bad[0]!r} the strategy can pass on; "
            f"choose among {valid}."
        )
    return kwargs


def _checked_comm_hook(hook: Any, wrapper: Any, state: Any) -> Callable[..., Any] | None:
    """The hook DDP calls per gradient bucket (``wrapper(hook)`` when a wrapper is given)."""
    if hook is None:
        if wrapper is not None or state is not None:
            given = "ddp_comm_wrapper" if wrapper is not None else "ddp_comm_state"
            raise MisconfigurationException(
                f"DDPStrategy({given}=...) needs a ddp_comm_hook, e.g. "
                "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook."
            )
        return None
    for name, value in (("ddp_comm_hook", hook), ("ddp_comm_wrapper", wrapper)):
        if value is not None and not callable(value):
            raise MisconfigurationException(f"DDPStrategy({name}={value!r}) must be a function (a DDP comm hook).")
    return wrapper(hook) if wrapper is not None else hook  # type: ignore[no-any-return]


def _checked_averaging(period: int | None, state: Any) -> int | None:
    """Post-local SGD: ``model_averaging_period`` steps between parameter averages, with a ``PostLocalSGDState``."""
    if period is None:
        return None
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise MisconfigurationException(f"DDPStrategy(model_averaging_period={period!r}) must be an int >= 1.")
    from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState

    if not isinstance(state, PostLocalSGDState):
        raise MisconfigurationException(
            f"DDPStrategy(model_averaging_period={period}) averages the parameters after local SGD: it needs "
            "ddp_comm_state=PostLocalSGDState(...) and ddp_comm_hook=post_localSGD_hook; got "
            f"ddp_comm_state={state!r}."
        )
    return period
