"""``Module``: the user's model plus the steps and hooks the Trainer calls."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from torchmetrics import Metric

    from trainer.trainer import Trainer

_PRIMITIVES = (bool, int, float, str, type(None))


def _record_init_args(init: Any) -> Any:
    """Wrap a subclass ``__init__`` so the outermost call's arguments become ``hparams``."""

    @functools.wraps(init)
    def wrapper(self: Module, *args: Any, **kwargs: Any) -> None:
        outermost = not self.__dict__.get("_hparams_recorded", False)
        if outermost:
            object.__setattr__(self, "_hparams_recorded", True)
        init(self, *args, **kwargs)
        if outermost:
            bound = inspect.signature(init).bind(self, *args, **kwargs)
            bound.apply_defaults()
            params = dict(bound.arguments)
            params.pop("self", None)
            for name, param in inspect.signature(init).parameters.items():
                if param.kind is param.VAR_KEYWORD:
                    params.update(params.pop(name, {}))
                elif param.kind is param.VAR_POSITIONAL:
                    params.pop(name, None)
            object.__setattr__(self, "_hparams", params)

    return wrapper


class Module(nn.Module):
    """Subclass this: define ``training_step`` and ``configure_optimizers`` (the rest is optional).

    The arguments of your ``__init__`` are recorded as ``self.hparams`` and stored in
    checkpoints, so ``YourModule.load_from_checkpoint(path)`` can rebuild the module.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _record_init_args(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "_trainer", None)

    # ---- what users define ---------------------------------------------------------------
    # training_step(batch, batch_idx) -> loss tensor or {"loss": tensor, ...}
    # validation_step / test_step / predict_step(batch, batch_idx)
    # configure_optimizers() -> optimizer | [optimizers] | (optimizers, schedulers) | dict

    def configure_optimizers(self) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} must define configure_optimizers() returning an optimizer, a list of "
            "them, (optimizers, schedulers) or {'optimizer': ..., 'lr_scheduler': ...}."
        )

    # ---- hooks (no-ops) ------------------------------------------------------------------
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

    # ---- facts about the run -------------------------------------------------------------
    @property
    def hparams(self) -> dict[str, Any]:
        """The ``__init__`` arguments this module was built with."""
        return dict(self.__dict__.get("_hparams", {}))

    @property
    def trainer(self) -> Trainer:
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer; call Trainer.fit(module) first.")
        return trainer

    @property
    def device(self) -> torch.device:
        trainer = self.__dict__.get("_trainer")
        if trainer is not None:
            return trainer.strategy.root_device
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

    # ---- logging -------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: float | torch.Tensor | Metric,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        prog_bar: bool = False,
        logger: bool = True,
        sync_dist: bool = False,
        batch_size: int | None = None,
        reduce_fx: str = "mean",
    ) -> None:
        """Record a value for the loggers, the progress bar and callbacks (e.g. ``monitor=``).

        Training defaults to per step, evaluation to per epoch (a batch-size-weighted mean).
        ``sync_dist`` reduces across ranks at the epoch end; a torchmetrics ``Metric`` is
        computed (synced) and reset at each epoch end.
        """
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            raise RuntimeError(f"self.log({name!r}, ...) needs a running Trainer (call it from a step or hook).")
        trainer.results.log(name, value, on_step, on_epoch, prog_bar, logger, sync_dist, batch_size, reduce_fx)

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
    ) -> Module:
        """Rebuild the module from a checkpoint's hyper-parameters (``overrides`` win) and weights.

        The file is read with ``weights_only=True``; ``trusted_classes`` allow-lists your own types.
        """
        from trainer.checkpoint import load_checkpoint, load_weights

        checkpoint = load_checkpoint(path, map_location=map_location, trusted_classes=trusted_classes)
        params = {**checkpoint.get("hparams", {}), **overrides}
        module = cls(**params)
        load_weights(module, checkpoint, strict=strict)
        return module

    def primitive_hparams(self) -> dict[str, Any]:
        """The hyper-parameters a weights-only checkpoint can hold (others are named, not stored)."""
        return {k: v for k, v in self.hparams.items() if _is_primitive(v)}


def _is_primitive(value: Any) -> bool:
    if isinstance(value, _PRIMITIVES):
        return True
    if isinstance(value, list | tuple):
        return all(_is_primitive(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_primitive(v) for k, v in value.items())
    return False
