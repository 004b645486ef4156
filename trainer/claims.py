"""Claims: how runs sharing a folder never take the same run folder or replace each other's checkpoints.

A run folder (``version_<n>``) is claimed by ``os.mkdir``, which fails when the folder exists. A checkpoint
is written atomically (a temporary renamed over the target), and a rename replaces what is there; so
before a run first writes a name it does not own, it claims the name by creating the file empty and
exclusively, and its atomic write then replaces only its own placeholder. The file claim is a hard link
of a private empty file to the name: ``link`` never replaces a name, and is atomic on local disks and on
every NFS version (``O_EXCL`` was not on NFSv2). Where a filesystem has no hard links, ``O_CREAT | O_EXCL``
claims instead. An empty placeholder is never taken for a checkpoint (``is_placeholder``). The private file
stays, as the claim's marker, until the save of the name completes: a run killed in between leaves a
placeholder whose marker names its pid and host, which the next run in the folder removes
(``trainer.checkpoint.leftovers``).

Only the standard library at import: loggers and callbacks import this at ``import trainer``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.view import TrainerView

# Filesystems without hard links answer link() with one of these; O_EXCL claims there instead.
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS, errno.EMLINK}


def refuse_url(path: str | os.PathLike[str], what: str) -> None:
    """A URL (``s3://``, ``memory://``) is refused where steadytrain writes runs and checkpoints: both rest on local
    filesystem guarantees (an exclusive create, an atomic rename) that object stores do not give, and a URL taken
    for a local path would write to a folder named ``s3:`` instead."""
    if "://" in os.fspath(path):
        from trainer.exceptions import MisconfigurationException

        raise MisconfigurationException(
            f"{what} {os.fspath(path)!r} is a URL; steadytrain writes run folders and checkpoints to a local (or "
            "mounted) folder, as it claims names exclusively and replaces files by an atomic rename, which object "
            "stores cannot do. Give a local folder and copy it where you need it."
        )


# ---- run folders ----------------------------------------------------------------------------------------
def next_version(root: str) -> int:
    """The first ``n`` above every existing ``version_<n>`` folder: a guess that ``claim_version`` makes sure of."""
    if not os.path.isdir(root):
        return 0
    taken = [int(d.name[8:]) for d in os.scandir(root) if d.name.startswith("version_") and d.name[8:].isdigit()]
    return max(taken, default=-1) + 1


def claim_version(root: str) -> int:
    """Create ``<root>/version_<n>`` for the next free ``n`` and return ``n``; never a folder that exists.

    Of two processes creating the same folder exactly one succeeds (on a local disk, and on NFS, where the
    server decides); the other lists again and tries the next number.
    """
    try:
        os.makedirs(root, exist_ok=True)
        version = next_version(root)
        while True:
            try:
                os.mkdir(os.path.join(root, f"version_{version}"))
                return version
            except FileExistsError:
                version = max(version + 1, next_version(root))
    except OSError as err:  # said as the fit-start check says it (loops/checks.py), which this comes before
        from trainer.checkpoint.io import unwritable_reason

        reason = unwritable_reason(root) or f"{err.strerror or err} ({err.filename or root})"
        raise PermissionError(
            f"default_root_dir / the logger's folder {root} is not writable: {reason}. Choose a folder you can "
            "write to (default_root_dir, or the logger's save_dir)."
        ) from err


# ---- checkpoint names -----------------------------------------------------------------------------------
def claim_file(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` empty if nobody has it: True when this call made it, False when it existed.

    A claim made keeps its marker until the save of ``path`` completes (``leftovers.finished``) or the
    name is given back (``give_back``).
    """
    from trainer.checkpoint.io import could_not_write
    from trainer.checkpoint.leftovers import claim_marker

    path = Path(path)
    mine = claim_marker(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(mine, "xb"):
            pass
    except FileExistsError:  # left by a claim of ours that died between its two steps: start over
        mine.unlink()
        return claim_file(path)
    except OSError as err:  # a folder turned read-only, a vanished mount: said as a failed save says it
        raise could_not_write(path, err) from err
    won = False
    try:
        won = _link(mine, path)
    except OSError as err:
        raise could_not_write(path, err) from err
    finally:
        if not won:
            with contextlib.suppress(OSError):
                mine.unlink()
    return won


def _link(mine: Path, path: Path) -> bool:
    try:
        os.link(mine, path)
    except FileExistsError:
        pass
    except OSError as err:
        if err.errno not in _NO_LINKS:
            raise
        return _create_exclusively(path, mine)
    # On NFS a link whose reply was lost is sent again and answered "exists": the link count tells.
    return os.stat(mine).st_nlink == 2


def _create_exclusively(path: Path, mine: Path) -> bool:
    try:
        with open(path, "xb"):
            pass
    except FileExistsError:
        return False
    mine.write_bytes(b"x")  # a marker that is not the placeholder itself holds a byte (leftovers._unfilled)
    return True


def versioned(folder: str | os.PathLike[str], stem: str, ext: str, version: int) -> Path:
    """``<stem><ext>``, then Lightning's ``<stem>-v1<ext>``, ``<stem>-v2<ext>``..."""
    return Path(folder) / (f"{stem}{ext}" if version == 0 else f"{stem}-v{version}{ext}")


def claim_name(
    folder: str | os.PathLike[str], stem: str, ext: str, owns: Callable[[Path], bool], start: int = 1
) -> tuple[Path, bool]:
    """The first of ``stem``, ``stem-v<start>``, ``stem-v<start+1>``... that this run ``owns`` or claims now; and
    whether it claimed it now."""
    version = 0
    while True:
        path = versioned(folder, stem, ext, version)
        if owns(path):
            return path, False
        if claim_file(path):
            return path, True
        version = max(version + 1, start)


def is_placeholder(path: str | os.PathLike[str]) -> bool:
    """An empty file or folder: a claimed name whose checkpoint was never written."""
    path = Path(path)
    with contextlib.suppress(OSError):
        if path.is_dir():
            return not any(path.iterdir())
        return path.stat().st_size == 0
    return False


def give_back(path: str | os.PathLike[str]) -> None:
    """Remove a placeholder this run claimed and could not fill (its save failed); never a written file."""
    from trainer.checkpoint.leftovers import claim_marker

    if Path(path).is_file() and is_placeholder(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        claim_marker(Path(path)).unlink()


class RunNames:
    """The checkpoint names in a folder that one run may replace: those it claimed, and those ``restored`` accepts
    (the files named in the state of the run it resumed: that run's files are its own)."""

    def __init__(self, restored: Callable[[str], bool]) -> None:
        self.restored = restored
        self.claimed: set[str] = set()
        self.new: list[str] = []  # claimed for the save under way, given back if it fails

    def __eq__(self, other: object) -> bool:
        """The same names claimed (a callback compared with its pickled copy, as Lightning's tests do)."""
        return isinstance(other, RunNames) and (self.claimed, self.new) == (other.claimed, other.new)

    __hash__ = None  # type: ignore[assignment]

    def owns(self, path: Path) -> bool:
        return str(path) in self.claimed or self.restored(str(path))

    def free(self, folder: str | os.PathLike[str], stem: str, ext: str, counter: bool = True) -> Path:
        """The first of ``stem``, ``stem-v1``... that this run owns or nobody has: a look, nothing claimed."""
        version, path = 0, versioned(folder, stem, ext, 0)
        while counter and path.exists() and not self.owns(path):
            version += 1
            path = versioned(folder, stem, ext, version)
        return path

    def claim(
        self,
        folder: str | os.PathLike[str],
        stem: str,
        ext: str,
        counter: bool = True,
        replaces: str | None = "",
        start: int = 1,
    ) -> Path:
        """The name this run writes, created exclusively first; another run's file gets the next ``-v<n>``.
        Without ``counter`` (Lightning's ``enable_version_counter=False``: overwrite) replacing one is warned.

        ``replaces`` (Lightning's rule for top-k files): the one existing file this save may take the name of,
        the checkpoint it drops (None: none); any other file there, this run's or another's, keeps its name and
        the new one gets the next ``-v<n>``. Left out: every name this run claimed or resumed may be replaced.
        """
        if counter:
            owns = self.owns if replaces == "" else (lambda path: replaces is not None and path == Path(replaces))
            path, new = claim_name(folder, stem, ext, owns, start)
        else:
            path = versioned(folder, stem, ext, 0)
            new = not self.owns(path) and claim_file(path)
            if not new and not self.owns(path):
                warnings.warn(
                    f"ModelCheckpoint(enable_version_counter=False) replaces {path}, which this run did not write.",
                    stacklevel=4,
                )
        if new:
            self.new.append(str(path))
        self.claimed.add(str(path))
        return path

    def give_back_new(self) -> None:
        """The save these names were claimed for failed: remove their placeholders (a written file stays)."""
        for path in self.new:
            give_back(path)
        self.new = []


def claim_for_run(trainer: TrainerView, folder: str | os.PathLike[str], stem: str, ext: str = ".ckpt") -> Path:
    """Collective: a checkpoint name in ``folder`` for this run, claimed by global rank zero (``interrupted.ckpt``,
    or ``interrupted-v1.ckpt`` when another run's is there). The checkpoint this run resumed from is its own."""
    resumed = str(trainer.ckpt_path) if trainer.ckpt_path else None
    chosen = None
    if trainer.is_global_zero:
        chosen = str(claim_name(folder, stem, ext, lambda path: str(path) == resumed)[0])
    return Path(trainer.strategy.broadcast(chosen))
