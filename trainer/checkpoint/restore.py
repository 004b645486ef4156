"""Putting a run back from a checkpoint: one registry of the run's stateful parts, loaded in phases.

Each part (the module, the callbacks, the precision's scaler, the loop's progress, the data
position, the ranks' RNG, the metrics, the loggers, the optimizers and the schedulers) is a small
object with ``state_dict``/``load_state_dict`` over what the Trainer holds, and a phase: the
moment of ``fit`` at which what it loads into exists and nothing has read it yet (the shape of
torchtitan's checkpoint manager, with Lightning's ordering points as phases). A reader per schema
(ours in ``state``, Lightning's in ``lightning_schema``) turns a file into one state per part and
refuses, before anything loads, a file it cannot read fully: a run is never half-restored.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trainer.view import TrainerView


class Phase(enum.Enum):
    """When a part loads during ``fit`` (validate/test/predict load the module alone, at set-up)."""

    MODULE = "module"  # Lightning's first point: before configure_optimizers (weights, then callbacks)
    LOOP = "loop"  # after configure_optimizers: what the data set-up reads (progress, position, RNG)
    TRAINING = "training"  # Lightning's second point: after on_fit_start (optimizer and scheduler states)


class Stateful(Protocol):
    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> None: ...


@dataclass(frozen=True)
class Source:
    """The file being restored: errors name it, and hooks get its whole dict (as Lightning passes it)."""

    path: Path
    checkpoint: dict[str, Any]


SAVING = Source(Path("<saving>"), {})


@dataclass(frozen=True)
class Part:
    name: str
    phase: Phase
    make: Callable[[TrainerView, Source], Stateful]  # built when its phase comes: what it loads into exists then
    fitting_only: bool = True
    global_zero_only: bool = False


class _Module:
    """The weights (through the strategy, before it wraps the module), then the module's ``on_load_checkpoint``
    with the whole checkpoint, as Lightning passes it."""

    def __init__(self, trainer: TrainerView, source: Source) -> None:
        self.trainer, self.source = trainer, source

    def state_dict(self) -> dict[str, Any]:
        return {"state_dict": self.trainer.strategy.module_state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        module = self.trainer.lightning_module
        self.trainer.strategy.load_module_weights(module, state)
        module.on_load_checkpoint(self.source.checkpoint)


class _Callbacks:
    """Each callback's ``on_load_checkpoint`` (with the whole checkpoint), then its state, by ``state_key``."""

    def __init__(self, trainer: TrainerView, source: Source) -> None:
        self.trainer, self.source = trainer, source

    def state_dict(self) -> dict[str, Any]:
        """The callbacks that have a state (Lightning saves no empty one)."""
        states = ((cb.state_key, cb.state_dict()) for cb in self.trainer.callbacks)
        return {key: state for key, state in states if state}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        trainer = self.trainer
        keys = {cb: _saved_key(cb, saved) for cb in trainer.callbacks}
        left = [key for key, state in saved.items() if state and key not in keys.values()]
        if left and trainer.is_global_zero:
            warn_callbacks_missing(left, stacklevel=8)
        for cb in trainer.callbacks:
            cb.on_load_checkpoint(trainer, trainer.lightning_module, self.source.checkpoint)
            key = keys[cb]
            if key is not None and saved[key]:
                cb.load_state_dict(saved[key])


def _saved_key(callback: Any, saved: dict[Any, Any]) -> Any:
    """The callback's key in ``saved``: its ``state_key``, or the one steadytrain used before it took Lightning's."""
    for key in (callback.state_key, getattr(callback, "_former_state_key", None)):
        if key in saved:
            return key
    return None


def warn_callbacks_missing(keys: list[str], stacklevel: int) -> None:
    """Lightning's warning: the checkpoint holds the state of callbacks this Trainer was not given."""
    warnings.warn(
        "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided during "
        f"`Trainer` instantiation. Please add the following callbacks: {keys}.",
        UserWarning,
        stacklevel=stacklevel,  # the user's fit()
    )


