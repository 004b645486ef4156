"""``Tuner(trainer)``: Lightning's ``lr_find`` and ``scale_batch_size``, each a short run of the Trainer's own
stage with only its recording callback, no loggers and no checkpoints, after which the module, the RNGs
and the Trainer are as they were (``state.isolated``) but for the value tuned.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

import trainer.tuner.batch_size as bs
from trainer.data.resolve import is_datamodule
from trainer.exceptions import MisconfigurationException
from trainer.optim import parse_optimizers
from trainer.tuner.lr_finder import MODES as LR_MODES
from trainer.tuner.lr_finder import LRFinder, LRRecorder
from trainer.tuner.state import attr_holders, get_attr, isolated, set_attr

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.trainer import Trainer

METHODS = ("fit", "validate", "test", "predict")


class Tuner:
    """``Tuner(trainer).lr_find(model, ...)`` / ``.scale_batch_size(model, ...)``, as in ``lightning.pytorch.tuner``."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def lr_find(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Train ``num_training`` steps with a rising learning rate; with ``update_attr``, set the module's
        ``lr``/``learning_rate`` (or ``attr_name``) to the suggestion. None under ``fast_dev_run``."""
        if method != "fit":
            raise MisconfigurationException(
                f"lr_find(method={method!r}): method='fit' is the only valid configuration."
            )
        _check_loaders(train_dataloaders, val_dataloaders, dataloaders, method)
        _check_lr_args(min_lr, max_lr, num_training, mode, early_stop_threshold)
        if not model.automatic_optimization:
            raise MisconfigurationException(
                "lr_find() steps the optimizer itself and cannot tune manual optimization (automatic_optimization="
                "False): tune the learning rate in your own loop over a few steps."
            )
        trainer = self._trainer
        if trainer.fast_dev_run:
            warnings.warn("Skipping learning rate finder since `fast_dev_run` is enabled.", stacklevel=2)
            return None
        if is_datamodule(train_dataloaders):
            datamodule, train_dataloaders = train_dataloaders, None
        if update_attr:
            attr_name = _lr_attr_name(model, datamodule, attr_name)
        finder = LRFinder(mode, min_lr, max_lr, num_training)
        recorder = LRRecorder(num_training, early_stop_threshold)
        with isolated(trainer, model, [recorder], {"validation": 0}, max_steps=num_training), _rising_lr(model, finder):
            trainer.fit(model, train_dataloaders, val_dataloaders, datamodule)
        finder.results = trainer.strategy.broadcast({"lr": recorder.lrs, "loss": recorder.losses})
        if update_attr and (lr := finder.suggestion()) is not None:
            set_attr(model, datamodule, attr_name, lr)
        return finder

    def scale_batch_size(
        self,
        model: Module,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> int | None:
        """The largest batch size (``batch_arg_name`` on the module, its hparams or the DataModule) whose
        ``steps_per_trial`` steps of ``method`` fit in memory; left set there. None under ``fast_dev_run``."""
        _check_loaders(train_dataloaders, val_dataloaders, dataloaders, method)
        _check_batch_args(mode, steps_per_trial, init_val, max_trials, margin, max_val)
        trainer = self._trainer
        if trainer.world_size > 1:
            raise MisconfigurationException(
                "Tuning the batch size is currently not supported with distributed strategies."
            )
        if is_datamodule(train_dataloaders):
            datamodule, train_dataloaders = train_dataloaders, None
        if (train_dataloaders, val_dataloaders, dataloaders) != (None, None, None):
            raise MisconfigurationException(
                "The batch size finder cannot be used with dataloaders passed directly to the tuner: each trial asks "
                "for new loaders. Build them in the LightningModule's or the DataModule's *_dataloader() methods from "
                f"self.{batch_arg_name}."
            )
        if not attr_holders(model, datamodule, batch_arg_name):
            raise AttributeError(
                f"Field {batch_arg_name} not found in `model`, `datamodule`, nor their `hparams` attributes."
            )
        if trainer.fast_dev_run:
            warnings.warn("Skipping batch size scaler since `fast_dev_run` is enabled.", stacklevel=2)
            return None
        lengths = bs.DatasetLength()
        stage = "validation" if method in ("fit", "validate") else method
        limits: dict[str, int | float] = {stage: steps_per_trial}
        if method == "fit":
            limits["train"] = 1.0
        max_steps = steps_per_trial if method == "fit" else None
        with isolated(trainer, model, [lengths], limits, max_steps):
            search = bs.Search(
                lambda: _run_trainer_method(trainer, model, method, datamodule),
                lambda: int(get_attr(model, datamodule, batch_arg_name)),
                lambda size: set_attr(model, datamodule, batch_arg_name, size),
                lengths,
            )
            size, _ = search.adjust("", max_val, value=init_val)
            if mode == "power":
                size = bs.power_scaling(search, size, max_trials, max_val)
            else:
                size = bs.binsearch_scaling(search, size, max_trials, max_val, margin)
        set_attr(model, datamodule, batch_arg_name, size)
        return size


def _run_trainer_method(trainer: Trainer, model: Module, method: str, datamodule: Any) -> None:
    if method == "fit":
        trainer.fit(model, datamodule=datamodule)
    elif method == "predict":
        trainer.predict(model, datamodule=datamodule, return_predictions=False)
    else:
        getattr(trainer, method)(model, datamodule=datamodule, verbose=False)


@contextlib.contextmanager
def _rising_lr(model: Module, finder: LRFinder) -> Iterator[None]:
    """The module's ``configure_optimizers``, its one optimizer set to ``min_lr`` and driven by the finder's
    schedule (its own schedulers left out); the optimizers' states are put back afterwards."""
    original = model.configure_optimizers
    saved: list[tuple[torch.optim.Optimizer, dict[str, Any]]] = []

    def configure_optimizers() -> Any:
        optimizers, _ = parse_optimizers(original())
        saved.extend((opt, copy.deepcopy(opt.state_dict())) for opt in optimizers)
        if len(optimizers) != 1:
            raise MisconfigurationException(
                f"configure_optimizers() returned {len(optimizers)} optimizers, but the learning rate finder only "
                "works with a single optimizer."
            )
        (optimizer,) = optimizers
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = finder.lr_min
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, finder.factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    own = vars(model).get("configure_optimizers", _NONE)  # a module may set its own on the instance
    object.__setattr__(model, "configure_optimizers", configure_optimizers)
    try:
        yield
    finally:
        if own is _NONE:
            object.__delattr__(model, "configure_optimizers")
        else:
            object.__setattr__(model, "configure_optimizers", own)
        for optimizer, state in saved:
            optimizer.load_state_dict(state)


