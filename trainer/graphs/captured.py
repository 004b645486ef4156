"""``CapturedStep``: per batch, warm up, capture, replay the captured step, or run it eagerly.

Kinds of step are keyed by the batch's signature and the batch's place in its accumulation window
(``Key``): a window's first batch zeroes the gradients, its last steps the optimizer, and a batch
inside a window divides its loss by the window's length. Each kind warms up for ``WARM_UP`` eager
steps (on the backend's side stream, each watched for host reads: on the first, only reads in the
user's code count, as torch may initialise lazily there), is then captured, and replayed from then
on; at most ``MAX_GRAPHS`` kinds are captured. Before a capture, the optimizer's state is made for
every parameter that trains, and the module's own random generators are handed to the backend. A
replay continues an accumulation window only if the window began with a graph of the same batch
signature (the gradients it accumulates into are that graph's); otherwise the batch runs eagerly,
accumulating into the same gradient tensors. Anything that cannot be captured (a host read, a failed
capture, a learning rate assigned inside the step, a torchmetrics Metric logged inside it) is not a
crash: a warning names the first offending line and every later batch runs eagerly; a capture whose
failure the backend cannot undo on the running torch ends the fit with an error naming the line.
Dropped graphs keep only their counts, for the summary (what ran each batch).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

import trainer.graphs.backend as backends
from trainer.graphs import summary as kinds
from trainer.graphs.backend import GraphBackend
from trainer.graphs.checks import check_fit
from trainer.graphs.generators import find_generators
from trainer.graphs.inputs import Signature, StaticInputs, Uncapturable
from trainer.graphs.lines import CaptureLeftUnsafe, HostRead, error_line, first_error
from trainer.graphs.optimizers import create_missing_state
from trainer.graphs.summary import GraphSummary
from trainer.graphs.tape import Recording, fresh_copies, standing_in

if TYPE_CHECKING:
    from trainer.view import TrainerView

WARM_UP = 3  # eager steps of a kind before it is captured (torch's make_graphed_callables warms up 3)
MAX_GRAPHS = 8  # kinds of step captured at most; the rest run eagerly
StepFn = Callable[[Any, int], tuple[Any, Any]]  # the step's inner or micro step: (batch, batch_idx) -> (output, loss)


def capture_step(trainer: TrainerView, step: Any) -> CapturedStep:
    """The captured form of a fit's ``step`` (after its refusals), on the trainer's device."""
    check_fit(trainer.lightning_module)
    return CapturedStep(trainer, step, backends.backend_for(trainer.strategy.root_device))


@dataclass(frozen=True)
class Key:
    """A kind of step: what a graph captured depends on all of this."""

    signature: Signature
    starts: bool  # zeroes the gradients first
    ends: bool  # steps the optimizer
    divisor: float  # the loss is divided by the window's length


@dataclass
class Entry:
    seen: int = 0  # warm-up steps run
    graph: Any = None
    recording: Recording | None = None
    statics: list[torch.Tensor] = field(default_factory=list)
    grads: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (param, its static gradient)


class CapturedStep:
    """The training step of a ``cuda_graph=True`` fit (see the module docstring)."""

    def __init__(self, trainer: TrainerView, step: Any, backend: GraphBackend) -> None:
        self.trainer, self.step, self.backend = trainer, step, backend
        self.optimizer: torch.optim.Optimizer = step.optimizer
        self.learning_rates = backend.prepare_optimizer(self.optimizer)
        self.inputs = StaticInputs(MAX_GRAPHS)
        self.entries: dict[Key, Entry] = {}
        self.retired: list[tuple[int, bool]] = []  # dropped kinds' (warm-up steps, captured), for the summary
        self.summary = GraphSummary(warm_up=WARM_UP)
        self.window: Signature | None = None  # the signature whose graph began the current window
        self.setup: tuple[Any, ...] | None = None  # what trains, as of the epoch's start
        self.groups = len(self.optimizer.param_groups)

    # ---- what the fit loop calls ---------------------------------------------------------------------
    def batch_step(self) -> Callable[[Any, int], Any]:
        """This epoch's training batch: ``after_step`` at a window's end, as the eager step does."""
        self._check_setup()
        step = self.step
        inner, micro, after, window = step.inner_step(), step.micro_step(), step.after_step(), step.window
        every = window.size == 1

        def train(batch: Any, batch_idx: int) -> Any:
            ends = every or window.ends(batch_idx)
            starts = every or window.starts(batch_idx)
            divisor = 1.0 if every else window.divisor(batch_idx)
            output, loss = self.run(inner if ends else micro, batch, batch_idx, (starts, ends, divisor))
            if ends:
                after()
            step.step_loss = loss
            return output

        return train

    def mover(self, fallback: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
        """The batch transfer: from the loader's (pinned) memory straight into the static inputs."""
        move = self.inputs.mover(self.backend.device, fallback)

        def transfer(batch: Any) -> Any:
            if self.summary.fallback is not None:
                return batch if fallback is None else fallback(batch)
            return move(batch)

        return transfer

    def close(self) -> None:
        """At the fit's end: drop the graphs; rank zero prints the summary (what ran each batch, and why)."""
        text = self.finish_summary().text()
        self.release()
        if self.trainer.is_global_zero:
            print(text)

    def release(self) -> None:
        """Drop every graph and what it holds (its pool, its gradients); the kinds seen so far stay counted."""
        self.backend.release()
        self.retired += [(entry.seen, entry.recording is not None) for entry in self.entries.values()]
        self.entries, self.window = {}, None

    def finish_summary(self) -> GraphSummary:
        """The summary with each kind's warm-up steps counted as warming up, or as rare if never captured (when
        nothing could be captured, all of them warmed up)."""
        summary = self.summary
        counts = [*self.retired, *((entry.seen, entry.recording is not None) for entry in self.entries.values())]
        for seen, captured in counts:
            summary.eager[kinds.WARMING if captured or summary.fallback is not None else kinds.RARE] += seen
        self.retired = []
        for entry in self.entries.values():
            entry.seen = 0
        return summary

    # ---- one batch -------------------------------------------------------------------------------------
    def run(self, fn: StepFn, batch: Any, batch_idx: int, place: tuple[bool, bool, float]) -> tuple[Any, Any]:
        """``fn`` (the inner or the micro step) for one batch at ``place`` (starts, ends, divisor) in its window."""
        if self.summary.fallback is not None:
            return self._eager(fn, batch, batch_idx, kinds.FALLEN_BACK)
        if len(self.optimizer.param_groups) != self.groups:
            self._drop("the optimizer's param groups changed")
        window, starts = self.window, place[0]
        if starts:
            self.window = None
        try:
            found = self._entry(batch, place)
        except Uncapturable as error:
            return self._eager(fn, batch, batch_idx, f"where {error}")
        if found is None:
            return self._eager(fn, batch, batch_idx, kinds.FULL)
        entry, sig, static = found
        in_window = starts or sig is window  # a window continues the graph that began it, or runs eagerly
        if entry.graph is None and (entry.seen < WARM_UP or not in_window):
            return self._warm_up(entry, fn, static, batch_idx)
        if not in_window:
            return self._eager(fn, static, batch_idx, kinds.WINDOW)
        result = self._replay(entry) if entry.graph is not None else self._capture(entry, fn, static, batch_idx)
        if result is None:  # the capture failed: the step has not run
            return self._eager(fn, static, batch_idx, kinds.FALLEN_BACK)
        if starts:
            self.window = sig
        return result

    def _entry(self, batch: Any, place: tuple[bool, bool, float]) -> tuple[Entry, Signature, Any] | None:
        """The kind of step ``batch`` at ``place`` is, its signature and its static batch; None when the cache
        is full."""
        placed = self.inputs.place(batch)
        if placed is None:
            return None
        sig, static = placed
        key = Key(sig, *place)
        entry = self.entries.get(key)
        if entry is None:
            if len(self.entries) >= MAX_GRAPHS:
                return None
            entry = self.entries[key] = Entry()
        return entry, sig, static

    def _eager(self, fn: StepFn, batch: Any, batch_idx: int, reason: str) -> tuple[Any, Any]:
        self.summary.eager[reason] += 1
        with self.learning_rates.installed():
            result = fn(batch, batch_idx)
        self._check_learning_rates()
        return result

    def _warm_up(self, entry: Entry, fn: StepFn, batch: Any, batch_idx: int) -> tuple[Any, Any]:
        first = entry.seen == 0  # the first step of a kind: torch may autotune or initialise lazily, and wait
        recording = Recording()

        def run() -> tuple[tuple[Any, Any], HostRead | None]:
            with (
                self._stand_ins(recording, "observe"),
                self.learning_rates.installed(),
                self.backend.watch_host_reads() as watch,
            ):
                result = fn(batch, batch_idx)
            return result, watch.found

        result, found = self.backend.warm_up(run)
        entry.seen += 1
        if found is not None and (found.user or not first):
            self._fall_back(f"it waits on the device at {found}")
        elif recording.problem is not None:
            self._fall_back(recording.problem)
        self._check_learning_rates()
        return result

    def _capture(self, entry: Entry, fn: StepFn, batch: Any, batch_idx: int) -> tuple[Any, Any] | None:
        module = self.trainer.lightning_module
        params = list(module.parameters())
        unmade = create_missing_state(self.optimizer)  # state made inside a graph would be made again each replay
        if unmade is not None:
            self._fall_back(unmade)
            return None
        grads = [p.grad for p in params]
        generators = find_generators(module, self.backend.device)
        recording = Recording()
        try:
            with self._stand_ins(recording, "record"), self.learning_rates.installed():
                graph, (output, loss) = self.backend.capture(lambda: fn(batch, batch_idx), params, generators)
        except CaptureLeftUnsafe as unsafe:
            raise RuntimeError(f"cuda_graph=True: {_failed(unsafe)}; and {unsafe.why}, so the step cannot run eagerly "
                               "in this process. Fix that line, or set cuda_graph=False.") from unsafe  # fmt: skip
        except Exception as error:  # a capture that fails for any reason means: run eagerly
            for param, grad in zip(params, grads):  # a failed capture ran nothing: the gradients are as they were
                param.grad = grad
            self._fall_back(_failed(error))
            return None
        recording.keep_result(output, loss)
        entry.graph, entry.recording, entry.statics = graph, recording, recording.statics()
        entry.grads = [(p, p.grad) for p in params if p.grad is not None]
        self.summary.captured += 1
        if recording.numbers:
            warnings.warn(
                f"cuda_graph=True: {', '.join(map(repr, recording.numbers))} logged as a Python number inside the "
                "captured step, so every replay logs the number it had at capture; log a tensor, or log it from "
                "on_train_batch_end.",
                stacklevel=2,
            )
        result = self._read(entry)
        self._check_learning_rates()
        return result

    def _replay(self, entry: Entry) -> tuple[Any, Any]:
        self.learning_rates.refresh()
        if self.backend.replays_python:  # a fake replay re-runs the step: it refills the recorded tensors
            assert entry.recording is not None
            with self._stand_ins(entry.recording, "refill"), self.learning_rates.installed():
                self.backend.replay(entry.graph)
        else:
            self.backend.replay(entry.graph)
        for param, grad in entry.grads:  # what an eager step or a validation set stays out of the graph's way
            if param.grad is not grad:
                param.grad = grad
        self.summary.replayed += 1
        return self._read(entry)

    def _read(self, entry: Entry) -> tuple[Any, Any]:
        """After a replay: copies of what the host reads, the recorded log calls made again with them."""
        recording = entry.recording
        assert recording is not None
        fresh = fresh_copies(entry.statics)
        deferred = self._deferred_at()
        recording.replay_calls(
            self.trainer.metric_log.results,
            getattr(*deferred) if deferred is not None else None,
            fresh,
            self.trainer.global_step,
        )
        return recording.result(fresh)

    # ---- what may end capturing -------------------------------------------------------------------------
    def _fall_back(self, reason: str) -> None:
        if self.summary.fallback is not None:
            return
        self.summary.fallback = reason
        warnings.warn(
            f"cuda_graph=True: the training step cannot be captured: {reason}. The run continues eagerly; see "
            "docs/cuda-graphs.md for what a captured step may not do.",
            stacklevel=4,
        )
        self.release()

    def _check_learning_rates(self) -> None:
        assigned = self.learning_rates.assigned
        if assigned is not None:
            self._fall_back(
                f"the step assigns param_groups[{assigned}]['lr'] itself (e.g. a warm-up in on_before_optimizer_step), "
                "which a captured step would do once; change it in on_train_batch_start or with an LR scheduler"
            )

    def _check_setup(self) -> None:
        """Once per epoch: a change of what trains (requires_grad, param groups) drops the graphs."""
        module, groups = self.trainer.lightning_module, self.optimizer.param_groups
        setup = (
            tuple(p.requires_grad for p in module.parameters()),
            tuple(id(p) for group in groups for p in group["params"]),
        )
        if self.setup is not None and setup != self.setup:
            self._drop("what trains changed (requires_grad or the optimizer's parameters)")
        self.setup = setup

    def _drop(self, why: str) -> None:
        if any(entry.graph is not None for entry in self.entries.values()):
            self.summary.dropped.append(why)
        self.release()
        self.groups = len(self.optimizer.param_groups)

    # ---- the stand-ins for what the step logs -------------------------------------------------------------
    def _deferred_at(self) -> tuple[Any, str] | None:
        """Where the step keeps its deferred non-finite record (None when the check is off)."""
        nonfinite = getattr(self.step, "nonfinite", None)
        return (nonfinite, "deferred") if nonfinite is not None and hasattr(nonfinite, "deferred") else None

    def _stand_ins(self, recording: Recording, mode: str) -> Any:
        return standing_in((self.trainer.metric_log, "results"), self._deferred_at(), recording, mode)


def _failed(error: BaseException) -> str:
    """What made a capture fail, at the user's line."""
    where, first = error_line(error), first_error(error)
    return f"capturing it failed{f' at {where}' if where else ''}: {type(first).__name__}: {first}"
