"""``Module``: the user's model plus the steps and hooks the Trainer calls, with Lightning's names.

Every hook is a no-op here; the loops call only those a module (or a callback) overrides, so a
plain module pays nothing for them. The overridable steps (``backward``, ``optimizer_step``,
``optimizer_zero_grad``, ``configure_gradient_clipping``, ``lr_scheduler_step``,
``transfer_batch_to_device``) do what the Trainer does without them.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import nn

import trainer.hparams as hparams_lib
from trainer.exceptions import MisconfigurationException
from trainer.hparams import HyperparametersMixin
from trainer.log_rules import loggable_error

if TYPE_CHECKING:
    from torchmetrics import Metric

    from trainer.loggers.base import Logger
    from trainer.view import TrainerView


class Module(HyperparametersMixin, nn.Module):
    """Subclass this: define ``training_step`` and ``configure_optimizers`` (the rest is optional).

    The arguments of your ``__init__`` are recorded as ``self.hparams`` (or those you choose with
    ``save_hyperparameters``) and stored in checkpoints, so ``YourModule.load_from_checkpoint(path)``
    can rebuild the module.
    """

    # TorchScript compiles what forward reaches and would try these properties too: they are no part of a model
    __jit_unused_properties__: list[str] = [  # TorchScript reads this name
        "example_input_array",
        "on_gpu",
        "current_epoch",
        "global_step",
        "global_rank",
        "local_rank",
        "world_size",
        "logger",
        "loggers",
        "automatic_optimization",
        "trainer",
        "fabric",
        "strict_loading",
        "device",
        "device_mesh",
        "dtype",
        "hparams",
        "hparams_initial",
    ]
    _scripting = False  # True while to_torchscript runs: ``trainer`` then reads None instead of raising

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = hparams_lib.record_init_args(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "_trainer", None)
        object.__setattr__(self, "_automatic_optimization", True)

    # ---- what users define: the loops run only the steps and loader hooks a module overrides ----------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """``(batch, batch_idx)`` -> a loss tensor, ``{"loss": tensor, ...}``, or None (manual optimization)."""
        raise MisconfigurationException("`training_step` must be implemented to be used with the Lightning Trainer")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """``(batch, batch_idx[, dataloader_idx])``: one validation batch; log its metrics with ``self.log``.
        Not overridden: fit does not validate."""
        warnings.warn("`validation_step` must be implemented to be used with the Lightning Trainer", stacklevel=2)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """``(batch, batch_idx[, dataloader_idx])``, as ``validation_step``, for ``Trainer.test``."""
        warnings.warn("`test_step` must be implemented to be used with the Lightning Trainer", stacklevel=2)

    def train_dataloader(self) -> Any:
        """The training loader, where ``fit`` is given none (nor a DataModule)."""
        raise MisconfigurationException("`train_dataloader` must be implemented to be used with the Lightning Trainer")

    def val_dataloader(self) -> Any:
        raise MisconfigurationException("`val_dataloader` must be implemented to be used with the Lightning Trainer")

    def test_dataloader(self) -> Any:
        raise MisconfigurationException("`test_dataloader` must be implemented to be used with the Lightning Trainer")

    def predict_dataloader(self) -> Any:
        raise MisconfigurationException(
            "`predict_dataloader` must be implemented to be used with the Lightning Trainer"
        )

    def configure_optimizers(self) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} must define configure_optimizers() returning an optimizer, a list of "
            "them, (optimizers, schedulers) or {'optimizer': ..., 'lr_scheduler': ...}."
        )

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        """By default the module's ``forward`` on the batch, as in Lightning."""
        return self(batch)

    def configure_callbacks(self) -> Sequence[Any] | Any:
        """Callbacks this module needs; one of a type already given to the Trainer replaces it."""
        return []

    def configure_model(self) -> None:
        """Build (large) layers here: called once per stage, before the strategy places the module."""

    # ---- set-up and teardown -------------------------------------------------------------------
    prepare_data_per_node: bool = True  # False: prepare_data on global rank zero only (a shared file system)

    def prepare_data(self) -> None:
        """Download or write data once per machine (local rank 0; the other ranks wait)."""

    def setup(self, stage: str) -> None:
        """Every rank, at the start of ``stage`` ("fit", "validate", "test" or "predict")."""

    def teardown(self, stage: str) -> None:
        """Every rank, at the end of ``stage``."""

    # ---- hooks around stages, epochs and batches (no-ops) ------------------------------------------
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Return -1 to end the epoch here."""
        return None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

    # ---- the module's mode around evaluation ---------------------------------------------------------
    def on_validation_model_zero_grad(self) -> None:
        """Before a validation inside fit: free the gradients (not inside an accumulation window)."""
        self.zero_grad()  # set_to_none, torch's default

    def on_validation_model_eval(self) -> None:
        self.trainer.model.eval()  # type: ignore[union-attr]  # attached while the hook runs

    def on_validation_model_train(self) -> None:
        self.trainer.model.train()  # type: ignore[union-attr]  # attached while the hook runs

    def on_test_model_eval(self) -> None:
        self.trainer.model.eval()  # type: ignore[union-attr]  # attached while the hook runs

    def on_test_model_train(self) -> None:
        self.trainer.model.train()  # type: ignore[union-attr]  # attached while the hook runs

    def on_predict_model_eval(self) -> None:
        self.trainer.model.eval()  # type: ignore[union-attr]  # attached while the hook runs

    # ---- overridable steps ---------------------------------------------------------------------------
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move every tensor (or object with ``.to``) of the batch to ``device``."""
        from trainer.move import move_to_device

        return move_to_device(batch, device)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """The backward pass (``loss`` is already scaled under fp16)."""
        loss.backward(*args, **kwargs)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad()

    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Callable[[], Any] | None = None
    ) -> None:
        """Step ``optimizer``; ``optimizer_closure`` runs training_step, zero_grad and backward (call it)."""
        optimizer.step(closure=optimizer_closure)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip before each step; by default with the Trainer's ``gradient_clip_val``/``_algorithm``."""
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step a scheduler when its interval and frequency say so (``metric`` for ReduceLROnPlateau)."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    # ---- optimization helpers --------------------------------------------------------------------------
    @property
    def automatic_optimization(self) -> bool:
        """False: ``training_step`` calls backward and steps the optimizers itself (``manual_backward``)."""
        return bool(self.__dict__.get("_automatic_optimization", True))

    @automatic_optimization.setter
    def automatic_optimization(self, value: bool) -> None:
        object.__setattr__(self, "_automatic_optimization", bool(value))

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer, or a list of them; their ``step`` runs through precision and strategy."""
        optimization = self._optimization()
        found = optimization.wrapped if use_pl_optimizer else optimization.optimizers
        return found[0] if len(found) == 1 else list(found)

    def lr_schedulers(self) -> Any:
        """The LR scheduler, a list of them, or None."""
        schedulers = [config.scheduler for config in self._optimization().lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward()`` with the Trainer's loss scaling and the backward hooks."""
        self._optimization().backward(loss, *args, **kwargs)

    def clip_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip ``optimizer``'s gradients ("norm", the default, or "value") at their true scale."""
        self._optimization().clip_gradients(_unwrap(optimizer), gradient_clip_val, gradient_clip_algorithm)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Only ``optimizer``'s parameters require grad until ``untoggle_optimizer``: every other optimizer's are
        frozen (so a GAN's generator step leaves no gradients on the discriminator)."""
        optimizer = _unwrap(optimizer)
        saved: dict[torch.Tensor, bool] = {}
        for opt in self.trainer.optimizers:
            for group in opt.param_groups:
                for param in group["params"]:
                    if param not in saved:
                        saved[param] = param.requires_grad
                        param.requires_grad = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.requires_grad = saved.get(param, param.requires_grad)
        object.__setattr__(self, "_toggled", saved)

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the parameters ``toggle_optimizer`` froze back their ``requires_grad``."""
        saved = self.__dict__.get("_toggled", {})
        for param, requires_grad in saved.items():
            param.requires_grad = requires_grad
        object.__setattr__(self, "_toggled", {})

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """``toggle_optimizer`` for the block, ``untoggle_optimizer`` after it (also when it raises)."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def _optimization(self) -> Any:
        optimization = self.trainer.fit_loop.optimization
        if optimization is None:
            raise RuntimeError(f"{type(self).__name__} has no optimizers yet: they exist during Trainer.fit().")
        return optimization

    # ---- facts about the run -------------------------------------------------------------
    @property
    def trainer(self) -> TrainerView:
        trainer = self.__dict__.get("_trainer")
        if trainer is None and not Module._scripting:  # TorchScript reads every attribute (pytorch#67146)
            raise RuntimeError(
                f"{type(self).__qualname__} is not attached to a `Trainer`: call Trainer.fit(module) first."
            )
        return trainer  # type: ignore[no-any-return,return-value]

    @trainer.setter
    def trainer(self, trainer: TrainerView | None) -> None:
        """Attach (or with None detach) this module and every ``Module`` inside it, as Lightning's setter."""
        for child in self.children():
            if isinstance(child, Module):
                child.trainer = trainer
        object.__setattr__(self, "_trainer", trainer)

    @property
    def device(self) -> torch.device:
        trainer = self.__dict__.get("_trainer")
        if trainer is not None:
            return trainer.strategy.root_device  # type: ignore[no-any-return]
        param = next(self.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the module's floating-point weights (the default dtype if it has none)."""
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    @dtype.setter
    def dtype(self, value: Any) -> None:
        raise RuntimeError(f"Cannot set the dtype explicitly (to {value}). Please use module.to(new_dtype).")

    @property
    def device_mesh(self) -> Any:
        """The strategy's ``DeviceMesh`` for ``configure_model`` to parallelize with (``ModelParallelStrategy``:
        "data_parallel" x "tensor_parallel"); None without a Trainer or under a strategy that builds none."""
        trainer = self.__dict__.get("_trainer")
        return trainer.strategy.module_mesh if trainer is not None else None

    @property
    def on_gpu(self) -> bool:
        """Whether the module is on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def strict_loading(self) -> bool:
        """Whether loading a checkpoint's ``state_dict`` into this module requires every key to match (Lightning's
        default True); set False for a module that leaves some weights out of its checkpoints."""
        return self.__dict__.get("_strict_loading") in (None, True)

    @strict_loading.setter
    def strict_loading(self, value: bool) -> None:
        object.__setattr__(self, "_strict_loading", value)

    @property
    def current_epoch(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.current_epoch if trainer is not None else 0

    @property
    def global_step(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.global_step if trainer is not None else 0

    @property
    def global_rank(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.global_rank if trainer is not None else 0

    @property
    def world_size(self) -> int:
        trainer = self.__dict__.get("_trainer")
        return trainer.world_size if trainer is not None else 1

    @property
    def local_rank(self) -> int:
        """This process's index on its machine (0 without a Trainer)."""
        trainer = self.__dict__.get("_trainer")
        return trainer.local_rank if trainer is not None else 0

    @property
    def logger(self) -> Logger | None:
        """The Trainer's first logger (None without a Trainer or loggers)."""
        trainer = self.__dict__.get("_trainer")
        return trainer.logger if trainer is not None else None

    @property
    def loggers(self) -> list[Logger]:
        """The Trainer's loggers ([] without a Trainer)."""
        trainer = self.__dict__.get("_trainer")
        return list(trainer.loggers) if trainer is not None else []

    @property
    def example_input_array(self) -> Any:
        """What ``forward`` takes: a tensor (``forward(x)``), a tuple (``forward(*x)``) or a dict
        (``forward(**x)``); ``ModelSummary`` runs it to show each layer's in and out sizes."""
        return self.__dict__.get("_example_input_array")

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        object.__setattr__(self, "_example_input_array", example)

    # ---- utilities -------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank zero only, through the progress bar while it draws (so it is not torn)."""
        if self.global_rank != 0:
            return
        trainer = self.__dict__.get("_trainer")
        bar = trainer.progress_bar_callback if trainer is not None else None
        if bar is not None:
            bar.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Every rank's tensors (numbers become tensors; collections keep their shape), stacked on a new
        first dimension. On one process they come back unchanged, as in Lightning. A collective: every
        rank must call it with the same shapes. ``sync_grads=True`` lets gradients flow back."""
        if group is not None:
            raise MisconfigurationException(
                "self.all_gather(group=...): tensors are gathered over all ranks only; leave group=None."
            )
        from lightning_utilities.core.apply_func import apply_to_collection

        device = self.device
        world_size = self.world_size
        strategy = self.trainer.strategy if world_size > 1 else None

        def gather(value: Any) -> torch.Tensor:
            tensor = torch.as_tensor(value, device=device)
            if strategy is None:
                return tensor
            if sync_grads:
                import torch.distributed.nn.functional as dist_fn

                return torch.stack(dist_fn.all_gather(tensor))
            return strategy.all_gather(tensor)

        return apply_to_collection(data, (torch.Tensor, int, float, bool), gather)

    def freeze(self) -> Self:
        """No parameter requires grad, and eval mode (for inference)."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> Self:
        """Every parameter requires grad again, and train mode."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    # ---- logging -------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: float | torch.Tensor | Metric,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record a value for the loggers, the progress bar and callbacks (e.g. ``monitor=``).

        Lightning's signature and rules. Training defaults to per step, evaluation and the hooks that run once
        per epoch to per epoch (a batch-size-weighted mean); hooks around a stage (``setup``, the loaders,
        ``on_fit_end``, ...) cannot log. As in Lightning, each rank keeps its own value unless
        ``sync_dist=True``, which reduces an epoch value over every sample of every rank (the single-device
        value); ``rank_zero_only=True`` says only rank 0 logs it. A torchmetrics ``Metric`` (an attribute of
        the module) is computed (synced) and reset at each epoch end. With several evaluation loaders the key
        gets ``/dataloader_idx_<i>`` unless ``add_dataloader_idx=False``. Without a Trainer (a step called in
        a unit test) it warns and records nothing, as Lightning does.
        """
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            if not (isinstance(value, torch.Tensor | numbers.Real) or hasattr(value, "compute")):
                raise loggable_error(name, value)
            warnings.warn(
                f"You are trying to `self.log({name!r}, ...)` but the `self.trainer` reference is not registered on "
                f"the model yet: {type(self).__name__} is not attached to a Trainer, so nothing is recorded.",
                stacklevel=2,
            )
            return
        if trainer.barebones:  # Lightning's rule: a warning, and nothing logged
            warnings.warn(
                f"You are trying to `self.log({name!r})` but `Trainer(barebones=True)` is configured. Logging can "
                "impact raw speed so it is disabled under this setting.",
                stacklevel=2,
            )
            return
        if enable_graph:
            raise MisconfigurationException(
                f"self.log({name!r}, enable_graph=True): logged values are detached here; log a copy."
            )
        if sync_dist_group is not None:
            raise MisconfigurationException(
                f"self.log({name!r}, sync_dist_group=...): values are reduced over all ranks only."
            )
        if rank_zero_only and sync_dist:
            raise MisconfigurationException(
                f"self.log({name!r}): rank_zero_only=True and sync_dist=True contradict each other."
            )
        if add_dataloader_idx and "/dataloader_idx_" in name:
            raise MisconfigurationException(
                f"You called `self.log` with the key `{name}` but it should not contain information about "
                "`dataloader_idx` when `add_dataloader_idx=True`: the suffix is added for you with several loaders."
            )
        metric_log = trainer.metric_log
        on_step, on_epoch = metric_log.levels(name, on_step, on_epoch)
        if metric_attribute is None:
            metric_log.check_value(self, name, value, logger)
        metric_log.results.log(
            name,
            value,
            on_step,
            on_epoch,
            prog_bar,
            True if logger is None else logger,
            False if rank_zero_only else sync_dist,
            batch_size,
            reduce_fx,
            add_dataloader_idx,
            metric_log.hook,
        )

    def log_dict(
        self,
        dictionary: Mapping[str, float | torch.Tensor | Metric],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """``log`` each item with the same options (Lightning's signature); a torchmetrics ``MetricCollection`` logs
        each of its metrics (as Lightning, its compute groups share their state instead of copying it)."""
        collection: Any = dictionary
        if hasattr(collection, "_enable_compute_groups"):  # a MetricCollection
            items = collection.items(keep_base=False, copy_state=not collection._enable_compute_groups)
        else:
            items = dictionary.items()
        for name, value in items:
            self.log(
                name,
                value,
                prog_bar=prog_bar,
                logger=logger,
                on_step=on_step,
                on_epoch=on_epoch,
                reduce_fx=reduce_fx,
                enable_graph=enable_graph,
                sync_dist=sync_dist,
                sync_dist_group=sync_dist_group,
                add_dataloader_idx=add_dataloader_idx,
                batch_size=batch_size,
                rank_zero_only=rank_zero_only,
            )

    # ---- export (trainer.export) ---------------------------------------------------------
    def to_torchscript(
        self,
        file_path: str | Path | None = None,
        method: str | None = "script",
        example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        """This module scripted (``method="script"``) or traced (``"trace"``, on ``example_inputs`` or
        ``example_input_array``) in eval mode, saved to ``file_path`` if given; its own mode is kept."""
        from trainer.export import to_torchscript

        return to_torchscript(self, file_path, method, example_inputs, **kwargs)

    def to_onnx(self, file_path: str | Path | BytesIO | None = None, input_sample: Any = None, **kwargs: Any) -> Any:
        """``torch.onnx.export`` on ``input_sample`` (default ``example_input_array``); kwargs go to it."""
        from trainer.export import to_onnx

        return to_onnx(self, file_path, input_sample, **kwargs)

    def to_tensorrt(
        self,
        file_path: str | Path | BytesIO | None = None,
        input_sample: Any = None,
        ir: str = "default",
        output_format: str = "exported_program",
        retrace: bool = False,
        default_device: str | torch.device = "cuda",
        **compile_kwargs: Any,
    ) -> Any:
        """``torch_tensorrt.compile`` of this module on a CUDA device, saved to ``file_path`` if given."""
        from trainer.export import to_tensorrt

        return to_tensorrt(self, file_path, input_sample, ir, output_format, retrace, default_device, **compile_kwargs)

    # ---- checkpoints ---------------------------------------------------------------------
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        *,
        trusted_classes: tuple[type, ...] = (),
        **kwargs: Any,
    ) -> Self:
        """Rebuild the module from a checkpoint's hyper-parameters and weights, as Lightning does.

        ``kwargs`` override the saved hyper-parameters; like them, they reach ``__init__`` only where it takes
        them (or takes ``**kwargs``). ``hparams_file`` (a ``.yaml`` or ``tags.csv``) replaces the saved ones.
        ``strict`` (default: ``strict_loading``) requires the keys to match. ``map_location`` None keeps tensors
        on the device they were saved from where this machine has it. The file is read with
        ``weights_only=True`` (None means the same); ``trusted_classes`` allow-lists your own types, and
        ``weights_only=False`` unpickles anything, for files you trust. A sharded checkpoint directory
        (``strategy="fsdp"``) loads too, on one process.
        """
        from trainer.checkpoint.rebuild import load_module

        return load_module(
            cls, checkpoint_path, map_location, hparams_file, strict, weights_only, trusted_classes, kwargs
        )

    def primitive_hparams(self) -> dict[str, Any]:
        """The hyper-parameters a weights-only checkpoint can hold (others are named, not stored)."""
        return hparams_lib.plain_values(self.hparams)[0]


def _unwrap(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside what ``self.optimizers()`` returned."""
    return getattr(optimizer, "optimizer", optimizer)  # type: ignore[no-any-return]


def written(module: Any, name: str) -> bool:
    """Whether the user wrote the step or loader hook ``name`` (``validation_step``, ``val_dataloader``, ...):
    ``Module``'s defaults are there only to say it was not, and the loops then skip what needs it."""
    from trainer.overrides import overrides

    if isinstance(module, Module):
        return overrides(module, name, Module)
    return callable(getattr(module, name, None))
