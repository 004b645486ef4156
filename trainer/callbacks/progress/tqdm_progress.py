"""``TQDMProgressBar``: Lightning's default bar, drawn with tqdm on a terminal and as plain lines in a log."""

from __future__ import annotations

from trainer.callbacks.progress.displays import Display, Tqdm, TqdmDisplay
from trainer.callbacks.progress.staged import StagedProgressBar


class TQDMProgressBar(StagedProgressBar):
    """Lightning's arguments: the bars move every ``refresh_rate`` batches (0 hides them), are offset by
    ``process_position`` lines, and with ``leave=True`` each epoch's training bar stays on screen.

    Where stdout is not a terminal (a log file, CI, SLURM), one plain line is written at most every
    ``line_interval_s`` seconds and at the end of every epoch and evaluation, instead of tqdm's
    ``\\r`` redraws. Either way the bar shows ``v_num`` and what was logged with ``prog_bar=True``,
    and drawing it never waits for the GPU (see ``HostValues``).
    """

    Tqdm = Tqdm  # Lightning's padded-number tqdm, for subclasses that build their own bars

    def __init__(
        self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False, line_interval_s: float = 10.0
    ) -> None:
        super().__init__(refresh_rate, leave, line_interval_s)
        self._process_position = process_position

    @property
    def process_position(self) -> int:
        return self._process_position

    def terminal_display(self) -> Display:
        return TqdmDisplay(self._process_position)
