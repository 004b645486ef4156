"""The measuring loop every benchmark here shares: baseline and ours, side by side."""

from __future__ import annotations

from collections.abc import Callable


def interleaved(
    baseline: Callable[[], float], ours: Callable[[], float], repeats: int
) -> tuple[list[float], list[float]]:
    """Measure both ``repeats`` times, swapping which runs first every round, so neither gains
    from its slot (caches warmed by the other, a machine whose speed drifts)."""
    base_times: list[float] = []
    our_times: list[float] = []
    for i in range(repeats):
        if i % 2 == 0:
            base_times.append(baseline())
            our_times.append(ours())
        else:
            our_times.append(ours())
            base_times.append(baseline())
    return base_times, our_times
