"""Which checkpoint ``ckpt_path="last"`` (and an elastic restart) resumes, and why the others were passed over.

Every ``*.ckpt`` in the run's folders is a candidate. Each is opened without reading its tensors (memory-mapped)
to learn what it is (``kinds``) and how far its run had got. Files that cannot resume are set aside with the
reason (empty, cut short, unreadable, a newer format, parts missing); weights-only files count only where there
is no full checkpoint. The full ones are grouped by run: a checkpoint's ``ModelCheckpoint`` states name its
run's files (best, kept, last), so files in one folder that name each other are one run's. The run that saved
last (by file time) is resumed, from the checkpoint of it that recorded the most progress (global step, epoch,
batches; ties by time): file times change when files are copied, the progress they record does not. That one is
then read whole against its digests; a damaged one is set aside and the next tried.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint import leftovers
from trainer.checkpoint.damage import damage
from trainer.checkpoint.io import DCP_METADATA, PathLike, load_checkpoint, looks_complete
from trainer.checkpoint.kinds import kind_of, progress_of

_META = "meta.pt"  # a sharded checkpoint's trainer state (trainer.checkpoint.sharded.META)
_PATH_KEYS = ("best_model_path", "last_model_path", "kth_best_model_path")


@dataclass
class Candidate:
    path: Path
    stamp: int  # modification time (ns); a directory's is its .metadata's, written last
    reached: tuple[int, int, int] = (-1, -1, -1)  # the progress it recorded: global step, epoch, batches trained
    resumes: bool = False
    weights_only: bool = False
    why: str = ""  # why it cannot resume, said as "skipped ..." does
    names: frozenset[str] = frozenset()  # the files of its run it names (in its folder)

    def sort_key(self) -> tuple[tuple[int, int, int], int, bool]:
        return self.reached, self.stamp, self.path.name == "last.ckpt"


@dataclass
class Choice:
    picked: Candidate | None
    skipped: list[str] = field(default_factory=list)  # "the damaged checkpoint X (why)", ...
    runs: list[list[Candidate]] = field(default_factory=list)  # the runs found, the one that saved last first
    torn: list[str] = field(default_factory=list)  # the skipped that hold something (not an empty placeholder)

    def furthest(self) -> list[Path]:
        """Each run's furthest checkpoint, the run that saved last first."""
        return [max(run, key=Candidate.sort_key).path for run in self.runs]


def choose(folders: Sequence[PathLike], since: float | None = None) -> Choice:
    """The checkpoint to resume among ``folders``' (``since``: written at or after this ``time.time()``)."""
    candidates = [examine(path) for path in _candidates(folders, since)]
    full = [c for c in candidates if c.resumes]
    pool = full or [c for c in candidates if c.weights_only]
    choice = Choice(None, runs=_runs(pool))
    for c in candidates:
        if not c.resumes and not c.weights_only:
            choice.skipped.append(c.why)
            if not c.why.startswith("the empty"):  # a name claimed by a save that never wrote it: nothing there
                choice.torn.append(c.why)
    exports = [c.path.name for c in candidates if c.weights_only and full]
    if exports:
        shown = ", ".join(exports[:4]) + (f" and {len(exports) - 4} more" if len(exports) > 4 else "")
        choice.skipped.append(f"{len(exports)} weights-only checkpoint(s) ({shown}: no trainer state to resume from)")
    for run in choice.runs:
        for c in sorted(run, key=Candidate.sort_key, reverse=True):
            why = damage(c.path)
            if why is None:
                choice.picked = c
                return choice
            choice.skipped.append(f"the damaged checkpoint {c.path} ({why})")
            choice.torn.append(choice.skipped[-1])
    return choice


def find_last_checkpoint(dirpath: PathLike, since: float | None = None) -> Path | None:
    """The checkpoint ``ckpt_path="last"`` resumes in one folder (see above); a damaged or torn one skipped is
    warned about."""
    return newest_checkpoint([dirpath], since)


def newest_checkpoint(folders: Sequence[PathLike], since: float | None = None) -> Path | None:
    """``find_last_checkpoint``'s choice across ``folders`` (an elastic restart's, with ``since``)."""
    choice = choose(folders, since)
    for why in choice.skipped:
        if not why.startswith("the empty") and "weights-only" not in why:
            warnings.warn(f"steadytrain: skipped {why}; trying the next one.", stacklevel=3)
    return choice.picked.path if choice.picked is not None else None


