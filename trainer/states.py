"""What a Trainer is doing, in Lightning's names: ``TrainerFn`` (the entry point that runs), ``RunningStage`` (the
stage inside it), ``TrainerStatus``, and ``TrainerState``, the one object that holds them with the checkpoint the
last stage loaded.

Each enum member equals its string (``TrainerFn.FITTING == "fit"``), so code that compares ``trainer.state.fn``
with a string and code that compares it with Lightning's enum both hold.

``TrainerState``'s own methods are its only writers (``tests/test_architecture.py`` fails on another): the
lifecycle starts and ends each fit/validate/test/predict (``running`` in ``loops/lifecycle.py``, through
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
from enum import Enum

from trainer.exceptions import MisconfigurationException


class LightningEnum(str, Enum):
    """A string enum that compares with its value, ignoring case, as Lightning's."""

    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        """The member named ``value`` (``source="key"``) or with that value (``"value"``), case-insensitive."""
        for member in cls:
            if value.lower() == (member.name if source in ("key", "any") else member.value).lower():
                return member
            if source == "any" and value.lower() == member.value.lower():
                return member
        choices = ", ".join(member.value for member in cls)
        raise MisconfigurationException(f"{value!r} is not a {cls.__name__}; choose one of {choices}.")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())

    def __str__(self) -> str:
        return str(self.value)


class TrainerStatus(LightningEnum):
    INITIALIZING = "initializing"  # built, never run
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"  # ended by an exception or a signal

    @property
    def stopped(self) -> bool:
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(LightningEnum):
    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(LightningEnum):
    """The stage inside an entry point: fit runs ``SANITY_CHECKING``, ``TRAINING`` and ``VALIDATING``."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        """``val`` for validation and the sanity check, else the stage's own name."""
        return "val" if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING) else self.value


@dataclass
class TrainerState:
    """Lightning's ``trainer.state`` (``status``, ``fn``, ``stage``), and the checkpoint the last stage loaded."""

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None  # the last entry point run; kept after it ends, as Lightning's
    stage: RunningStage | None = None  # inside it; None once it ends
    ckpt_path: str | None = None  # what the last fit/validate/test/predict loaded; still set after it ends
    chosen: str | None = None  # ``trainer.ckpt_path = ...``: loaded by each later stage given no ckpt_path
    weights_only: bool | None = None  # how the running stage reads its checkpoint (None: weights_only=True)

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped

    @property
    def running_now(self) -> bool:
        """An entry point is running (a second one called from a hook would be refused)."""
        return self.status == TrainerStatus.RUNNING

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

    def read_with(self, weights_only: bool | None) -> None:
        """``fit/validate/test/predict(weights_only=...)``: how the checkpoint of the stage called is read."""
        self.weights_only = weights_only

    def start(self, fn: str) -> None:
        """A fit/validate/test/predict starts; it has loaded no checkpoint yet."""
        self.fn = TrainerFn(fn)
        self.stage = RunningStage({"fit": "train"}.get(fn, fn))
        self.status, self.ckpt_path = TrainerStatus.RUNNING, None

    def end(self, interrupted: bool = False) -> None:
        """Idle again: finished, or interrupted by an exception. ``fn`` and ``ckpt_path`` stay, as Lightning's:
        they tell what ran last and what it loaded."""
        self.status = TrainerStatus.INTERRUPTED if interrupted else TrainerStatus.FINISHED
        self.stage = None

    def loaded(self, path: str | os.PathLike[str]) -> None:
        """The running stage restored ``path`` (a resume, or weights for validate/test/predict)."""
        self.ckpt_path = str(path)

    @contextlib.contextmanager
    def running(self, stage: str) -> Iterator[None]:
        """A stage inside fit (the sanity check, a validation); training's again afterwards, on an error too."""
        outer, self.stage = self.stage, RunningStage(stage)
        try:
            yield
        finally:
            self.stage = outer
