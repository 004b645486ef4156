"""A failure's cause in one line, for the last line of a job's output.

A rank that fails writes its cause where the launcher reads it (``record``); rank 0 of a
self-launch ends the job with ``rank N failed: Type: message``. An error re-raised from a
DataLoader worker gets a note naming the worker and its original error, which torch otherwise
buries in the middle of the message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

FAILURE_DIR_VAR = "STEADYTRAIN_FAILURE_DIR"
_WORKER = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)\.")
_LIMIT = 400


def worker_failure(exc: BaseException) -> tuple[int, str] | None:
    """(worker id, its ``Type: message``) where ``exc`` or its cause was re-raised from a DataLoader worker."""
    seen: BaseException | None = exc
    while seen is not None:
        match = _WORKER.match(str(seen))
        if match:
            lines = [line for line in str(seen).splitlines() if line.strip()]
            return int(match.group(2)), _short(lines[-1].strip())
        seen = seen.__cause__ or seen.__context__
    return None


def describe(exc: BaseException) -> str:
    """``Type: first line of the message``, or the worker's error and which worker raised it."""
    worker = worker_failure(exc)
    if worker is not None:
        return f"{worker[1]} (in DataLoader worker {worker[0]})"
    text = str(exc).strip().splitlines()
    return _short(f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__)


def _short(text: str) -> str:
    return text if len(text) <= _LIMIT else text[:_LIMIT] + " ..."


def note_worker_failure(exc: BaseException) -> None:
    """Add a last line naming the worker and its error to an error re-raised from a DataLoader worker."""
    worker = worker_failure(exc)
    note = f"steadytrain: DataLoader worker {worker[0]} failed: {worker[1]}" if worker else None
    if note is not None and note not in getattr(exc, "__notes__", []):
        exc.add_note(note)


def record(rank: int, exc: BaseException) -> None:
    """Write this rank's cause of failure where the launcher reads it (if it gave a folder)."""
    folder = os.environ.get(FAILURE_DIR_VAR)
    if not folder:
        return
    target = Path(folder) / f"rank{rank}"
    try:
        tmp = target.with_suffix(".tmp")
        tmp.write_text(describe(exc))
        os.replace(tmp, target)
    except OSError:
        pass  # the launcher then says only the exit code


def recorded(folder: str | None, rank: int) -> str | None:
    """The cause rank ``rank`` wrote, if any."""
    if not folder:
        return None
    try:
        return (Path(folder) / f"rank{rank}").read_text().strip() or None
    except OSError:
        return None
