"""What the Trainer is doing: the entry point that runs (``fn``), the stage inside it, and the checkpoint it loaded.

``TrainerState``'s own methods are its only writers (``tests/test_architecture.py`` fails on another): the
lifecycle starts and ends each fit/validate/test/predict (``running`` in ``lifecycle.py``, through
``Trainer.attach`` and ``Trainer.release``), the fit's validation runs the sanity check and each validation
as a stage inside fit (``FitValidation``, with ``running``), and the stage that opens a checkpoint records it
(``loaded``: ``FitLoop._setup``, ``stages._load_weights``). Everyone else reads ``trainer.state.fn``,
``trainer.training``, ``trainer.sanity_checking``, ... and ``trainer.ckpt_path``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class TrainerState:
    """Lightning's ``trainer.state`` (``fn`` and ``stage``), and the checkpoint the last stage loaded."""

    fn: str | None = None  # "fit", "validate", "test", "predict"; None when idle
    stage: str | None = None  # inside it: "train", "sanity_check", "validate", "test", "predict"
    ckpt_path: str | None = None  # what the last fit/validate/test/predict loaded; still set after it ends
    chosen: str | None = None  # ``trainer.ckpt_path = ...``: loaded by each later stage given no ckpt_path

    def choose(self, path: str | os.PathLike[str] | None) -> None:
        """Lightning's ``trainer.ckpt_path = path``: the stages that follow load ``path`` unless given one."""
        self.chosen = self.ckpt_path = os.fspath(path) if path else None

    def checkpoint_for(self, fn: str, given: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
        """What ``fn`` loads: ``given``, else the chosen checkpoint. Both: ``given``, with Lightning's warning,
        and the choice is dropped (Lightning's rule)."""
        if given is None:
            return self.chosen
        if self.chosen is not None:
            warnings.warn(
                f"`trainer.ckpt_path = {self.chosen!r}` was called but then you passed `trainer.{fn}(ckpt_path="
                f"{os.fspath(given)!r})`. The latter will be loaded.",
                stacklevel=2,
            )
            self.chosen = None
        return given

    def start(self, fn: str) -> None:
        """A fit/validate/test/predict starts; it has loaded no checkpoint yet."""
        self.fn, self.stage, self.ckpt_path = fn, {"fit": "train"}.get(fn, fn), None

    def end(self) -> None:
        """Idle again. ``ckpt_path`` stays, as Lightning's: it tells what the stage that ended loaded."""
        self.fn = self.stage = None

    def loaded(self, path: str | os.PathLike[str]) -> None:
        """The running stage restored ``path`` (a resume, or weights for validate/test/predict)."""
        self.ckpt_path = str(path)

    @contextlib.contextmanager
    def running(self, stage: str) -> Iterator[None]:
        """A stage inside fit (the sanity check, a validation); training's again afterwards, on an error too."""
        outer, self.stage = self.stage, stage
        try:
            yield
        finally:
            self.stage = outer