def _candidates(folders: Sequence[PathLike], since: float | None) -> Iterator[Path]:
    """``*.ckpt`` files, directories (sharded) and links; temporaries start with a dot. The leftovers of gone
    writers are removed first (a killed save's temporary and placeholder)."""
    for folder in map(Path, folders):
        if not folder.is_dir():
            continue
        leftovers.clean(folder)
        for path in sorted(folder.glob("*.ckpt")):
            if path.name.startswith("."):
                continue
            if since is None or _stamp(path) >= since * 1e9:
                yield path


def _stamp(path: Path) -> int:
    metadata = path / DCP_METADATA
    try:
        return (metadata if path.is_dir() and metadata.is_file() else path).stat().st_mtime_ns
    except OSError:  # a link to nothing
        return 0


def examine(path: Path) -> Candidate:
    """What ``path`` is and how far its run had got, without reading its tensors."""
    found = Candidate(path, _stamp(path))
    try:
        checkpoint = _peek(path)
    except _Unusable as err:
        found.why = str(err)
        return found
    kind = kind_of(checkpoint)
    found.resumes, found.weights_only = kind.resumes, kind.weights_only
    if not (kind.resumes or kind.weights_only):
        found.why = f"{path}: it {kind.problem}"
    if isinstance(checkpoint, dict):
        found.reached = progress_of(checkpoint)
        found.names = _names(checkpoint)
    return found


class _Unusable(Exception):
    """Why a candidate cannot even be opened, said as "skipped ..." says it."""


def _peek(path: Path) -> Any:
    if not path.exists():
        raise _Unusable(f"the link {path} (its target {path.resolve()} does not exist)")
    if path.is_dir():
        if not ((path / DCP_METADATA).is_file() and (path / _META).is_file()):
            raise _Unusable(f"the incomplete sharded checkpoint {path} (no {DCP_METADATA} or {_META}: a save that was "
                            "killed, or a copy that did not finish)")  # fmt: skip
        return _load(path / _META, load_checkpoint)
    size = path.stat().st_size
    if size == 0:
        raise _Unusable(f"the empty checkpoint {path} (0 bytes: a save or a copy that never wrote it)")
    if not looks_complete(path):
        raise _Unusable(f"the cut-short checkpoint {path} ({size} bytes, its end missing: a save or a copy that did "
                        "not finish)")  # fmt: skip
    return _load(path, _mapped)


def _mapped(path: Path) -> Any:
    """The checkpoint with its tensors memory-mapped, not read; a legacy (not zip) file is read whole."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as err:
        if "mmap" not in str(err):
            raise
    return load_checkpoint(path)


def _load(path: Path, load: Any) -> Any:
    try:
        return load(path)
    except pickle.UnpicklingError as err:
        raise _Unusable(f"the unreadable checkpoint {path} (weights_only refused it: {str(err)[:120]})") from err
    except Exception as err:  # a zip cut inside, bytes changed: the digests say which
        why = damage(path)
        what = f"damaged checkpoint {path} ({why})" if why else f"unreadable checkpoint {path} ({str(err)[:120]})"
        raise _Unusable(f"the {what}") from err


def _names(checkpoint: dict[str, Any]) -> frozenset[str]:
    """The checkpoint files its ``ModelCheckpoint`` states name (file names: a copied folder keeps them)."""
    callbacks = checkpoint.get("callbacks")
    names: set[str] = set()
    for state in callbacks.values() if isinstance(callbacks, dict) else ():
        if not isinstance(state, dict):
            continue
        names.update(Path(state[key]).name for key in _PATH_KEYS if isinstance(state.get(key), str) and state[key])
        kept = state.get("best_k_models")
        names.update(Path(key).name for key in kept if isinstance(key, str)) if isinstance(kept, dict) else None
    return frozenset(names)


def _runs(pool: list[Candidate]) -> list[list[Candidate]]:
    """The candidates by run: those of one folder that name each other, or a file they all name (directly or
    through others)."""
    parent = {c.path: c.path for c in pool}
    named = {(c.path.parent, c.path.name): c.path for c in pool}

    def root(path: Path) -> Path:
        while parent[path] != path:
            parent[path] = parent[parent[path]]
            path = parent[path]
        return path

    for c in pool:
        for name in c.names:  # a name no file holds (a copy without last.ckpt) still ties those that name it
            other = named.setdefault((c.path.parent, name), c.path)
            parent[root(other)] = root(c.path)
    runs: dict[Path, list[Candidate]] = {}
    for c in pool:
        runs.setdefault(root(c.path), []).append(c)
    return sorted(runs.values(), key=lambda run: max((c.stamp, c.path.name == "last.ckpt") for c in run), reverse=True)
