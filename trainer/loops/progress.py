"""What the fit loop has done, in one dataclass: a checkpoint records it and a resume puts it back."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class Progress:
    """The fit loop's counters; the Trainer shows them read-only (``trainer.current_epoch``, ...)."""

    epoch: int = 0  # the epoch being trained, or the next one between epochs
    batches_done: int = 0  # training batches finished in this epoch
    total_batches: int = 0  # training batches finished in this fit, over all epochs
    global_step: int = 0  # optimizer steps, counted as Lightning does (each optimizer's step in manual mode)
    validations: int = 0  # validations finished during fit (sanity checks not counted)
    validated_at: int = -1  # total_batches when the last validation finished
    closed_at: int = 0  # total_batches when a batch's later work (validation, plateau schedulers) last finished
    epoch_finished: bool = False  # set while the epoch-end work runs: a checkpoint then belongs to the next epoch
    # batches of this epoch counted before its loader started (a Lightning mid-epoch checkpoint's, whose loader
    # restarts): the loader's position is batches_done - loader_offset
    loader_offset: int = 0

    def start_epoch(self) -> None:
        self.batches_done = 0
        self.loader_offset = 0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters; an end-of-epoch checkpoint resumes at the next epoch's start."""
        names = {f.name for f in fields(self)}
        unknown = set(state) - names
        if unknown:
            raise ValueError(f"the checkpoint's loop progress has unknown keys {sorted(unknown)}")
        for key, value in state.items():
            setattr(self, key, value)
        if self.epoch_finished:
            self.epoch += 1
            self.batches_done = self.loader_offset = 0
            self.epoch_finished = False
