"""Where a step did what a graph cannot: the user's line, found from a stack or an exception's traceback; and
``CaptureLeftUnsafe``, which a backend raises for a failed capture it cannot undo (here, so the backend seam
and the CUDA backend share it without importing each other).

A host read deep inside torch (``print(loss)`` reads through ``torch/_tensor_str.py``) or an error
raised while a capture ends is reported at the line of the user's code that caused it: the innermost
frame outside torch, this package and the standard library.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
import traceback
from dataclasses import dataclass

import torch

_TORCH = os.path.dirname(torch.__file__) + os.sep
_TRAINER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = tuple({sysconfig.get_paths()["stdlib"] + os.sep, os.path.dirname(os.__file__) + os.sep})


@dataclass(frozen=True)
class HostRead:
    """The first line where a step made the host wait for the device: it cannot be captured."""

    file: str
    line: int
    code: str
    user: bool = True  # in the user's code; False: inside torch, under the trainer's call (e.g. a lazy initialisation)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" ({self.code})" if self.code else "")


class CaptureLeftUnsafe(RuntimeError):
    """A capture failed, and what it left behind in torch cannot be undone here: running on would crash later."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class Watch:
    """Filled in while a backend watches a step: the first host read, if any."""

    found: HostRead | None = None


def user_line(stack: list[traceback.FrameSummary]) -> HostRead | None:
    """The line to name for a host read or an error at the innermost frame of ``stack``: the innermost frame
    outside torch and the standard library when it is the user's code (a script, a package of theirs); when
    it is the trainer's (torch's optimizer step, called by the step), torch's innermost line."""
    frames = [f for f in stack if f.filename and not f.filename.startswith("<")]
    outside = [f for f in frames if not _under(f, (_TORCH, *_STDLIB))]
    user = bool(outside) and not _under(outside[-1], (_TRAINER,))
    if user:
        frame = outside[-1]
    else:
        inner = [f for f in frames if not _under(f, _STDLIB)] or frames
        if not inner:
            return None
        frame = inner[-1]
    code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return HostRead(frame.filename, frame.lineno or 0, code, user)


def _under(frame: traceback.FrameSummary, folders: tuple[str, ...]) -> bool:
    return os.path.abspath(frame.filename).startswith(folders)


def _is_user(path: str) -> bool:
    return not path.startswith((_TORCH, _TRAINER, *_STDLIB))


def error_line(error: BaseException) -> HostRead | None:
    """The user's line an exception (or the one it interrupted, for an error raised while leaving a
    capture) was raised at."""
    seen: set[int] = set()
    found: HostRead | None = None
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        line = user_line(traceback.extract_tb(current.__traceback__))
        if line is not None and (found is None or _is_user(os.path.abspath(line.file))):
            found = line
        current = current.__context__
    return found


def first_error(error: BaseException) -> BaseException:
    """The error that started a chain (the one raised inside a capture, not the capture's end failing after it)."""
    seen = {id(error)}
    while error.__context__ is not None and id(error.__context__) not in seen:
        error = error.__context__
        seen.add(id(error))
    return error


def frames_here() -> list[traceback.FrameSummary]:
    """The caller's stack, outermost first."""
    return list(traceback.extract_stack())[:-1]
