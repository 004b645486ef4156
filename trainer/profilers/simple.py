"""``SimpleProfiler``: wall time per action; ``AdvancedProfiler``: cProfile per action."""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections import defaultdict
from pathlib import Path

from trainer.exceptions import MisconfigurationException
from trainer.profilers.base import Profiler


class SimpleProfiler(Profiler):
    """Mean and total wall time, calls and share of each action (the step, each hook, data fetching)."""

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None, extended: bool = True) -> None:
        super().__init__(dirpath, filename)
        self.extended = extended
        self.current_actions: dict[str, float] = {}
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self.start_time = time.monotonic()

    def start(self, action_name: str) -> None:
        if action_name in self.current_actions:
            raise MisconfigurationException(f"profiler action {action_name!r} was started twice without a stop.")
        self.current_actions[action_name] = time.monotonic()

    def stop(self, action_name: str) -> None:
        begun = self.current_actions.pop(action_name, None)
        if begun is None:
            raise MisconfigurationException(f"profiler action {action_name!r} was stopped without a start.")
        self.recorded_durations[action_name].append(time.monotonic() - begun)

    def summary(self) -> str:
        if not self.recorded_durations:
            return ""
        total = time.monotonic() - self.start_time
        rows = sorted(
            ((name, sum(d), len(d)) for name, d in self.recorded_durations.items()), key=lambda r: r[1], reverse=True
        )
        width = max(len(name) for name, _, _ in rows)
        lines = [
            f"{(self._stage or '').upper()} Profiler Report".strip(),
            f"| {'Action':<{width}} | Mean duration (s) | Num calls | Total time (s) | Percentage % |",
        ]
        for name, spent, calls in rows:
            share = 100 * spent / total
            lines.append(f"| {name:<{width}} | {spent / calls:17.6f} | {calls:9d} | {spent:14.5f} | {share:12.2f} |")
        return "\n".join(lines)


class AdvancedProfiler(Profiler):
    """cProfile statistics per action (the functions each action spent its time in); ``dump_stats=True`` also
    writes each action's raw statistics, ``<stage>-<filename>-<action>.prof``, for snakeviz or ``pstats``."""

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        line_count_restriction: float = 1.0,
        dump_stats: bool = False,
    ) -> None:
        super().__init__(dirpath, filename)
        self.line_count_restriction, self.dump_stats = line_count_restriction, dump_stats
        self.profiled_actions: dict[str, cProfile.Profile] = {}

    def start(self, action_name: str) -> None:
        if action_name not in self.profiled_actions:
            self.profiled_actions[action_name] = cProfile.Profile()
        self.profiled_actions[action_name].enable()

    def stop(self, action_name: str) -> None:
        profile = self.profiled_actions.get(action_name)
        if profile is None:
            raise MisconfigurationException(f"profiler action {action_name!r} was stopped without a start.")
        profile.disable()

    def summary(self) -> str:
        parts = []
        for name, profile in self.profiled_actions.items():
            out = io.StringIO()
            pstats.Stats(profile, stream=out).strip_dirs().sort_stats("cumulative").print_stats(
                self.line_count_restriction
            )
            parts.append(f"Profile stats for: {name}\n{out.getvalue()}")
        return "\n".join(parts)

    def teardown(self, stage: str | None = None) -> None:
        if self.dump_stats and self.dirpath is not None:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            prefix = f"{self._stage or stage}-{self.filename or 'profiler'}"
            for name, profile in self.profiled_actions.items():
                safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
                profile.dump_stats(self.dirpath / f"{prefix}-{safe}{self._rank_suffix()}.prof")
        super().teardown(stage)
