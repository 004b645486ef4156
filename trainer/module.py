"""``Module``: the user's model plus the steps and hooks the Trainer calls, with Lightning's names.

Every hook is a no-op here; the loops call only those a module (or a callback) overrides, so a
plain module pays nothing for them. The overridable steps (``backward``, ``optimizer_step``,
``optimizer_zero_grad``, ``configure_gradient_clipping``, ``lr_scheduler_step``,
``transfer_batch_to_device``) do what the Trainer does without them.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import nn

import trainer.hparams as hparams_lib
from trainer.exceptions import MisconfigurationException
from trainer.hparams import AttributeDict, HParams

if TYPE_CHECKING:
    from torchmetrics import Metric

    from trainer.loggers.base import Logger
    from trainer.view import TrainerView


class Module(nn.Module):
    """Subclass this: define ``training_step`` and ``configure_optimizers`` (the rest is optional).

    The arguments of your ``__init__`` are recorded as ``self.hparams`` (or those you choose with
    ``save_hyperparameters``) and stored in checkpoints, so ``YourModule.load_from_checkpoint(path)``
    can rebuild the module.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = hparams_lib.record_init_args(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "_trainer", None)
        object.__setattr__(self, "_automatic_optimization", True)

    # ---- what users define (declared, not defined: the loops run only the steps a module has) -------
    training_step: Callable[..., Any]
    """``(batch, batch_idx)`` -> a loss tensor, ``{"loss": tensor, ...}``, or None (manual optimization)."""
    validation_step: Callable[..., Any]
    """``(batch, batch_idx[, dataloader_idx])``: one validation batch; log its metrics with ``self.log``."""
    test_step: Callable[..., Any]
    """``(batch, batch_idx[, dataloader_idx])``, as ``validation_step``, for ``Trainer.test``."""
    # configure_optimizers() -> optimizer | [optimizers] | (optimizers, schedulers) | dict

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
        self.zero_grad(set_to_none=True)

    def on_validation_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_validation_model_train(self) -> None:
        self.trainer.model.train()

    def on_test_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_test_model_train(self) -> None:
        self.trainer.model.train()

    def on_predict_model_eval(self) -> None:
        self.trainer.model.eval()

    def on_predict_model_train(self) -> None:
        self.trainer.model.train()

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
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

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
        """Only ``optimizer``'s parameters require grad until ``untoggle_optimizer``; the others are frozen."""
        self._optimization().toggle(_unwrap(optimizer))

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the parameters ``toggle_optimizer`` froze back their ``requires_grad``."""
        self._optimization().untoggle()

    def _optimization(self) -> Any:
        optimization = self.trainer.fit_loop.optimization
        if optimization is None:
            raise RuntimeError(f"{type(self).__name__} has no optimizers yet: they exist during Trainer.fit().")
        return optimization

    # ---- facts about the run -------------------------------------------------------------
    # ---- hyper-parameters ----------------------------------------------------------------
    def save_hyperparameters(
        self,
        *args: Any,
        ignore: Sequence[str] | str | None = None,
        frame: types.FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Choose what ``self.hparams`` holds, as Lightning does; checkpoints and loggers get it.

        No ``args``: every ``__init__`` argument of this object on the call stack (base classes' and
        subclasses'), less ``ignore``. Argument names: those only. One dict or argparse.Namespace: its
        items (a checkpoint passes them back as that argument). ``frame``: the ``__init__`` frame to
        start reading from. ``logger=False`` keeps them from the loggers. Values that are not plain
        (modules, tensors) are left out of checkpoints with a warning: pass them to
        ``load_from_checkpoint`` again, or ``ignore`` them.
        """
        hparams_lib.save_hyperparameters(self, args, ignore, frame, logger)

    @property
    def hparams(self) -> AttributeDict:
        """The hyper-parameters (``self.hparams.lr``); changes here go into checkpoints."""
        return self._hparams_state().values

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyper-parameters as they were saved (what the loggers get at fit start)."""
        return hparams_lib.frozen(self._hparams_state().initial)

    def _hparams_state(self) -> HParams:
        return hparams_lib.state_of(self)

    @property
    def trainer(self) -> TrainerView:
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer; call Trainer.fit(module) first.")
        return trainer  # type: ignore[no-any-return]

    @property
    def device(self) -> torch.device:
        trainer = self.__dict__.get("_trainer")
        if trainer is not None:
            return trainer.strategy.root_device  # type: ignore[no-any-return]
        param = next(self.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

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

        Lightning's signature. Training defaults to per step, evaluation to per epoch (a
        batch-size-weighted mean). As in Lightning, each rank keeps its own value unless
        ``sync_dist=True``, which reduces an epoch value over every sample of every rank (the
        single-device value); ``rank_zero_only=True`` says only rank 0 logs it. A torchmetrics
        ``Metric`` is computed (synced) and reset at each epoch end. With several evaluation loaders
        the key gets ``/dataloader_idx_<i>`` unless ``add_dataloader_idx=False``. ``metric_attribute``
        is accepted and not needed here.
        """
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            raise RuntimeError(f"self.log({name!r}, ...) needs a running Trainer (call it from a step or hook).")
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
        trainer.metric_log.results.log(
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
        )

    def log_dict(self, values: Mapping[str, float | torch.Tensor | Metric], **kwargs: Any) -> None:
        """``log`` each item (a torchmetrics ``MetricCollection`` works too)."""
        for name, value in values.items():
            self.log(name, value, **kwargs)

    # ---- checkpoints ---------------------------------------------------------------------
    @classmethod
    def load_from_checkpoint(
        cls,
        path: str | Path,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
        trusted_classes: tuple[type, ...] = (),
        **overrides: Any,
    ) -> Self:
        """Rebuild the module from a checkpoint's hyper-parameters (``overrides`` win) and weights.

        As in Lightning, saved values ``__init__`` does not take are dropped (unless it takes
        ``**kwargs``). Values that were not plain are not in the checkpoint: pass them here. The file
        is read with ``weights_only=True``; ``trusted_classes`` allow-lists your own types. A sharded
        checkpoint directory (``strategy="fsdp"``) loads too, on one process.
        """
        from trainer.checkpoint.rebuild import rebuild_module

        return rebuild_module(cls, path, map_location, strict, trusted_classes, overrides)

    def primitive_hparams(self) -> dict[str, Any]:
        """The hyper-parameters a weights-only checkpoint can hold (others are named, not stored)."""
        return hparams_lib.plain_values(self.hparams)[0]


def _unwrap(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside what ``self.optimizers()`` returned."""
    return getattr(optimizer, "optimizer", optimizer)  # type: ignore[no-any-return]
