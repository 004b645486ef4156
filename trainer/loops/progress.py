"""What the fit loop has done, in one dataclass: a checkpoint records it and a resume puts it back.

Its fields change only through its own methods, which the fit loop and the training step call
(``tests/test_architecture.py`` fails on a write from anywhere else); everyone else reads them,
the Trainer as ``current_epoch``, ``global_step``, ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

from trainer.exceptions import MisconfigurationException


@dataclass
class Progress:
    """The fit loop's counters; the Trainer shows them read-only (``trainer.current_epoch``, ...)."""

    epoch: int = 0  # the epoch being trained, or the next one between epochs
    batches_done: int = 0  # training batches finished in this epoch
    total_batches: int = 0  # training batches finished in this fit, over all epochs
    global_step: int = 0  # optimizer steps, counted as Lightning does (each optimizer's step in manual mode)
    validations: int = 0  # validations finished during fit (sanity checks not counted)
    validated_at: int = -1  # total_batches when the last validation finished
    closed_at: int = 0  # total_batches when a batch's after-batch work (validation, plateau schedulers) last ran
    epoch_finished: bool = False  # set while the epoch-end work runs: a checkpoint then belongs to the next epoch
    # batches of this epoch counted before its loader started (a Lightning mid-epoch checkpoint's, whose loader
    # restarts): the loader's position is batches_done - loader_offset
    loader_offset: int = 0

    # ---- a batch, a step ----------------------------------------------------------------------------------
    def finish_batch(self) -> None:
        """A training batch ran (its step and hooks; its after-batch work may still be due)."""
        self.batches_done += 1
        self.total_batches += 1

    def count_step(self) -> None:
        """An optimizer step was taken: the one place ``global_step`` grows."""
        self.global_step += 1

    def close_batch(self) -> None:
        """The after-batch work of the last batch (validation, plateau schedulers) ran."""
        self.closed_at = self.total_batches

    @property
    def batch_closed(self) -> bool:
        return self.closed_at == self.total_batches

    def finish_validation(self) -> None:
        self.validations += 1
        self.validated_at = self.total_batches

    @property
    def validated_last_batch(self) -> bool:
        return self.validated_at == self.total_batches

    # ---- epochs -----------------------------------------------------------------------------------------
    def start_epoch(self) -> None:
        self.batches_done = 0
        self.loader_offset = 0

    def next_epoch(self) -> None:
        self.epoch += 1
        self.start_epoch()

    def restart_epoch(self) -> None:
        """The resumed epoch trains again from its first batch (its data changed since the checkpoint)."""
        self.start_epoch()

    def loader_starts_at(self, batches_done: int) -> None:
        """The epoch's loader starts over although ``batches_done`` batches ran (a Lightning mid-epoch checkpoint)."""
        self.loader_offset = batches_done

    @contextlib.contextmanager
    def ending_epoch(self, completed: bool) -> Iterator[None]:
        """While the epoch-end work runs: a checkpoint of a completed epoch resumes at the next one. (Kept on an
        exception: a checkpoint saved in ``on_exception`` then also belongs to the next epoch.)"""
        self.epoch_finished = completed
        yield
        self.epoch_finished = False

    @contextlib.contextmanager
    def showing_epoch(self, epoch: int) -> Iterator[None]:
        """``epoch`` as the current one for the block (hooks that request an earlier epoch's loaders again)."""
        current, self.epoch = self.epoch, epoch
        try:
            yield
        finally:
            self.epoch = current

    # ---- checkpoints --------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters; an end-of-epoch checkpoint resumes at the next epoch's start."""
        names = {f.name for f in fields(self)}
        unknown = set(state) - names
        if unknown:
            raise MisconfigurationException(f"the checkpoint's loop progress has unknown keys {sorted(unknown)}")
        for key, value in state.items():
            setattr(self, key, value)
        if self.epoch_finished:
            self.next_epoch()
            self.epoch_finished = False
