"""The batch-size search (Lightning's ``scale_batch_size``): run a few steps at growing batch sizes until
memory runs out; ``power`` keeps the last size that fitted, ``binsearch`` then bisects towards the limit.

Lightning's algorithm, caps and messages: the size starts at ``init_val``, doubles after each success,
is capped at ``max_val``, and stops growing once it reaches the dataset's length; ``binsearch`` takes
``margin`` off the result. The size lives in an attribute the module's (or DataModule's) loader
methods read, so each trial requests its loaders again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainer.callbacks.base import Callback
from trainer.utilities.memory import garbage_collection_cuda, is_oom_error

log = logging.getLogger(__name__)
MODES = ("power", "binsearch")


class DatasetLength(Callback):
    """Notes the length of the dataset a trial ran on (None for an iterable dataset)."""

    def __init__(self) -> None:
        self.length: int | None = None

    def _note(self, loader: Any) -> None:
        try:
            self.length = len(loader.dataset)
        except (AttributeError, TypeError):
            self.length = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._note(trainer.fit_loop.data.raw_train)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.state.fn == "validate":
            self._note(trainer.validate_loop.loaders[0])

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self._note(trainer.test_loop.loaders[0])

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        self._note(trainer.predict_loop.loaders[0])


class Search:
    """One search: ``trial()`` runs the stage at the current size; ``get``/``set`` read and write the size."""

    def __init__(
        self, trial: Callable[[], None], get: Callable[[], int], set_: Callable[[int], None], lengths: DatasetLength
    ) -> None:
        self.trial, self.get, self.set, self.lengths = trial, get, set_, lengths

    def fits(self) -> bool:
        """Run a trial; False if it ran out of memory (any other error propagates). The garbage of a failed
        trial (its traceback holds the frames that hold its tensors) is collected before the next."""
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
        if self.lengths.length is not None and size >= self.lengths.length:
            log.info(
                f"The batch size {size} is greater or equal than the length of your dataset: {self.lengths.length}."
            )
            return size, False
        new = value if value is not None else int(size * factor)
        if new > max_val:
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
            last_ok = size
            if i + 1 >= max_trials:
                return last_ok
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
