"""What a captured fit did with each training batch, printed at the fit's end so a slow run says why."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

WARMING = "warming up"  # the first steps of each kind of step, eager on a side stream
RARE = "rare"  # a kind of step seen too few times to capture (a partial last batch, a short last window)
WINDOW = "in an accumulation window begun eagerly"
FULL = "cache full"
FALLEN_BACK = "after the fallback"


@dataclass
class GraphSummary:
    """Training batches by what ran them: a replay, a capture (which runs the step too), or the eager step."""

    replayed: int = 0
    captured: int = 0
    eager: Counter[str] = field(default_factory=Counter)
    fallback: str | None = None  # why the step could not be captured, if it could not
    dropped: list[str] = field(default_factory=list)  # why graphs were dropped and captured again
    warm_up: int = 3

    @property
    def total(self) -> int:
        return self.replayed + self.captured + sum(self.eager.values())

    def text(self) -> str:
        parts = [
            f"steadytrain: cuda_graph: of {self.total} training batches, {self.replayed} replayed a captured graph, "
            f"{self.captured} were captured, {sum(self.eager.values())} ran eagerly"
        ]
        reasons = [f"{count} {self._words(reason)}" for reason, count in sorted(self.eager.items()) if count]
        text = parts[0] + (f" ({'; '.join(reasons)})" if reasons else "") + "."
        if self.dropped:
            text += f" Graphs dropped and captured again: {'; '.join(self.dropped)}."
        if self.fallback is not None:
            text += f" The step could not be captured: {self.fallback}."
        return text

    def _words(self, reason: str) -> str:
        if reason == RARE:
            return f"of a kind seen fewer than {self.warm_up} times (e.g. a partial last batch)"
        if reason == FULL:
            return "of a kind beyond the graph cache's size"
        return reason
