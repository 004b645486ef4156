"""``Tqdm``: Lightning's tqdm (numbers padded so the postfix does not flicker), which writes plain lines where its
file is not a terminal.

tqdm redraws a bar with ``\\r``; in a log file (CI, SLURM, ``> out.log``) every redraw becomes text, thousands of
them an epoch. Given ``line_interval_s``, a bar whose file is no terminal writes one line at most that often and
one when it ends (``close``, or ``reset`` for the next epoch or loader), each formatted as the bar it stands for.
Nothing else changes: ``n``, ``total``, ``postfix`` and the rest are tqdm's.
"""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm as _tqdm

_PAD_SIZE = 5
LINE_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"


class Tqdm(_tqdm):  # type: ignore[misc]
    """tqdm with Lightning's number format; ``line_interval_s`` (steadytrain's) turns on plain lines off a terminal."""

    def __init__(self, *args: Any, line_interval_s: float | None = None, **kwargs: Any) -> None:
        file = kwargs.get("file")
        tty = file is not None and callable(getattr(file, "isatty", None)) and file.isatty()
        self._lines = _Lines(line_interval_s) if line_interval_s is not None and not tty else None
        super().__init__(*args, **kwargs)

    @staticmethod
    def format_num(n: int | float | str) -> str:
        """tqdm's number format, floats and numeric strings padded with zeros to 5 characters."""
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

    # ---- plain lines (only where ``_lines`` is set) ------------------------------------------------------
    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        lines = getattr(self, "_lines", None)
        if lines is None:
            return bool(super().display(msg, pos))
        lines.write(self, final=False)
        return True

    def clear(self, nolock: bool = False) -> None:
        if getattr(self, "_lines", None) is None:
            super().clear(nolock)

    def reset(self, total: int | float | None = None) -> None:
        if self._lines is not None and not self.disable:
            self._lines.write(self, final=True)  # the run that ends here (an epoch, a loader)
            self._lines.restart()
        super().reset(total)

    def close(self) -> None:
        lines = getattr(self, "_lines", None)  # absent when __init__ failed: tqdm's __del__ closes anyway
        if lines is None or getattr(self, "disable", True):
            super().close()
            return
        lines.write(self, final=True)
        self.disable = True
        self._decr_instances(self)


class _Lines:
    """When a line-mode bar writes: a changed state, at most once per ``interval_s``, and always at its end."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.restart()

    def restart(self) -> None:
        self.last = time.monotonic()  # the first line comes an interval in (or at the end)
        self.printed: tuple[Any, ...] | None = None

    def write(self, bar: Tqdm, final: bool) -> None:
        now = time.monotonic()
        if bar.n <= bar.initial or (not final and now - self.last < self.interval_s):
            return
        state = (bar.desc, bar.n, bar.total, bar.postfix)
        if state == self.printed:
            return  # this state already has its line
        fmt = LINE_FORMAT if bar.total else LINE_FORMAT.replace("{percentage:3.0f}% ", "")
        desc = bar.desc[:-2] if bar.desc.endswith(": ") else bar.desc  # set_description adds ": "
        line = bar.format_meter(**{**bar.format_dict, "bar_format": fmt, "prefix": desc})
        bar.fp.write(line + "\n")
        bar.fp.flush()
        self.printed, self.last = state, now
