"""``ckpt_path="last"``: which checkpoint a run resumes.

A run whose folder is known before it starts (a ``ModelCheckpoint(dirpath=...)`` or a logger ``version``
given) resumes its own newest checkpoint, found in that folder. A run with an automatic version has no
folder yet: a new process cannot know which ``version_<n>`` it was. It takes the newest complete
checkpoint under ``default_root_dir``, and when several runs left checkpoints there it says which run's it
took and how to choose another.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.checkpoint.io import CheckpointError
from trainer.checkpoint.sharded import is_checkpoint_path
from trainer.claims import is_placeholder

if TYPE_CHECKING:
    from trainer.view import TrainerView

_LAST = re.compile(r"^last(-v\d+)?\.ckpt$")  # each run's last checkpoint in a shared folder (Lightning's names)
_SHOW = 4


def resolve_checkpoint_path(trainer: TrainerView, ckpt_path: Any) -> Path | None:
    """A path as given; ``"last"``: the newest complete checkpoint of this run (see above), or None (fresh start)."""
    if str(ckpt_path) != "last":
        path = Path(ckpt_path)
        if not is_checkpoint_path(path):
            raise FileNotFoundError(
                f"Checkpoint file not found: ckpt_path={str(ckpt_path)!r} does not exist or is not a file."
            )
        return path
    from trainer.checkpoint.io import _rank, find_last_checkpoint

    folders = checkpoint_folders(trainer)
    found = [p for p in (find_last_checkpoint(folder) for folder in folders) if p is not None]
    if not found:
        _nothing_found(trainer, folders)
        return None
    newest = max(found, key=_rank)
    if trainer.is_global_zero:
        _say_whose(newest, found)
    return newest


def checkpoint_folders(trainer: TrainerView) -> list[Path]:
    """Where a run's checkpoints are: its own folders (every ModelCheckpoint's dirpath, else the Trainer's
    checkpoint folder), and, unless the run's folder was given, ``default_root_dir``'s checkpoint folders."""
    folders = [Path(cb.dirpath) for cb in trainer.checkpoint_callbacks if cb.dirpath] or [trainer.checkpoint_dir]
    if not _folder_given(trainer):
        folders += [p for p in Path(trainer.default_root_dir).glob("**/checkpoints") if p.is_dir() and p not in folders]
    return folders


def _folder_given(trainer: TrainerView) -> bool:
    """The run's folder is known before it starts: a ModelCheckpoint dirpath, or the first logger's version, given."""
    if any(getattr(cb, "_dirpath_given", False) for cb in trainer.checkpoint_callbacks):
        return True
    folder = getattr(trainer.loggers[0], "_folder", None) if trainer.loggers else None
    return bool(getattr(folder, "given", False))


def _nothing_found(trainer: TrainerView, folders: list[Path]) -> None:
    """Fresh start, said; unless every candidate is torn or damaged (an empty placeholder is a save never made)."""
    torn = sorted(str(p) for d in folders for p in d.glob("*.ckpt") if not is_placeholder(p))
    if torn:
        raise CheckpointError(
            f"ckpt_path='last' found checkpoints, but none is complete and intact: {', '.join(torn[:5])}. They were "
            "cut off or damaged (a copy that did not finish? a failing disk?); resume from another one by path, or "
            "move them away to start fresh."
        )
    if trainer.is_global_zero:
        where = ", ".join(str(f) for f in folders[:_SHOW]) if _folder_given(trainer) else trainer.default_root_dir
        print(f"steadytrain: ckpt_path='last' found no checkpoint under {where}; starting fresh.")


def _say_whose(newest: Path, found: list[Path]) -> None:
    """When checkpoints of several runs were candidates, name the run resumed and how to pick another."""
    runs = sorted({str(p.parent.parent if p.parent.name == "checkpoints" else p.parent) for p in found})
    lasts = sorted(p.name for p in newest.parent.iterdir() if _LAST.match(p.name) and not is_placeholder(p))
    shown = runs if len(runs) > 1 else [str(newest.parent / name) for name in lasts]
    if len(shown) < 2:
        return
    listed = ", ".join(shown[:_SHOW]) + (f" and {len(shown) - _SHOW} more" if len(shown) > _SHOW else "")
    print(
        f"steadytrain: ckpt_path='last' resumes {newest}, the newest checkpoint of {len(shown)} runs ({listed}); "
        "it continues that run. To resume another, pass its checkpoint's path; to make 'last' each run's own, "
        "give each run its own folder (the logger's version=..., or ModelCheckpoint(dirpath=...)).",
        flush=True,
    )
