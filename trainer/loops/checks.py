"""Checks at a stage's start, so a mistake fails before any work: nothing a user wrote is ignored.

A module or callback that defines a hook Lightning 1.x had and Lightning 2 removed (or that we do
not call) is refused by name, with what to use instead; so are flags that have no effect in manual
optimization, and several optimizers in automatic mode.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.exceptions import (
    MisconfigurationAttributeError,
    MisconfigurationException,
    MisconfigurationRuntimeError,
)
from trainer.user_warnings import PossibleUserWarning

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

_REMOVED_FROM_BOTH = {  # Lightning 1.x hooks of modules and callbacks alike
    "on_epoch_start": "use on_train_epoch_start() (or on_validation_epoch_start(), ...)",
    "on_epoch_end": "use on_train_epoch_end() (or on_validation_epoch_end(), ...)",
    "on_batch_start": "use on_train_batch_start()",
    "on_batch_end": "use on_train_batch_end()",
    "on_pretrain_routine_start": "use on_fit_start()",
    "on_pretrain_routine_end": "use on_fit_start()",
}
_EPOCH_END = "collect what you need in the step (e.g. a list on self) and use it in on_{}_epoch_end()"
UNCALLED_MODULE_HOOKS = {
    "training_epoch_end": _EPOCH_END.format("train"),
    "validation_epoch_end": _EPOCH_END.format("validation"),
    "test_epoch_end": _EPOCH_END.format("test"),
    "training_step_end": "do that work at the end of training_step",
    "validation_step_end": "do that work at the end of validation_step",
    "test_step_end": "do that work at the end of test_step",
    **_REMOVED_FROM_BOTH,
    "on_hpc_save": "use on_save_checkpoint()",
    "on_hpc_load": "use on_load_checkpoint()",
    "configure_sharded_model": "it is called configure_model() now",
    "tbptt_split_batch": "truncated backpropagation through time was removed in Lightning 2; split the sequence "
    "in training_step with manual optimization",
    "get_progress_bar_dict": "log with self.log(..., prog_bar=True)",
    "on_post_move_to_device": "move or tie weights in configure_model() or setup()",
}
UNCALLED_CALLBACK_HOOKS = {
    "on_init_start": "do it in the callback's __init__",
    "on_init_end": "use setup()",
    **_REMOVED_FROM_BOTH,
    "on_keyboard_interrupt": "use on_exception() and check for KeyboardInterrupt",
    "on_configure_sharded_model": "use setup()",
    "on_before_accelerator_backend_setup": "use setup()",
}


def check_uncalled_hooks(module: Module, callbacks: list[Any]) -> None:
    """Refuse hooks a Lightning 1.x module or callback may define that nothing here would call."""
    for obj, table, what in [(module, UNCALLED_MODULE_HOOKS, "module")] + [
        (cb, UNCALLED_CALLBACK_HOOKS, "callback") for cb in callbacks
    ]:
        for name, advice in table.items():
            if any(name in vars(cls) for cls in type(obj).__mro__[:-1]) or name in vars(obj):
                raise NotImplementedError(
                    f"{type(obj).__name__}.{name}() is a hook Lightning 2 removed and steadytrain never calls, so "
                    f"this {what}'s code would silently not run: {advice}."
                )


def check_fit(trainer: TrainerView, module: Module) -> None:
    """What fit needs from the module, and flags that cannot apply to how it optimizes."""
    from trainer.module import Module, written

    name = type(module).__name__
    if not written(module, "training_step"):
        raise MisconfigurationAttributeError(
            f"No `training_step()` method defined: {name} must define training_step(batch, batch_idx)."
        )
    optimizers = getattr(module, "configure_optimizers", None)  # None: set so by the user, as Lightning's tests do
    if optimizers is None or getattr(optimizers, "__func__", None) is Module.configure_optimizers:
        raise MisconfigurationAttributeError(
            f"No `configure_optimizers()` method defined: {name} must define configure_optimizers()."
        )
    trainer.strategy.check_fit(module)  # what the strategy cannot train (DP: manual optimization)
    if module.automatic_optimization:
        return
    if trainer.accumulate_grad_batches != 1:
        raise MisconfigurationException(
            "Automatic gradient accumulation is not supported for manual optimization: "
            f"accumulate_grad_batches={trainer.accumulate_grad_batches} has no effect with manual optimization "
            "(automatic_optimization=False): accumulate in training_step by stepping the optimizer every N batches."
        )
    if trainer.gradient_clip_val is not None:
        raise MisconfigurationException(
            "Automatic gradient clipping is not supported for manual optimization: gradient_clip_val has no "
            "effect with manual optimization (automatic_optimization=False): call "
            "self.clip_gradients(optimizer, gradient_clip_val=..., gradient_clip_algorithm=...) before "
            "optimizer.step() in training_step."
        )


def check_optimizers(module: Module, optimizers: list[Any]) -> None:
    """Automatic optimization steps one optimizer on one loss: Lightning's ``RuntimeError`` for more, or for a
    Lightning 1.x ``training_step(batch, batch_idx, optimizer_idx)``."""
    import inspect

    if "optimizer_idx" in inspect.signature(module.training_step).parameters:
        raise MisconfigurationRuntimeError(
            "Training with multiple optimizers is only supported with manual optimization. Remove the "
            "`optimizer_idx` argument from `training_step`, set `self.automatic_optimization = False` and access "
            "your optimizers in `training_step` with `opt1, opt2, ... = self.optimizers()`."
        )
    if module.automatic_optimization and len(optimizers) > 1:
        raise MisconfigurationRuntimeError(
            "Training with multiple optimizers is only supported with manual optimization: configure_optimizers() "
            f"returned {len(optimizers)} optimizers, but automatic optimization steps one on the loss training_step "
            "returns (both would step on the same loss). Set self.automatic_optimization = False in __init__ and "
            "step each optimizer in training_step (opt_a, opt_b = self.optimizers(); self.manual_backward(loss); "
            "opt_a.step(); ...)."
        )


def check_output_folders(trainer: TrainerView) -> None:
    """Refuse, on every rank, folders rank zero cannot write logs or checkpoints to."""
    from trainer.checkpoint.io import unwritable_reason

    problem = None
    if trainer.is_global_zero:
        folders = {"default_root_dir / the logger's folder": Path(trainer.run_folder)} if trainer.loggers else {}
        if trainer.checkpoint_callback is not None:
            folders["the checkpoint folder (ModelCheckpoint dirpath)"] = trainer.checkpoint_dir
        for what, folder in folders.items():
            if (reason := unwritable_reason(folder)) is not None:
                problem = f"{what} {folder} is not writable: {reason}. Choose a folder you can write to."
                break
    problem = trainer.strategy.broadcast(problem)
    if problem is not None:
        raise PermissionError(problem)


def warn_logging_gap(trainer: TrainerView, num_training_batches: int | float) -> None:
    """Lightning's warning when an epoch is shorter than ``log_every_n_steps``: training values would then
    reach the loggers less than once an epoch (the epoch values still arrive at every epoch end)."""
    if not trainer.is_global_zero or trainer.fast_dev_run:
        return
    if num_training_batches == 0:  # no training at all: say so (Lightning is silent), not a logging gap
        if trainer.limit_train_batches == 0:
            print("steadytrain: limit_train_batches=0: fit runs no training step (Lightning's rule).", flush=True)
        return
    every = trainer.log_every_n_steps
    if not trainer.loggers or num_training_batches >= every:
        return
    import warnings

    from trainer.user_warnings import PossibleUserWarning

    warnings.warn(
        f"The number of training batches ({int(num_training_batches)}) is smaller than the logging interval "
        f"Trainer(log_every_n_steps={every}): training step values reach the loggers only every {every} steps, "
        f"not in every epoch. Set a lower value for log_every_n_steps (e.g. {int(num_training_batches)}) if you "
        "want to see logs for the training epoch.",
        PossibleUserWarning,
        stacklevel=2,
    )


def warn_eval_modules(module: torch.nn.Module) -> None:
    """Lightning's warning when training starts with submodules in eval mode: the loop keeps each module's own mode
    (a frozen one stays frozen), so one left in eval by mistake would train with eval behaviour (dropout off)."""
    in_eval = [name for name, sub in module.named_modules() if not sub.training]
    if in_eval:
        warnings.warn(
            f"Found {len(in_eval)} module(s) in eval mode at the start of training. This may lead to unexpected "
            "behavior during training. If this is intentional, you can ignore this warning.",
            PossibleUserWarning,
            stacklevel=4,
        )


def check_module(module: Any, fn: str) -> None:
    """What fit/validate/test/predict run must be a Module, named as Lightning names it."""
    from trainer.module import Module

    if not isinstance(module, Module):
        raise TypeError(
            f"`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `{type(module).__name__}`: "
            f"Trainer.{fn}() takes a trainer.Module (Lightning's LightningModule)."
        )
