"""``lr_find``: the learning-rate range test run from a hook of ``fit`` (the ``LearningRateFinder`` callback's
``on_fit_start``, or the ``Tuner``'s), on a Trainer of its own (``trainer.tuner.trial``) that trains the fit's
own training data for ``num_training`` steps with the rate rising. Afterwards the module, its optimizers and the
RNGs are as before (``state.kept``), but for the rate: with ``update_attr`` the suggestion is set on the module's
``lr``/``learning_rate`` (or ``attr_name``) and on the fit's optimizers, so the fit goes on with it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

import trainer.tuner.stage as stage_lib
from trainer.exceptions import MisconfigurationException
from trainer.optim import parse_optimizers
from trainer.tuner.lr_finder import MODES, LRFinder, LRRecorder
from trainer.tuner.state import attr_holders, kept, set_attr
from trainer.tuner.trial import run_trial, trial_trainer

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

log = logging.getLogger(__name__)


def lr_find(
    trainer: TrainerView,
    module: Module,
    min_lr: float = 1e-8,
    max_lr: float = 1,
    num_training: int = 100,
    mode: str = "exponential",
    early_stop_threshold: float | None = 4.0,
    update_attr: bool = False,
    attr_name: str = "",
) -> LRFinder | None:
    """Train ``num_training`` steps with a rising learning rate and return the rates and losses; with
    ``update_attr``, set the suggestion as the learning rate. Called during ``fit``; None under ``fast_dev_run``.
    Validation does not run (its numbers are not used)."""
    check_lr_args(min_lr, max_lr, num_training, mode, early_stop_threshold)
    if stage_lib.running_method(trainer, "lr_find") != "fit":
        raise MisconfigurationException("method='fit' is the only valid configuration to run lr finder.")
    if trainer.fast_dev_run:
        warnings.warn("Skipping learning rate finder since `fast_dev_run` is enabled.", stacklevel=2)
        return None
    datamodule = trainer.datamodule
    if update_attr:
        attr_name = lr_attr_name(module, datamodule, attr_name)
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    recorder = LRRecorder(num_training, early_stop_threshold)
    with kept(trainer, module):
        runner = trial_trainer(trainer, [recorder], {"validation": 0}, max_steps=num_training)
        with _rising_lr(module, finder):
            run_trial(runner, "fit", module, train=trainer.fit_loop.data.requested())
        steps = runner.global_step
    if steps != num_training:
        log.info(f"LR finder stopped early after {steps} steps due to diverging loss.")
    finder.results = trainer.strategy.broadcast({"lr": recorder.lrs, "loss": recorder.losses})
    if update_attr and (lr := finder.suggestion()) is not None:
        set_attr(module, datamodule, attr_name, lr)
        for optimizer in trainer.optimizers:  # the fit goes on with it (Lightning's callback does the same)
            for group in optimizer.param_groups:
                group["lr"] = lr
        log.info(f"Learning rate set to {lr}")
    return finder


@contextlib.contextmanager
def _rising_lr(module: Module, finder: LRFinder) -> Iterator[None]:
    """The module's ``configure_optimizers``, its one optimizer set to ``min_lr`` and driven by the finder's
    schedule (its own schedulers left out); the optimizers' states are put back afterwards."""
    original = module.configure_optimizers
    saved: list[tuple[torch.optim.Optimizer, dict[str, Any]]] = []

    def configure_optimizers() -> Any:
        optimizers, _ = parse_optimizers(original())
        saved.extend((opt, copy.deepcopy(opt.state_dict())) for opt in optimizers)
        if len(optimizers) != 1:
            raise MisconfigurationException(
                f"`model.configure_optimizers()` returned {len(optimizers)}, but learning rate finder only works "
                "with single optimizer"
            )
        if not module.automatic_optimization:
            raise MisconfigurationException(
                "lr_find() steps the optimizer itself and cannot tune manual optimization (automatic_optimization="
                "False): tune the learning rate in your own loop over a few steps."
            )
        (optimizer,) = optimizers
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = finder.lr_min
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, finder.factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    own = vars(module).get("configure_optimizers", _NONE)  # a module may set its own on the instance
    object.__setattr__(module, "configure_optimizers", configure_optimizers)
    try:
        yield
    finally:
        if own is _NONE:
            object.__delattr__(module, "configure_optimizers")
        else:
            object.__setattr__(module, "configure_optimizers", own)
        for optimizer, state in saved:
            optimizer.load_state_dict(state)


_NONE = object()


def lr_attr_name(module: Module, datamodule: Any, attr_name: str) -> str:
    """The attribute the suggestion goes to: ``attr_name``, else ``lr`` or ``learning_rate``."""
    if attr_name:
        if not attr_holders(module, datamodule, attr_name):
            raise AttributeError(
                f"The attribute name for the learning rate was set to {attr_name}, but could not find this as a field "
                "in `model` or `model.hparams`."
            )
        return attr_name
    for name in ("lr", "learning_rate"):
        if attr_holders(module, datamodule, name):
            return name
    raise AttributeError(
        "When using the learning rate finder, either `model` or `model.hparams` should have one of these fields: "
        "('lr', 'learning_rate'). If your model has a different name for the learning rate, set it with "
        "`.lr_find(attr_name=...)`."
    )


def check_lr_args(min_lr: float, max_lr: float, num_training: int, mode: str, threshold: float | None) -> None:
    if mode not in MODES:
        raise MisconfigurationException(f"lr_find(mode={mode!r}): `mode` should be either of {MODES}.")
    if not 0 < min_lr < max_lr:
        raise MisconfigurationException(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): need 0 < min_lr < max_lr.")
    if not isinstance(num_training, int) or num_training < 1:
        raise MisconfigurationException(f"lr_find(num_training={num_training!r}): give a positive number of steps.")
    if threshold is not None and threshold <= 0:
        raise MisconfigurationException(
            f"lr_find(early_stop_threshold={threshold}): give a positive factor, or None to never stop."
        )
