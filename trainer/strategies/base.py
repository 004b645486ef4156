"""The Strategy seam: where a step runs and how ranks agree.

The loop only ever talks to a Strategy; it never asks "am I distributed?". A new strategy
overrides the collectives and, where it wraps the module, ``setup_module`` and the step calls.
Everything else has a default that is right for one process.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from trainer.exceptions import MisconfigurationException
from trainer.plugins.io import CheckpointIO, TorchCheckpointIO

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.precision import Precision
    from trainer.view import TrainerView

ReduceOp = Literal["mean", "sum", "max", "min"]
Stage = Literal["training", "validation", "test", "predict"]
DEFAULT_COLLECTIVE_TIMEOUT = timedelta(minutes=10)


class CollectiveTimeoutError(RuntimeError):
    """A collective waited longer than ``Trainer(collective_timeout=...)``: a rank did not arrive."""


class Strategy(ABC):
    """How the user's module is placed, wrapped, stepped and synchronised."""

    name: str = "base"
    # False where evaluation must run under no_grad: FSDP's gather buffers, made in inference mode, would
    # stay inference tensors that training cannot write to.
    supports_inference_mode: bool = True
    # True where setup_module gives a module built on the meta device its memory (a sharding strategy, after it
    # shards): Trainer.init_module(empty_init=True) then builds there. Elsewhere the module is built initialised.
    builds_on_meta: bool = False

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        if checkpoint_io is not None and not isinstance(checkpoint_io, CheckpointIO):
            raise TypeError(
                f"checkpoint_io={checkpoint_io!r} is not a CheckpointIO (trainer.plugins: TorchCheckpointIO(), "
                "AsyncCheckpointIO(), or your own subclass)."
            )
        self._checkpoint_io = checkpoint_io
        self._checkpoint_io_given = checkpoint_io is not None
        self.launcher: Any = None  # ddp_spawn / ddp_fork: what starts the ranks from this process
        self.module: nn.Module | None = None  # the user's module, never wrapped
        self.model: nn.Module | None = None  # what forward runs through (may be a wrapper)
        self.accelerator: str = "cpu"
        self.device_indices: list[int] = [0]
        self.num_nodes: int = 1
        self.collective_timeout: timedelta = DEFAULT_COLLECTIVE_TIMEOUT

    def configure(
        self,
        accelerator: str,
        device_indices: list[int],
        num_nodes: int = 1,
        collective_timeout: timedelta | None = None,
    ) -> None:
        """Receive the resolved Trainer flags; a strategy checks here that they suit it."""
        self.accelerator = accelerator
        self.device_indices = device_indices
        self.num_nodes = num_nodes
        if collective_timeout is not None:
            self.collective_timeout = collective_timeout

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """Writes and reads checkpoint files: ``TorchCheckpointIO`` (atomic) unless one was given."""
        if self._checkpoint_io is None:
            self._checkpoint_io = TorchCheckpointIO()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO) -> None:
        """``Trainer(plugins=[io])``: refused when the strategy was built with another one."""
        if self._checkpoint_io_given and io is not self._checkpoint_io:
            raise MisconfigurationException(
                f"checkpoint_io set through both strategy class and plugins, choose one: {type(self).__name__}"
                f"(checkpoint_io={self._checkpoint_io!r}) and plugins=[{io!r}]."
            )
        self._checkpoint_io, self._checkpoint_io_given = io, True

    def launch(
        self, trainer: TrainerView, function: Callable[..., Any], *args: Any, module: Module | None, datamodule: Any
    ) -> Any:
        """Run a stage (``function(*args)``): here, or on the ranks a ``launcher`` starts (ddp_spawn, ddp_fork),
        whose rank 0 hands back the result, the weights into ``module`` and the Trainer's state."""
        if self.launcher is None:
            return function(*args)
        return self.launcher.launch(trainer, function, *args, module=module, datamodule=datamodule)

    def connect_precision(self, precision: Precision) -> None:
        """See the Trainer's precision (FSDP turns mixed precision into its own policy); nothing by default."""

    # ---- the few things each strategy must say -------------------------------------------
    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process computes on."""

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor:
        """Reduce a tensor across ranks (returns a new tensor)."""

    @abstractmethod
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Stack the tensor from every rank along a new first dimension."""

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank gets here."""

    @abstractmethod
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send a picklable object from ``src`` to every rank."""

    # ---- process facts (one process by default) ------------------------------------------
    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """How the loaders are split: into ``num_replicas`` parts, this process reading part ``rank``. One part per
        process, except where several processes compute one replica (tensor parallelism reads the same batches)."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    def module_mesh(self) -> Any:
        """The ``DeviceMesh`` ``Module.device_mesh`` shows ``configure_model`` (ModelParallelStrategy's), or None."""
        return None

    # ---- life cycle ----------------------------------------------------------------------
    def setup_environment(self) -> None:
        """Start processes / process groups. Called once before any module is touched."""

    def check_fit(self, module: nn.Module) -> None:
        """Refuse, before fit sets anything up, a module this strategy cannot train.

        The loops never ask which strategy runs them; a strategy with a limit says so here.
        """

    def loads_weights_after_setup(self, module: nn.Module) -> bool:
        """Whether a checkpoint's weights load after ``setup_module``: a module built on the meta device
        (``init_module(empty_init=True)``) has no memory to load them into before it gets it there."""
        from trainer.strategies.meta_init import has_meta_tensors

        return has_meta_tensors(module)

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move the module to its device and wrap it; returns what forward runs through."""
        self.module = module.to(self.root_device)
        self.model = self.module
        return self.model

    def teardown(self) -> None:
        """Release what ``setup_environment`` took; finish the checkpoint writes in flight."""
        if self._checkpoint_io is not None:
            self._checkpoint_io.teardown()

    def offload(self, optimizers: list[torch.optim.Optimizer]) -> None:
        """End of a stage: the module and the optimizers' state to the CPU, as Lightning's ``Strategy.teardown``.

        The device memory is then free for the next job (a notebook that fits twice), and a script that
        compares weights with CPU tensors after ``fit`` works as under Lightning. The next stage moves
        the module back (``setup_module``); ``optimizer.load_state_dict`` or the first step brings the
        optimizers' state along. Nothing to do on the CPU.
        """
        if self.module is None or self.root_device.type == "cpu":
            return
        for optimizer in optimizers:
            optimizer_state_to(optimizer, torch.device("cpu"))
        self.module.cpu()

    def on_exception(self, exception: BaseException) -> None:
        """A step raised: a multi-process strategy makes sure the other ranks end too."""

    def explain_failure(self, exception: BaseException) -> BaseException | None:
        """A clearer error for a failure a stage ended with (e.g. a collective timing out), or None."""
        return None

    # ---- the step ------------------------------------------------------------------------
    def batch_to_device(self, batch: Any) -> Any:
        from trainer.move import move_to_device

        return move_to_device(batch, self.root_device)

    def batch_mover(self) -> Callable[[Any], Any] | None:
        """What the loops apply to each batch, looked up once per epoch: ``batch_to_device`` (its imports
        resolved here, not per batch), or None on CPU, where DataLoaders already hand out the batches,
        so a step pays nothing."""
        if self.root_device.type == "cpu":
            return None
        if type(self).batch_to_device is not Strategy.batch_to_device:
            return self.batch_to_device
        from trainer.move import device_mover

        return device_mover(self.root_device)

    def step_function(self, stage: Stage) -> Callable[..., Any]:
        """What the loops call per batch of ``stage``, looked up once per epoch.

        By default the module's own bound ``<stage>_step``, so a step costs no extra call;
        strategies whose wrapper must see the forward (DDP, DP) route through it instead.
        """
        assert self.module is not None, "setup_module() must run before a step"
        return getattr(self.module, f"{stage}_step")  # type: ignore[no-any-return]

    def backward(self, closure_loss: torch.Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Lightning's ``Strategy.backward`` of manual optimization's ``manual_backward``: the module's ``backward``
        hook on the loss (scaled by the precision already); ``optimizer`` is Lightning's argument, unused here."""
        assert self.module is not None, "setup_module() must run before a backward"
        self.module.backward(closure_loss, *args, **kwargs)  # type: ignore[operator]
        return closure_loss

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Context for an accumulation micro-batch whose gradients need no sync yet."""
        return contextlib.nullcontext()

    def manual_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Manual optimization: around each ``manual_backward``; when it exits, the gradients are the global batch's.

        Lightning's rule: ``clip_gradients``, ``on_after_backward`` and any read of ``p.grad`` between
        ``manual_backward`` and ``opt.step()`` see the averaged gradients, and the step averages nothing
        more. One process already has them; a data-parallel strategy whose wrapper does not average in
        backward averages what the backward added as the context exits.
        """
        return contextlib.nullcontext()

    def clip_gradients(self, parameters: list[torch.nn.Parameter], value: float, algorithm: str) -> None:
        """Clip gradients (already at their true scale) by total norm or by value.

        A strategy whose gradients are sharded computes the norm over every shard instead.
        """
        if algorithm == "norm":
            torch.nn.utils.clip_grad_norm_(parameters, value)
        else:
            torch.nn.utils.clip_grad_value_(parameters, value)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (collective)."""
        return [obj]

    def reduce_boolean_decision(self, flag: bool) -> bool:
        """True on every rank if it is True on any rank (collective)."""
        return flag

    def start_boolean_decision(self, flag: bool) -> Callable[[], bool]:
        """``reduce_boolean_decision`` started now and read when the returned function is called.

        Every rank must start and read it at the same point. A loop that starts it after one batch and
        reads it after the next hides the collective's latency behind that batch's work.
        """
        decision = self.reduce_boolean_decision(flag)
        return lambda: decision

    # ---- checkpoints ---------------------------------------------------------------------
    def module_state_dict(self) -> dict[str, torch.Tensor]:
        """The user's module's state, never with a wrapper's prefix."""
        assert self.module is not None
        return self.module.state_dict()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """What a checkpoint stores of an optimizer (a sharding strategy gathers or shards it)."""
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Also takes a state keyed by parameter name (an FSDP checkpoint's) for this strategy's module."""
        from trainer.checkpoint.optimizer_names import index_keyed_optimizer_state

        assert self.module is not None
        optimizer.load_state_dict(index_keyed_optimizer_state(self.module, optimizer, state))

    def load_module_weights(self, module: nn.Module, checkpoint: Mapping[str, Any]) -> None:
        """Put a checkpoint's weights into the user's module (before ``setup_module`` wraps it)."""
        from trainer.checkpoint.io import load_weights

        load_weights(module, checkpoint, strict=getattr(module, "strict_loading", True))

    def save_checkpoint(self, checkpoint: Mapping[str, Any], path: Path, storage_options: Any = None) -> None:
        """Collective: every rank built the same checkpoint; global rank zero writes it atomically (``storage_options``
        go to the CheckpointIO: a custom one may use them; the default refuses them)."""
        if self.is_global_zero:
            if storage_options is None:  # a CheckpointIO written for Lightning may take two arguments only
                self.checkpoint_io.save_checkpoint(dict(checkpoint), path)
            else:
                self.checkpoint_io.save_checkpoint(dict(checkpoint), path, storage_options=storage_options)
        self.barrier()

    def load_checkpoint(self, path: Path, weights_only: bool | None = True) -> dict[str, Any]:
        """Read a checkpoint on every rank (weights_only unless False; tensors on the CPU), a file or a sharded
        directory.

        A sharded directory (FSDP's) is read whole, in full tensors, so it loads into any strategy and world size.
        """
        from trainer.checkpoint.sharded import load_sharded

        if Path(path).is_dir():
            return load_sharded(path)
        loaded: dict[str, Any] = self.checkpoint_io.load_checkpoint(path, map_location="cpu", weights_only=weights_only)
        return loaded

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.root_device}, world_size={self.world_size})"


def optimizer_state_to(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move an optimizer's state tensors to ``device`` (Lightning's ``_optimizer_to_device``).

    ``step`` stays where it is: torch keeps it on the CPU unless the optimizer is capturable.
    """
    from lightning_utilities.core.apply_func import apply_to_collection

    def move(value: torch.Tensor) -> torch.Tensor:
        return value.to(device)

    for param, state in optimizer.state.items():
        if not isinstance(state, dict):
            optimizer.state[param] = apply_to_collection(state, torch.Tensor, move)
            continue
        for key, value in state.items():
            if key != "step":
                state[key] = apply_to_collection(value, torch.Tensor, move)
