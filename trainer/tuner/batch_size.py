"""The batch-size search (Lightning's ``scale_batch_size``): run a few steps at growing batch sizes until
memory runs out; ``power`` keeps the last size that fitted, ``binsearch`` then bisects towards the limit.

Lightning's algorithm, caps and messages: the size starts at ``init_val``, doubles after each success,
is capped at ``max_val``, and stops growing once it reaches the dataset's length; ``binsearch`` takes
``margin`` off the result. The size lives in an attribute the module's (or DataModule's) loader
methods read, so each trial requests its loaders again. ``scale_batch_size`` runs the search from a hook
of the stage it tunes (the ``BatchSizeFinder`` callback's, or the ``Tuner``'s), each trial on a Trainer of
its own (``trainer.tuner.trial``), and the stage goes on with the size found.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import trainer.hparams as hparams_lib
import trainer.tuner.stage as stage_lib
from trainer.exceptions import MisconfigurationException
from trainer.tuner.memory import garbage_collection_cuda, is_oom_error
from trainer.tuner.state import attr_holders, get_attr, kept, set_attr
from trainer.tuner.trial import run_trial, trial_trainer

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView

log = logging.getLogger(__name__)
MODES = ("power", "binsearch")


def scale_batch_size(
    trainer: TrainerView,
    module: Module,
    mode: str = "power",
    steps_per_trial: int = 3,
    init_val: int = 2,
    max_trials: int = 25,
    batch_arg_name: str = "batch_size",
    margin: float = 0.05,
    max_val: int = 8192,
) -> int | None:
    """The largest batch size whose ``steps_per_trial`` steps of the running stage fit in memory, left set in
    ``batch_arg_name`` (on the module, its hparams or the DataModule) and in the stage's loaders. Called from a
    hook of ``fit`` (``on_fit_start``), ``validate``, ``test`` or ``predict``; None under ``fast_dev_run``."""
    check_batch_size_args(mode, steps_per_trial, init_val, max_trials, margin, max_val)
    method = stage_lib.running_method(trainer, "scale_batch_size")
    if trainer.fast_dev_run:
        warnings.warn("Skipping batch size scaler since `fast_dev_run` is enabled.", stacklevel=2)
        return None
    datamodule = trainer.datamodule
    stage_lib.check_loaders_not_given(trainer, method)
    if method != "fit":  # fit's were checked in setup
        stage_lib.check_one_eval_loader(trainer, method)
        _check_field(module, datamodule, batch_arg_name)
    elif not attr_holders(module, datamodule, batch_arg_name):  # a search called from elsewhere than setup
        _check_field(module, datamodule, batch_arg_name)
    limits: dict[str, int | float] = {stage_lib.STAGES[method]: steps_per_trial}
    if method == "fit":  # Lightning's: whole epochs of training, cut by max_steps; validation limited
        limits = {"train": 1.0, "validation": steps_per_trial}

    def trial() -> None:
        runner = trial_trainer(trainer, [], limits, steps_per_trial if method == "fit" else -1)
        run_trial(runner, method, module, datamodule=datamodule)

    search = Search(
        trial,
        lambda: int(get_attr(module, datamodule, batch_arg_name)),
        lambda size: set_attr(module, datamodule, batch_arg_name, size),
        stage_lib.dataset_length(trainer, method),
    )
    with kept(trainer, module):
        size, _ = search.adjust("", max_val, value=init_val)
        if mode == "power":
            size = power_scaling(search, size, max_trials, max_val)
        else:
            size = binsearch_scaling(search, size, max_trials, max_val, margin)
    garbage_collection_cuda()
    log.info(f"Finished batch size finder, will continue with full run using batch size {size}")
    stage_lib.request_loaders_again(trainer, module, method)
    return size


def check_batch_size_finder(trainer: TrainerView, module: Module, batch_arg_name: str) -> None:
    """Lightning's ``BatchSizeFinder.setup`` checks: one process; for ``fit`` a field to scale (an evaluation
    stage checks it once its loaders are known, after the one-loader check, as Lightning's order goes)."""
    if trainer.world_size > 1:
        raise MisconfigurationException("The Batch size finder is not supported with distributed strategies.")
    if trainer.state.fn == "fit":
        _check_field(module, trainer.datamodule, batch_arg_name)


