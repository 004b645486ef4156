"""What a captured step hands the host: recorded once at capture, re-read after every replay.

A replay runs the step's kernels and none of its Python, so what the Python did with device values
is recorded at capture: each ``self.log`` call (in ``training_step`` and in the in-step hooks) with its
arguments, and each loss given to the deferred non-finite check. After a replay those calls are made
again with copies of the static tensors, which then hold this step's values: the loggers, the progress
bar, callbacks and epoch means see what the eager step would have given them, with the same
on_step/on_epoch/prog_bar/sync arguments. (Copies, because the next replay overwrites the static
tensors, and a value a callback keeps must not change under it.) The step's output and loss come
back the same way.

The stand-ins take the place of ``metric_log.results`` and of the non-finite record while a step that
may be captured runs: "observe" (a warm-up step: pass the call on, note what a capture could not
replay), "record" (a capture: keep the call, pass nothing on; the values do not exist yet) and
"refill" (a fake backend's replay, which re-runs the step: write the new values into the recorded
tensors, as a real replay does).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree


class NotReplayable(RuntimeError):
    """Something the step does with a logged value cannot be replayed from a graph."""


@dataclass
class LogCall:
    name: str
    value: Any  # a static tensor, or a Python number frozen at capture
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Recording:
    """A captured step's log calls, deferred-check losses, output and loss."""

    logs: list[LogCall] = field(default_factory=list)
    losses: list[torch.Tensor] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)  # names logged as Python numbers (frozen at capture)
    problem: str | None = None  # what a warm-up step did that a capture could not replay
    output_leaves: list[Any] = field(default_factory=list)
    output_spec: pytree.TreeSpec | None = None
    loss: Any = None

    def keep_result(self, output: Any, loss: Any) -> None:
        self.output_leaves, self.output_spec = pytree.tree_flatten(output)
        self.loss = loss

    def statics(self) -> list[torch.Tensor]:
        """Every distinct tensor the host reads after a replay."""
        found: dict[int, torch.Tensor] = {}
        candidates = [*self.output_leaves, self.loss, *self.losses, *(call.value for call in self.logs)]
        for value in candidates:
            if isinstance(value, torch.Tensor):
                found.setdefault(id(value), value)
        return list(found.values())

    def result(self, fresh: dict[int, torch.Tensor]) -> tuple[Any, Any]:
        """The step's (output, loss) as copies made after this replay."""
        leaves = [fresh[id(leaf)] if isinstance(leaf, torch.Tensor) else leaf for leaf in self.output_leaves]
        assert self.output_spec is not None
        loss = fresh[id(self.loss)] if isinstance(self.loss, torch.Tensor) else self.loss
        return pytree.tree_unflatten(leaves, self.output_spec), loss

    def replay_calls(self, results: Any, deferred: Any, fresh: dict[int, torch.Tensor], step: int) -> None:
        """Make the recorded calls again with this replay's values."""
        for call in self.logs:
            value = fresh[id(call.value)] if isinstance(call.value, torch.Tensor) else call.value
            results.log(call.name, value, *call.args, **call.kwargs)
        for loss in self.losses:
            deferred.record(fresh[id(loss)], step)


def fresh_copies(tensors: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """A detached copy of each static tensor (by the static tensor's id)."""
    return {id(t): t.detach().clone() for t in tensors}


def _is_metric(value: Any) -> bool:
    return hasattr(value, "compute") and hasattr(value, "reset")


class _Stand:
    """A stand-in: forwards every attribute but the one call it intercepts."""

    def __init__(self, real: Any, recording: Recording, mode: str) -> None:
        self._real, self._recording, self._mode, self._index = real, recording, mode, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class ResultsStandIn(_Stand):
    """Takes the place of ``trainer.metric_log.results`` (what ``self.log`` writes into)."""

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        recording = self._recording
        if _is_metric(value):
            problem = (
                f"self.log({name!r}, <{type(value).__name__}>) inside the step: a torchmetrics Metric keeps its "
                "state on the host; log it from on_train_batch_end, or compute it in the step and log the tensor"
            )
            if self._mode != "observe":
                raise NotReplayable(problem)
            recording.problem = recording.problem or problem
        if self._mode == "observe":
            self._real.log(name, value, *args, **kwargs)
        elif self._mode == "record":
            if not isinstance(value, torch.Tensor):
                recording.numbers.append(name)
            recording.logs.append(LogCall(name, value, args, kwargs))
        else:
            _refill(recording.logs, self._index, name, value)
            self._index += 1


class DeferredStandIn(_Stand):
    """Takes the place of the deferred non-finite record (``record(loss, step)``)."""

    def record(self, loss: torch.Tensor, step: int) -> None:
        if self._mode == "observe":
            self._real.record(loss, step)
        elif self._mode == "record":
            self._recording.losses.append(loss)
        else:
            self._recording.losses[self._index].detach().copy_(loss.detach())
            self._index += 1


def _refill(logs: list[LogCall], index: int, name: str, value: Any) -> None:
    if index >= len(logs) or logs[index].name != name:
        raise NotReplayable(f"the re-run step logged {name!r} where the captured one logged otherwise")
    static = logs[index].value
    if isinstance(static, torch.Tensor):
        static.detach().copy_(value.detach() if isinstance(value, torch.Tensor) else torch.as_tensor(value))


@contextmanager
def standing_in(
    results_at: tuple[Any, str], deferred_at: tuple[Any, str] | None, recording: Recording, mode: str
) -> Iterator[None]:
    """The stand-ins in place of ``getattr(*results_at)`` and ``getattr(*deferred_at)`` for the block."""
    owner, attr = results_at
    results = getattr(owner, attr)
    setattr(owner, attr, ResultsStandIn(results, recording, mode))
    deferred = getattr(*deferred_at) if deferred_at is not None else None
    if deferred_at is not None:
        setattr(*deferred_at, DeferredStandIn(deferred, recording, mode))
    try:
        yield
    finally:
        setattr(owner, attr, results)
        if deferred_at is not None:
            setattr(*deferred_at, deferred)
