"""``ckpt_path="last"``: which checkpoint a run resumes, and what it says about the others.

A run whose folder is known before it starts (a ``ModelCheckpoint(dirpath=...)`` or a logger ``version``
given) resumes its own checkpoint, found in that folder. A run with an automatic version has no folder
yet: a new process cannot know which ``version_<n>`` it was. It looks under ``default_root_dir`` too, and
when several runs left checkpoints there it says which run's it took and how to choose another. Which
file of a run is resumed, and why others are passed over, is ``newest.choose``'s rule: the most progress
recorded among the intact ones. Global rank zero chooses and says why; every rank takes its choice.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.checkpoint.io import CheckpointError
from trainer.checkpoint.newest import Choice, choose
from trainer.checkpoint.sharded import is_checkpoint_path

if TYPE_CHECKING:
    from trainer.view import TrainerView

_SHOW = 4
_SAY = "steadytrain: ckpt_path='last'"


def resolve_checkpoint_path(trainer: TrainerView, ckpt_path: Any) -> Path | None:
    """A path as given; ``"last"``: the checkpoint this run resumes (see above), or None (fresh start). A collective."""
    if str(ckpt_path) != "last":
        path = Path(ckpt_path)
        if not is_checkpoint_path(path):
            raise FileNotFoundError(
                f"Checkpoint file not found: ckpt_path={str(ckpt_path)!r} does not exist or is not a file."
            )
        return path
    folders = checkpoint_folders(trainer)
    chosen, error = trainer.strategy.broadcast(_choose_and_say(trainer, folders) if trainer.is_global_zero else None)
    if error is not None:
        raise CheckpointError(error)
    return Path(chosen) if chosen is not None else None


def _choose_and_say(trainer: TrainerView, folders: list[Path]) -> tuple[str | None, str | None]:
    """Rank zero: (the path to resume or None, the error every rank raises or None)."""
    choice = choose(folders)
    for why in choice.skipped:
        print(f"{_SAY} skipped {why}", flush=True)
    if choice.picked is None:
        if choice.torn:
            return None, (
                f"ckpt_path='last' found checkpoints, but none is complete and intact: {'; '.join(choice.torn[:5])}. "
                "Resume from another one by path, or move them away to start fresh."
            )
        where = ", ".join(str(f) for f in folders[:_SHOW]) if _folder_given(trainer) else trainer.default_root_dir
        # a warning, as Lightning's (a resumable script passes "last" on every start, so its first start says it)
        warnings.warn(
            f"{_SAY} found no checkpoint under {where}. No checkpoint will be loaded: starting fresh.", stacklevel=2
        )
        return None, None
    _say_which(choice)
    return str(choice.picked.path), None


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


def _say_which(choice: Choice) -> None:
    """When several runs left checkpoints, name the run resumed and how to pick another; when files were skipped,
    the one taken."""
    assert choice.picked is not None
    picked, (step, epoch, _) = choice.picked.path, choice.picked.reached
    if len(choice.runs) > 1:
        shown = [str(path) for path in choice.furthest()]
        listed = ", ".join(shown[:_SHOW]) + (f" and {len(shown) - _SHOW} more" if len(shown) > _SHOW else "")
        print(
            f"{_SAY} resumes {picked}, from the latest of {len(shown)} runs ({listed}); it continues that run. To "
            "resume another, pass its checkpoint's path; to make 'last' each run's own, give each run its own "
            "folder (the logger's version=..., or ModelCheckpoint(dirpath=...)).",
            flush=True,
        )
    elif choice.skipped:
        print(f"{_SAY} takes {picked} (step {step}, epoch {epoch}), the run's furthest intact checkpoint.", flush=True)