class _OptimizerKinds:
    """Checked before the training state loads: an optimizer's state only fits its own kind."""

    def __init__(self, trainer: TrainerView, source: Source) -> None:
        self.trainer, self.path = trainer, source.path

    def state_dict(self) -> list[str]:
        return [type(opt).__name__ for opt in self.trainer.optimizers]

    def load_state_dict(self, saved: list[str] | None) -> None:
        now = self.state_dict()
        if saved is not None and len(saved) == len(now) and saved != now:
            raise ValueError(
                f"{self.path} holds the state of {saved} but configure_optimizers() made {now}: an optimizer's state "
                "only fits its own kind. Resume with the same optimizers, or load the weights alone "
                "(trainer.checkpoint.load_weights(module, path)) and start a new run."
            )


class _Data:
    """The data position and what it depends on (the fit loop's ``data_state``)."""

    def __init__(self, trainer: TrainerView, source: Source) -> None:
        self.trainer, self.path = trainer, source.path

    def state_dict(self) -> dict[str, Any]:
        return self.trainer.fit_loop.data_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.fit_loop.load_data_state(state, self.path)


class _Ranks:
    """Every rank's RNG, its epoch's RNG and an open accumulation window's gradients (None: not saved, the
    process's RNG goes on as it is, as under Lightning)."""

    def __init__(self, trainer: TrainerView, source: Source) -> None:
        self.trainer, self.path = trainer, source.path

    def state_dict(self) -> dict[str, Any]:
        """A collective: every rank's state is gathered."""
        ranks = self.trainer.strategy.gather_objects(self.trainer.fit_loop.rank_state())
        return {"ranks": ranks, "world_size": self.trainer.world_size}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.trainer.fit_loop.load_rank_state(state["ranks"], state["world_size"], self.path)


class _Metrics:
    def __init__(self, trainer: TrainerView) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu() for k, v in self.trainer.callback_metrics.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.metric_log.load_callback_metrics(state)


class _Loggers:
    def __init__(self, trainer: TrainerView) -> None:
        self.trainer = trainer

    def state_dict(self) -> list[dict[str, Any]]:
        states: list[Any] = [getattr(lg, "state_dict", dict)() for lg in self.trainer.loggers]
        return [state if isinstance(state, dict) else {} for state in states]  # a logger of Lightning's kind: none

    def load_state_dict(self, state: list[dict[str, Any]]) -> None:
        for lg, lg_state in zip(self.trainer.loggers, state):
            lg.load_state_dict(lg_state)


class _DataModule:
    """A DataModule's own ``state_dict`` (Lightning saves it; ours has none to save)."""

    def __init__(self, trainer: TrainerView) -> None:
        self.datamodule = getattr(trainer, "datamodule", None)
        self.profiler = trainer.profiler

    def state_dict(self) -> dict[str, Any]:
        return self._hook("state_dict")() if self.datamodule is not None else {}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state and self.datamodule is not None:
            self._hook("load_state_dict")(state)

    def _hook(self, name: str) -> Any:
        """Profiled as Lightning names a DataModule's hooks."""
        hook = getattr(self.datamodule, name)
        action = f"[LightningDataModule]{type(self.datamodule).__name__}.{name}"
        return hook if self.profiler is None else self.profiler.timed(action, hook)


@dataclass(frozen=True)
class _StatePerObject:
    """One state per optimizer (or per LR scheduler) that ``configure_optimizers()`` made, in its order; a
    count or a state that does not fit is refused, naming the file."""

    path: Path
    what: str
    objects: Callable[[], list[Any]]
    state_of: Callable[[Any], dict[str, Any]]
    load_into: Callable[[Any, dict[str, Any]], None]

    def state_dict(self) -> list[dict[str, Any]]:
        return [self.state_of(target) for target in self.objects()]

    def load_state_dict(self, saved: list[dict[str, Any]]) -> None:
        current, what, path = self.objects(), self.what, self.path
        if len(saved) != len(current):
            raise ValueError(f"{path} has {len(saved)} {what}(s) but configure_optimizers() made {len(current)}.")
        for i, (target, state) in enumerate(zip(current, saved)):
            try:
                self.load_into(target, state)
            except (KeyError, ValueError, TypeError, RuntimeError) as err:
                raise ValueError(
                    f"{path}: {what} {i} does not fit {type(target).__name__} ({type(err).__name__}: {err}). Was "
                    "configure_optimizers() changed since the checkpoint? Resume with the same optimizers and "
                    "schedulers, or load the weights alone and start a new run."
                ) from err


