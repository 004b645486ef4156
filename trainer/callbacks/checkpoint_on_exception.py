"""``ModelCheckpoint(save_on_exception=True)``: when a stage raises, one more checkpoint under the callback's
file name, and ``last`` pointing at it (Lightning 2.6's option)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.callbacks.checkpoint import ModelCheckpoint


def save_on_exception(callback: ModelCheckpoint, trainer: Any, exception: BaseException) -> None:
    """Collective, as every save: under several processes a failure on one rank ends the job before it."""
    if trainer.fast_dev_run or trainer.sanity_checking or callback.dirpath is None:
        return
    if callback._last_global_step_saved == trainer.global_step:  # that state is saved already
        return
    try:
        name = callback.format_checkpoint_name(callback._candidates(trainer))
    except KeyError as err:  # a template naming a value not logged yet must not hide the run's own error
        warnings.warn(f"ModelCheckpoint(save_on_exception=True) could not name the checkpoint: {err}", stacklevel=2)
        return
    claim = callback._names.claim(callback.dirpath, name, callback.FILE_EXTENSION, callback.enable_version_counter)
    path = trainer.strategy.broadcast(callback._spelled(claim) if trainer.is_global_zero else None)
    callback._last_global_step_saved = trainer.global_step
    link = None
    if callback.save_last:
        last = callback._spelled(callback._last_path(trainer)) if trainer.is_global_zero else None
        callback.last_model_path = trainer.strategy.broadcast(last)
        link = Path(callback.last_model_path)
    callback._write(trainer, Path(path), link=link)
    if trainer.is_global_zero:
        print(f"An {type(exception).__name__} was raised with message: {exception}, saved checkpoint to {path}")
