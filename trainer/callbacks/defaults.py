"""The callbacks a Trainer adds by itself (its ``enable_*`` flags and ``max_time``), and their order."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException


def with_defaults(
    callbacks: Callback | Iterable[Callback] | None,
    progress: bool,
    checkpointing: bool,
    summary: bool,
    max_time: Any,
) -> list[Callback]:
    """The given callbacks plus the defaults the flags ask for; a flag that contradicts a given
    callback is an error, not a silent choice."""
    from trainer.callbacks import Checkpoint, ModelCheckpoint, ModelSummary, ProgressBar, TQDMProgressBar
    from trainer.callbacks.timer import Timer

    given = [] if callbacks is None else [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
    for cb in given:
        if isinstance(cb, type):
            name = cb.__name__
            raise TypeError(f"callbacks= takes Callback instances; got the class {name}: write {name}().")
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks= takes Callback instances; got {type(cb).__name__} ({cb!r:.60}).")
    savers = [type(cb).__name__ for cb in given if isinstance(cb, Checkpoint)]  # Lightning's rule: any Checkpoint
    if checkpointing and not savers:
        given.append(ModelCheckpoint())
    if not checkpointing and savers:
        raise MisconfigurationException(
            f"Trainer was configured with `enable_checkpointing=False` but found `{savers[0]}` in callbacks list: "
            f"enable_checkpointing=False contradicts the {savers[0]} in callbacks=."
        )
    bars = [type(cb).__name__ for cb in given if isinstance(cb, ProgressBar)]
    if bars and not progress:
        raise MisconfigurationException(
            f"Trainer was configured with `enable_progress_bar=False` but found `{bars[0]}` in callbacks list: "
            f"enable_progress_bar=False contradicts the {bars[0]} in callbacks=."
        )
    if len(bars) > 1:
        raise MisconfigurationException(
            f"You added multiple progress bar callbacks to the Trainer, but currently only one progress bar is "
            f"supported: callbacks= holds {len(bars)} progress bars ({', '.join(bars)}); keep one."
        )
    if progress and not bars:
        given.append(TQDMProgressBar())
    if summary and not any(isinstance(cb, ModelSummary) for cb in given):
        given.append(_summary_for(given))
    if max_time is not None:
        if any(isinstance(cb, Timer) for cb in given):
            raise MisconfigurationException("max_time= and a Timer in callbacks= both set a time limit: keep one.")
        given.append(Timer(duration=max_time, interval="step"))
    _check_state_keys(given)
    return checkpointing_last(given)


def _check_state_keys(callbacks: list[Callback]) -> None:
    """Two stateful callbacks under one ``state_key`` would lose one's state in every checkpoint: refused, as
    Lightning does."""
    seen: set[str] = set()
    for cb in callbacks:
        if getattr(type(cb), "state_dict", Callback.state_dict) is Callback.state_dict:  # a Mock(spec=Callback) too
            continue
        if cb.state_key in seen:
            name = type(cb).__name__
            raise RuntimeError(
                f"Found more than one stateful callback of type `{name}`. In the current configuration, this callback "
                f"does not support being saved alongside other instances of the same type: their state would share "
                f"the key {cb.state_key!r} in a checkpoint. Please consult the documentation of `{name}` regarding "
                "valid settings for the callback state to be checkpointable. HINT: The `callback.state_key` must be "
                "unique among all callbacks in the Trainer."
            )
        seen.add(cb.state_key)


def _summary_for(given: list[Callback]) -> Callback:
    """Lightning's pairing: a rich progress bar gets a rich layer table."""
    from trainer.callbacks import ModelSummary

    rich_bars = sys.modules.get("trainer.callbacks.progress.rich_progress")  # loaded where one was built
    if rich_bars is not None and any(isinstance(cb, rich_bars.RichProgressBar) for cb in given):
        from trainer.callbacks.rich_model_summary import RichModelSummary

        return RichModelSummary()
    return ModelSummary()


def checkpointing_last(callbacks: list[Callback]) -> list[Callback]:
    """Checkpointing runs last, so it sees what every other callback did in the same hook."""
    from trainer.callbacks import Checkpoint

    _unique_state_keys(callbacks)
    return sorted(callbacks, key=lambda cb: isinstance(cb, Checkpoint))


def _unique_state_keys(callbacks: list[Callback]) -> None:
    """Two callbacks with state under one key would save one state and restore it into both: refused (Lightning's
    error), naming the key."""
    seen: set[str] = set()
    for cb in callbacks:
        if getattr(type(cb), "state_dict", Callback.state_dict) is Callback.state_dict:
            continue  # no state to save
        name = type(cb).__name__
        if cb.state_key in seen:
            raise RuntimeError(
                f"Found more than one stateful callback of type `{name}`. In the current configuration, this "
                "callback does not support being saved alongside other instances of the same type. Please consult "
                f"the documentation of `{name}` regarding valid settings for the callback state to be "
                f"checkpointable. HINT: The `callback.state_key` must be unique among all callbacks in the Trainer "
                f"(two have {cb.state_key!r})."
            )
        seen.add(cb.state_key)
