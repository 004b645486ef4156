"""What a killed save leaves in a checkpoint folder, and who may remove it.

A save writes ``.<name>.tmp-<pid>-<host>`` and renames it over ``<name>``; before the first save of a
name, ``trainer.claims`` creates ``<name>`` empty (a placeholder) beside ``.<name>.claim-<pid>-<host>``,
its claim marker (the same file, hard-linked, or a non-empty note where there are no hard links). The
marker goes when the save of the name completes (``finished``). A process killed in between leaves a
temporary, or an empty placeholder and its marker: the pid and host in their names tell whether the
writer is gone. Only a gone writer's leftovers are removed, so a live run sharing the folder keeps its own.

Only the standard library: ``trainer.claims`` uses this at ``import trainer``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HOST = re.sub(r"[^\w.-]", "_", socket.gethostname())
MAX_AGE_S = 600.0  # a leftover untouched this long is stale even where its writer cannot be asked (another host)
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)(?:-(?P<host>.*))?$")
_CLAIM = re.compile(r"^\.(?P<name>.+)\.claim-(?P<pid>\d+)-(?P<host>.*)$")


def temporary(path: Path, tag: str = "") -> Path:
    """Where this process writes ``path`` before renaming it into place."""
    return path.with_name(f".{path.name}{tag}.tmp-{os.getpid()}-{HOST}")


@contextlib.contextmanager
def under_way(tmp: Path, target: Path) -> Iterator[None]:
    """Mark ``tmp`` as this process's save of ``target`` in progress until the block ends, for ``abandon``."""
    _UNDER_WAY[tmp] = target
    try:
        yield
    finally:
        _UNDER_WAY.pop(tmp, None)


def abandon() -> None:
    """This process is about to end without unwinding (``os._exit`` after another rank died): remove what its
    saves in progress leave, which their own ``except`` clauses will never reach: the temporary, and the empty
    placeholder of a name claimed for that save, with its marker."""
    for tmp, target in list(_UNDER_WAY.items()):
        with contextlib.suppress(OSError):
            _remove(tmp)
        with contextlib.suppress(OSError):
            _drop_claim(target, claim_marker(target))


_UNDER_WAY: dict[Path, Path] = {}  # a save's temporary -> its target


def claim_marker(path: Path) -> Path:
    """This process's marker of its claim on the name ``path``."""
    return path.with_name(f".{path.name}.claim-{os.getpid()}-{HOST}")


def finished(path: Path) -> None:
    """The save of ``path`` by this process is complete: its claim marker, if any, goes."""
    with contextlib.suppress(OSError):
        claim_marker(path).unlink()


@dataclass(frozen=True)
class Leftover:
    """A temporary or a claim in a checkpoint folder, and whether its writer is gone."""

    path: Path  # the temporary, or the claimed name (the placeholder)
    marker: Path | None  # a claim's marker
    pid: int
    host: str | None
    stale: bool

    @property
    def kind(self) -> str:
        return "temporary" if self.marker is None else "placeholder"

    def describe(self) -> str:
        where = f"pid {self.pid}" + (f" on {self.host}" if self.host and self.host != HOST else "")
        if self.marker is None:
            what = "the temporary of a save that did not finish"
        else:
            what = "an empty name claimed by a save that did not finish"
        state = "gone" if self.stale else "still running: its save may be under way"
        return f"{what} (its writer, {where}, is {state})"


def leftovers(folder: Path, max_age_s: float = MAX_AGE_S) -> list[Leftover]:
    """The temporaries, and the claims whose placeholder is still empty, in ``folder``."""
    found = []
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith("."):
                found += _leftover(Path(entry.path), now, max_age_s)
    return found


def _leftover(path: Path, now: float, max_age_s: float) -> list[Leftover]:
    try:
        if match := _TEMPORARY.match(path.name):
            stale = _stale(match, path, now, max_age_s)
            return [Leftover(path, None, int(match["pid"]), match["host"], stale)]
        if match := _CLAIM.match(path.name):
            target = path.with_name(match["name"])
            if not _unfilled(target, path):
                return [Leftover(target, path, int(match["pid"]), match["host"], True)]  # a marker alone
            return [Leftover(target, path, int(match["pid"]), match["host"], _stale(match, path, now, max_age_s))]
    except FileNotFoundError:  # its writer finished (renamed, released) or another cleaner won
        pass
    return []


def _stale(match: re.Match[str], path: Path, now: float, max_age_s: float) -> bool:
    written = path.stat().st_mtime
    return now - written > max_age_s or not writer_alive(int(match["pid"]), match["host"], written)


def _unfilled(target: Path, marker: Path) -> bool:
    """``target`` is still the empty placeholder of this claim: the marker's own file (hard links), or an empty
    file beside a note (exclusive creation, where the marker holds a byte)."""
    try:
        held, mark = os.lstat(target), os.stat(marker)
    except FileNotFoundError:
        return False
    if held.st_size != 0 or not os.path.isfile(target):
        return False
    return mark.st_size > 0 or (held.st_ino, held.st_dev) == (mark.st_ino, mark.st_dev)


def clean(folder: str | os.PathLike[str], max_age_s: float = MAX_AGE_S) -> list[Path]:
    """Remove the leftovers of gone writers in ``folder``: temporaries, and empty placeholders with their markers.

    Returns what was removed (temporaries and placeholders; a marker whose name was filled goes unlisted).
    Best effort: a folder that cannot be written keeps them (``verify`` reports them).
    """
    removed = []
    for left in leftovers(Path(folder), max_age_s):
        if not left.stale:
            continue
        with contextlib.suppress(OSError):
            if left.marker is None:
                _remove(left.path)
                removed.append(left.path)
                continue
            if _drop_claim(left.path, left.marker):
                removed.append(left.path)
    return removed


def _drop_claim(target: Path, marker: Path) -> bool:
    """Remove a claim: its placeholder while still unfilled (True then: removed), and its marker (best effort).
    An OSError removing the placeholder passes through, the marker left with it."""
    unfilled = _unfilled(target, marker)
    if unfilled:
        target.unlink()
    with contextlib.suppress(OSError):
        marker.unlink()
    return unfilled


def _remove(path: Path) -> None:
    """A temporary file (``torch.save``) or directory (``torch.distributed.checkpoint``)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def writer_alive(pid: int, host: str | None, written_at: float | None = None) -> bool:
    """Whether the process that wrote a leftover at ``written_at`` may still be running.

    A pid on another host (a shared filesystem) cannot be asked: assumed alive. A pid that runs a
    process started after the leftover was written is another process that got the number (a container
    restarted with the same pids): the writer is gone.
    """
    if (host is not None and host != HOST) or os.name != "posix":
        return True  # on Windows os.kill(pid, 0) would terminate the process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        pass
    started = _started_at(pid)
    return written_at is None or started is None or started <= written_at + 2.0  # btime has 1 s steps


def _started_at(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), where ``/proc`` tells; else None."""
    boot, ticks = _boot_time(), os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return boot + int(fields[19]) / ticks if boot is not None and ticks else None
    except (OSError, IndexError, ValueError):
        return None


@functools.cache
def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            return next(float(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
