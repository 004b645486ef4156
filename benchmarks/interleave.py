"""The measuring loop every benchmark here shares: baseline and ours, side by side."""

from __future__ import annotations

import statistics
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


def round_ratios(base: list[float], ours: list[float]) -> tuple[float, float, float]:
    """Median, min and max of ours/base per round: a burst of other load spoils a round or two on a
    shared machine, and the median of per-round ratios ignores those where a ratio of medians may not."""
    ratios = [o / b for o, b in zip(ours, base, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def byte_compile_trainer() -> None:
    """Write the package's ``.pyc`` files, as ``pip install`` does and a first import does unless
    ``PYTHONDONTWRITEBYTECODE`` is set (it is on some machines, this one included): otherwise each
    fresh interpreter compiles ``trainer`` from source (~0.1 s) while torch loads its bytecode."""
    import compileall
    from pathlib import Path

    compileall.compile_dir(Path(__file__).resolve().parent.parent / "trainer", quiet=1)
