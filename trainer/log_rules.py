"""Where ``self.log`` may be called and what it records there by default: Lightning's rules, by hook.

A hook that runs once per stage or epoch records epoch values only. The steps and the hooks around a
batch or a backward record either: training defaults to per step, evaluation to per epoch. The hooks
around a stage (set-up, the loaders, ``on_fit_start``, ``on_<stage>_end``) cannot log: nothing would reduce
or publish what they logged, so Lightning refuses it, and so do we. Predict keeps no logged values.
"""

from __future__ import annotations

from typing import Any

from trainer.exceptions import MisconfigurationException

EPOCH_LEVEL = frozenset(
    {
        "on_train_start",
        "on_train_epoch_start",
        "on_train_epoch_end",
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_test_start",
        "on_test_epoch_start",
        "on_test_epoch_end",
    }
)
# The hooks around a stage that the loops call through ``loops/hooks.py``. Code that runs before a stage or after
# it (``configure_optimizers``, the ``*_dataloader`` methods, ``prepare_data``, ``on_exception``) is refused as
# "outside" (``MetricLog.levels``). Unlike Lightning, hooks a running stage calls directly (the batch-transfer
# hooks, ``lr_scheduler_step``, ``on_save_checkpoint``) are not told apart: what they log counts as the step's.
NO_LOGGING = frozenset(
    {
        "setup",
        "teardown",
        "on_fit_start",
        "on_fit_end",
        "on_sanity_check_start",
        "on_sanity_check_end",
        "on_train_end",
        "on_validation_end",
        "on_test_end",
    }
)
_HINT = "log from a step or a hook that runs per batch or per epoch, or write to `self.logger.experiment` directly."


def levels(
    name: str, hook: str | None, training: bool, on_step: bool | None, on_epoch: bool | None
) -> tuple[bool, bool]:
    """``(on_step, on_epoch)`` for ``self.log(name, ...)`` in ``hook`` (None: a step or a per-batch hook), or
    the error Lightning raises there."""
    if hook in NO_LOGGING:
        raise no_logging_error(name, hook)
    if hook in EPOCH_LEVEL:
        if on_step or on_epoch is False:
            raise MisconfigurationException(
                f"You can't `self.log({name!r}, on_step={on_step}, on_epoch={on_epoch})` inside `{hook}`: it runs "
                "once per epoch, so it logs epoch values only (on_step=False, on_epoch=True)."
            )
        return False, True
    step = training if on_step is None else on_step
    epoch = (not training) if on_epoch is None else on_epoch
    if not (step or epoch):
        raise MisconfigurationException(
            f"`self.log({name!r}, on_step=False, on_epoch=False)` is not useful: it records nothing. Set on_step=True "
            "(each step's value) or on_epoch=True (the epoch's reduction)."
        )
    return step, epoch


def no_logging_error(name: str, hook: str | None) -> MisconfigurationException:
    return MisconfigurationException(f"You can't `self.log({name!r}, ...)` inside `{hook}`: {_HINT}")


def outside_error(name: str) -> MisconfigurationException:
    """``self.log`` while the Trainer runs none of the steps or hooks that log (``configure_optimizers``, a
    ``*_dataloader`` method, ``prepare_data``, ``configure_model``, after a stage ended, ...)."""
    return MisconfigurationException(
        f"You can't `self.log({name!r}, ...)` here: the Trainer is running no step or logging hook now (the "
        f"*_dataloader methods, configure_optimizers, configure_model and code run after a stage cannot log); {_HINT}"
    )


def loggable_error(name: str, value: Any) -> ValueError:
    """Lightning's error for a value ``self.log`` cannot take (``log_dict`` takes a dict of them)."""
    return ValueError(
        f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged: log a "
        "number, a one-element tensor or a torchmetrics Metric (a dict of them through self.log_dict)."
    )
