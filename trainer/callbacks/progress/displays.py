"""Where a bar draws: ``Display`` is the seam between the hooks (``staged.py``) and a terminal library.

``LineDisplay`` writes plain lines for a log file, CI or SLURM output (no ``\\r`` redraws, one line
per ``line_interval_s`` and one at the end of each bar); ``TqdmDisplay`` draws tqdm bars on a
terminal. Both format with ``tqdm.format_meter``, so a log line reads like the bar it stands for.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm import tqdm as _tqdm

Metrics = Callable[[], dict[str, Any]]
_PAD_SIZE = 5
LINE_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"


class Tqdm(_tqdm):  # type: ignore[misc]
    """Lightning's tqdm: floats padded to 5 characters, so the postfix does not flicker."""

    @staticmethod
    def format_num(n: int | float | str) -> str:
        padded = isinstance(n, float | str)
        text = n if isinstance(n, str) else str(_tqdm.format_num(n))
        if padded and "e" not in text:
            if "." not in text and len(text) < _PAD_SIZE:
                try:
                    float(text)
                except ValueError:
                    return text
                text += "."
            text += "0" * (_PAD_SIZE - len(text))
        return text


def postfix(metrics: dict[str, Any]) -> str:
    """``k=v, ...`` with tqdm's number format (as ``set_postfix`` writes it)."""
    return ", ".join(f"{k}={Tqdm.format_num(v) if isinstance(v, float | int) else v}" for k, v in metrics.items())


class Display(Protocol):
    """A set of named bars. ``update`` draws when its display is due, or always with ``final``."""

    def open(self, key: str, desc: str, total: int | None, initial: int, position: int, leave: bool) -> None: ...
    def update(self, key: str, n: int, metrics: Metrics | None, final: bool = False) -> None: ...
    def close(self, key: str) -> None: ...
    def close_all(self) -> None: ...
    def write(self, text: str, end: str = "\n") -> None: ...


@dataclass
class _Line:
    desc: str
    total: int | None
    initial: int
    start: float = field(default_factory=time.monotonic)
    n: int = 0
    postfix: str = ""
    printed: tuple[int, str] | None = None  # (n, postfix) of the last line written


class LineDisplay:
    """Plain lines on stdout: at most one per ``interval_s`` seconds per bar, and the bar's last state
    when it ends (``final``), so every epoch ends with its ``n/n`` line."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._bars: dict[str, _Line] = {}
        self._last_print = 0.0

    def open(self, key: str, desc: str, total: int | None, initial: int, position: int, leave: bool) -> None:
        self._bars[key] = _Line(desc, total, initial, n=initial)
        self._last_print = time.monotonic()  # the first line comes an interval in (or at the end)

    def update(self, key: str, n: int, metrics: Metrics | None, final: bool = False) -> None:
        bar = self._bars.get(key)
        if bar is None:
            return
        bar.n = n
        now = time.monotonic()
        if not final and now - self._last_print < self.interval_s:
            return
        if metrics is not None:
            bar.postfix = postfix(metrics())
        if final and bar.printed == (bar.n, bar.postfix):
            return  # the end of a bar already on its own line
        bar.printed = (bar.n, bar.postfix)
        self._last_print = now
        print(self.render(bar, now), flush=True)

    @staticmethod
    def render(bar: _Line, now: float) -> str:
        elapsed = max(now - bar.start, 1e-9)
        text: str = _tqdm.format_meter(
            bar.n,
            bar.total,
            elapsed,
            prefix=bar.desc,
            postfix=bar.postfix or None,
            rate=(bar.n - bar.initial) / elapsed,
            initial=bar.initial,
            bar_format=LINE_FORMAT if bar.total else LINE_FORMAT.replace("{percentage:3.0f}% ", ""),
        )
        return text

    def close(self, key: str) -> None:
        self._bars.pop(key, None)

    def close_all(self) -> None:
        self._bars.clear()

    def write(self, text: str, end: str = "\n") -> None:
        print(text, end=end, flush=True)


class TqdmDisplay:
    """tqdm bars on a terminal; a bar opened again before it is closed is reset and reused, as in Lightning."""

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"

    def __init__(self, process_position: int = 0, min_interval_s: float = 0.1) -> None:
        self.process_position = process_position
        self.min_interval_s = min_interval_s
        self._bars: dict[str, Tqdm] = {}
        self._last_draw: dict[str, float] = {}

    def open(self, key: str, desc: str, total: int | None, initial: int, position: int, leave: bool) -> None:
        bar = self._bars.get(key)
        if bar is None:
            bar = Tqdm(
                desc=desc,
                total=total,
                initial=initial,
                position=2 * self.process_position + position,
                leave=leave,
                dynamic_ncols=True,
                file=sys.stdout,
                smoothing=0,
                bar_format=self.BAR_FORMAT,
            )
            self._bars[key] = bar
        else:
            bar.reset(total=total)
            bar.initial = bar.n = initial
            bar.set_description(desc, refresh=False)
        self._last_draw[key] = 0.0

    def update(self, key: str, n: int, metrics: Metrics | None, final: bool = False) -> None:
        bar = self._bars.get(key)
        if bar is None:
            return
        bar.n = n
        now = time.monotonic()
        if not final and now - self._last_draw[key] < self.min_interval_s:
            return  # tqdm's own mininterval: a terminal redraw costs more than a fast step
        self._last_draw[key] = now
        if metrics is not None:
            bar.set_postfix(metrics(), refresh=False)
        bar.refresh()

    def close(self, key: str) -> None:
        """End the bar: it stays on screen if opened with ``leave``, else it goes."""
        bar = self._bars.pop(key, None)
        if bar is not None:
            bar.close()

    def close_all(self) -> None:
        for key in list(self._bars):
            self.close(key)

    def write(self, text: str, end: str = "\n") -> None:
        Tqdm.write(text, end=end, file=sys.stdout)