def _check_field(module: Module, datamodule: object, name: str) -> None:
    """A field to scale, and a warning where the module holds it twice (``self.<name>`` and the one
    ``save_hyperparameters()`` saved)."""
    if not attr_holders(module, datamodule, name):
        raise MisconfigurationException(
            f"Field {name} not found in `model`, `datamodule`, nor their `hparams` attributes."
        )
    if hasattr(module, name) and name in module.hparams and hparams_lib.state_of(module).explicit:
        warnings.warn(
            f"Field `model.{name}` and `model.hparams.{name}` are mutually exclusive! `model.{name}` will be used as "
            "the initial batch size for scaling. If this is not the intended behavior, please remove either one.",
            stacklevel=4,
        )


def check_batch_size_args(mode: str, steps: int, init_val: int, max_trials: int, margin: float, max_val: int) -> None:
    if mode not in MODES:
        raise MisconfigurationException(f"scale_batch_size(mode={mode!r}): `mode` should be either of {MODES}.")
    for name, value, least in (("steps_per_trial", steps, 1), ("init_val", init_val, 1), ("max_trials", max_trials, 0)):
        if not isinstance(value, int) or value < least:
            raise MisconfigurationException(f"scale_batch_size({name}={value!r}): give an int >= {least}.")
    if not 0.0 <= margin < 1.0:
        raise MisconfigurationException(f"`margin` should be between 0 and 1. Found margin={margin}")
    if not isinstance(max_val, int) or max_val < init_val:
        raise MisconfigurationException(f"scale_batch_size(max_val={max_val!r}): give an int >= init_val ({init_val}).")


class Search:
    """One search: ``trial()`` runs the stage at the current size; ``get``/``set`` read and write the size."""

    def __init__(
        self, trial: Callable[[], None], get: Callable[[], int], set_: Callable[[int], None], length: int | None
    ) -> None:
        self.trial, self.get, self.set, self.length = trial, get, set_, length

    def fits(self) -> bool:
        """Run a trial; False if it ran out of memory (any other error propagates). The garbage of a failed
        trial (its traceback holds the frames that hold its tensors) is collected before the next."""
        garbage_collection_cuda()
        try:
            self.trial()
        except (RuntimeError, MemoryError) as err:
            if not is_oom_error(err) and not isinstance(err, MemoryError):
                raise
            garbage_collection_cuda()
            return False
        return True

    def adjust(self, desc: str, max_val: int, factor: float = 1.0, value: int | None = None) -> tuple[int, bool]:
        """Lightning's ``_adjust_batch_size``: the next size to try, and whether it changed."""
        size = self.get()
        if self.length is not None and size >= self.length:
            log.info(f"The batch size {size} is greater or equal than the length of your dataset: {self.length}.")
            return size, False
        new = value if value is not None else int(size * factor)
        if new > max_val:
            if desc:
                log.info(f"Batch size {new} exceeds max_val limit {max_val}, capping at {max_val}")
            new = max_val
        if desc:
            log.info(f"Batch size {size} {desc}, trying batch size {new}")
        self.set(new)
        return new, new != size


def power_scaling(search: Search, size: int, max_trials: int, max_val: int) -> int:
    """Double until a trial runs out of memory; the last size that fitted."""
    any_success = False
    for i in range(max_trials):
        if size >= max_val:
            log.info(f"Reached the maximum batch size limit of {max_val}. Stopping search.")
            break
        if search.fits():
            if i + 1 >= max_trials:
                return size
            size, changed = search.adjust("succeeded", max_val, factor=2.0)
            if not changed:
                break
            any_success = True
        else:
            size, _ = search.adjust("failed", max_val, factor=0.5)
            if any_success:
                break
    return size


def binsearch_scaling(search: Search, size: int, max_trials: int, max_val: int, margin: float) -> int:
    """Double until out of memory, then bisect between the last size that fitted and the first that did not."""
    low, high, count = 1, None, 0
    while True:
        if size >= max_val:
            log.info(f"Reached the maximum batch size limit of {max_val}. Stopping search.")
            break
        if search.fits():
            count += 1
            if count >= max_trials:
                break
            low = size
            if high is not None and high - low <= 1:
                break
            if high is None:
                size, changed = search.adjust("succeeded", max_val, factor=2.0)
            else:
                size, changed = search.adjust("succeeded", max_val, value=(high + low) // 2)
            if not changed:
                break
        else:
            high = size
            size, _ = search.adjust("failed", max_val, value=(high + low) // 2)
            if high - low <= 1:
                break
    reduced = max(1, int(size * (1 - margin)))
    if margin > 0 and reduced != size:
        log.info(f"Applying margin of {margin:.1%}, reducing batch size from {size} to {reduced}")
        search.set(reduced)
        return reduced
    return size