_NONE = object()


def _lr_attr_name(model: Module, datamodule: Any, attr_name: str) -> str:
    if attr_name:
        if not attr_holders(model, datamodule, attr_name):
            raise AttributeError(
                f"The attribute name for the learning rate was set to {attr_name}, but could not find this as a field "
                "in `model` or `model.hparams`."
            )
        return attr_name
    for name in ("lr", "learning_rate"):
        if attr_holders(model, datamodule, name):
            return name
    raise AttributeError(
        "When using the learning rate finder, either `model` or `model.hparams` should have one of these fields: "
        "('lr', 'learning_rate'). If your model has a different name for the learning rate, set it with "
        "`.lr_find(attr_name=...)`."
    )


def _check_loaders(train: Any, val: Any, dataloaders: Any, method: str) -> None:
    if method not in METHODS:
        raise MisconfigurationException(f"method {method!r} is invalid. Should be one of {METHODS}.")
    if method == "fit" and dataloaders is not None:
        raise MisconfigurationException(
            "In tuner with method='fit', `dataloaders` argument should be None, please consider setting "
            "`train_dataloaders` and `val_dataloaders` instead."
        )
    if method != "fit" and (train is not None or val is not None):
        raise MisconfigurationException(
            f"In tuner with `method`={method!r}, `train_dataloaders` and `val_dataloaders` arguments should be None, "
            "please consider setting `dataloaders` instead."
        )


def _check_lr_args(min_lr: float, max_lr: float, num_training: int, mode: str, threshold: float | None) -> None:
    if mode not in LR_MODES:
        raise MisconfigurationException(f"lr_find(mode={mode!r}): choose one of {LR_MODES}.")
    if not 0 < min_lr < max_lr:
        raise MisconfigurationException(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): need 0 < min_lr < max_lr.")
    if not isinstance(num_training, int) or num_training < 1:
        raise MisconfigurationException(f"lr_find(num_training={num_training!r}): give a positive number of steps.")
    if threshold is not None and threshold <= 0:
        raise MisconfigurationException(
            f"lr_find(early_stop_threshold={threshold}): give a positive factor, or None to never stop."
        )


def _check_batch_args(mode: str, steps: int, init_val: int, max_trials: int, margin: float, max_val: int) -> None:
    if mode not in bs.MODES:
        raise MisconfigurationException(f"scale_batch_size(mode={mode!r}): choose one of {bs.MODES}.")
    for name, value in (("steps_per_trial", steps), ("init_val", init_val), ("max_trials", max_trials)):
        if not isinstance(value, int) or value < 1:
            raise MisconfigurationException(f"scale_batch_size({name}={value!r}): give a positive int.")
    if not 0.0 <= margin < 1.0:
        raise MisconfigurationException(f"`margin` should be between 0 and 1. Found margin={margin}")
    if not isinstance(max_val, int) or max_val < init_val:
        raise MisconfigurationException(f"scale_batch_size(max_val={max_val!r}): give an int >= init_val ({init_val}).")