def _optimizer_states(trainer: TrainerView, source: Source) -> _StatePerObject:
    strategy = trainer.strategy  # an optimizer's state may be sharded: the strategy gathers and places it
    save, load = strategy.optimizer_state, strategy.load_optimizer_state
    return _StatePerObject(source.path, "optimizer state", lambda: trainer.optimizers, save, load)


def _scheduler_states(trainer: TrainerView, source: Source) -> _StatePerObject:
    def schedulers() -> list[Any]:
        return [config.scheduler for config in trainer.lr_scheduler_configs]

    return _StatePerObject(source.path, "LR scheduler", schedulers, _own_state, _load_own_state)


def _own_state(obj: Any) -> dict[str, Any]:
    return obj.state_dict()  # type: ignore[no-any-return]


def _load_own_state(obj: Any, state: dict[str, Any]) -> None:
    obj.load_state_dict(state)


class _Progress:
    """The fit loop's counters; a checkpoint past ``max_epochs`` is refused (Lightning's error)."""

    def __init__(self, trainer: TrainerView, source: Source) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return self.trainer.fit_loop.progress.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.fit_loop.progress.load_state_dict(state)
        epoch, max_epochs = self.trainer.current_epoch, self.trainer.max_epochs
        if max_epochs is not None and max_epochs != -1 and epoch > max_epochs:
            from trainer.exceptions import MisconfigurationException

            raise MisconfigurationException(
                f"You restored a checkpoint with current_epoch={epoch}, but you have set Trainer(max_epochs="
                f"{max_epochs}): raise max_epochs above {epoch} to train on, or load the weights alone."
            )


# The registry, in load order within each phase (the order our checkpoints have always loaded in).
PARTS: tuple[Part, ...] = (
    Part("module", Phase.MODULE, _Module, fitting_only=False),
    Part("callbacks", Phase.MODULE, _Callbacks),
    Part("optimizer_kinds", Phase.LOOP, _OptimizerKinds),
    Part("precision", Phase.LOOP, lambda t, s: t.precision_plugin),
    Part("progress", Phase.LOOP, _Progress),
    Part("data", Phase.LOOP, _Data),
    Part("ranks", Phase.LOOP, _Ranks),
    Part("datamodule", Phase.LOOP, lambda t, s: _DataModule(t)),
    Part("metrics", Phase.LOOP, lambda t, s: _Metrics(t)),
    Part("loggers", Phase.LOOP, lambda t, s: _Loggers(t), global_zero_only=True),
    Part("optimizers", Phase.TRAINING, _optimizer_states),
    Part("schedulers", Phase.TRAINING, _scheduler_states),
)
PARTS_BY_NAME = {part.name: part for part in PARTS}


def states_now(trainer: TrainerView, names: tuple[str, ...]) -> dict[str, Any]:
    """The named parts' states, asked in this order (saving: a part's state may be a collective)."""
    return {name: PARTS_BY_NAME[name].make(trainer, SAVING).state_dict() for name in names}


class Restore:
    """A checkpoint read and checked whole, whose parts load phase by phase (``load(Phase.X)``)."""

    def __init__(self, trainer: TrainerView, source: Source, states: dict[str, Any], fitting: bool) -> None:
        unknown = set(states) - set(PARTS_BY_NAME)
        assert not unknown, f"a reader produced states for no part: {sorted(unknown)}"
        self.trainer, self.source, self.states, self.fitting = trainer, source, states, fitting
        self.path = source.path

    def load(self, phase: Phase) -> None:
        trainer = self.trainer
        for part in PARTS:
            if part.phase is not phase or part.name not in self.states or (part.fitting_only and not self.fitting):
                continue
            if part.global_zero_only and not trainer.is_global_zero:
                continue
            part.make(trainer, self.source).load_state_dict(self.states[part.name])
