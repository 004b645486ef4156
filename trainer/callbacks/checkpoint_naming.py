"""``ModelCheckpoint``'s file names: the ``filename`` template filled in, and each callback's last checkpoint.

Lightning's versioning: a name that exists gets ``-v<STARTING_VERSION>`` (then the next free ``-v<n>``) unless it
is the file the new checkpoint replaces; names are claimed before they are written (``trainer.claims``), so two
runs in one folder never take the same one.
"""

import os
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.callbacks.checkpoint import ModelCheckpoint
    from trainer.view import TrainerView as Trainer

_FIELD = r"{([^{}:]+)(:[^{}]*)?}"


def fill_filename(template: str, metrics: dict[str, Any], auto_insert_metric_name: bool) -> str:
    """``template`` filled in; ``{x}`` becomes ``x=<value>`` with ``auto_insert_metric_name``. A name the template
    uses but nobody logged is an error naming what was logged."""
    names = [name for name, _ in re.findall(_FIELD, template)]
    missing = sorted(n for n in names if n not in metrics)
    if missing:
        raise KeyError(
            f"ModelCheckpoint(filename={template!r}) uses {missing}, which were not logged; logged: "
            f"{sorted(k for k in metrics if k not in ('epoch', 'step'))}."
        )
    safe = {f"m{i}": metrics[n] for i, n in enumerate(names)}

    def field(match: re.Match[str]) -> str:
        name, spec = match.group(1), match.group(2) or ""
        label = f"{name}=" if auto_insert_metric_name else ""
        return f"{label}{{m{names.index(name)}{spec}}}"

    return re.sub(_FIELD, field, template).format(**safe).replace(os.sep, "_")


def default_dirpath(trainer: "Trainer") -> str:
    """Where checkpoints go without ``dirpath``: ``<run folder>/checkpoints``. A first logger that is not a
    steadytrain ``Logger`` (a stand-in object, a mock) is read as Lightning reads any logger:
    ``<save_dir or default_root_dir>/<name>/<version, or version_<n>>/checkpoints``."""
    from trainer.loggers.base import Logger
    from trainer.loggers.logger_folder import lightning_run_folder

    first = trainer.loggers[0] if trainer.loggers else None
    if first is None or isinstance(first, Logger):
        return os.path.join(trainer.run_folder, "checkpoints")
    save_dir = first.save_dir if first.save_dir is not None else trainer.default_root_dir
    return os.path.join(lightning_run_folder(save_dir, first.name, first.version), "checkpoints")


def last_path(callback: "ModelCheckpoint", trainer: "Trainer") -> Path:
    """Rank zero: ``callback``'s last checkpoint, ``last.ckpt`` unless another run wrote that (then
    ``last-v1.ckpt``, as Lightning names it, and said once).

    This run's callbacks that keep a last checkpoint in one folder claim their names together, those that
    save the full state first, whatever the callbacks' order: ``last.ckpt`` is then the one a resume can use,
    and a weights-only callback's goes to ``last-v1.ckpt`` without a word about another run.
    """
    folder = callback.dirpath
    here = [cb for cb in trainer.checkpoint_callbacks if cb.save_last and cb.dirpath == folder]
    taken: set[str] = set()  # names this run's callbacks hold
    for other in sorted(here if callback in here else [*here, callback], key=lambda cb: cb.save_weights_only):
        if other._last is None:  # the one in its state (this run's, or the resumed run's), or a new one
            own = Path(other.last_model_path) if other.last_model_path else None
            other._last = own if own and own.parent == Path(str(folder)) else _claim_last(other, taken)
        taken.add(other._last.name)
        if other is callback:
            break
    assert callback._last is not None
    return callback._last


def _claim_last(callback: "ModelCheckpoint", taken: set[str]) -> Path:
    assert callback.dirpath is not None
    stem, ext = callback.CHECKPOINT_NAME_LAST, callback.FILE_EXTENSION
    path = callback._names.claim(
        callback.dirpath, stem, ext, callback.enable_version_counter, start=callback.STARTING_VERSION
    )
    first = f"{stem}{ext}"
    if path.name != first and first not in taken:
        warnings.warn(
            f"ModelCheckpoint: {path.with_name(first)} was written by another run, so this run keeps its "
            f"last checkpoint in {path.name} and leaves that one alone. fit(ckpt_path='last') takes the latest "
            "run's; pass this file's path to resume this run.",
            stacklevel=5,
        )
    return path


def report(callback: "ModelCheckpoint", trainer: "Trainer", path: Path, score: float | None, kept: bool) -> None:
    """``verbose=True``: what was saved, and why."""
    where = f"Epoch {trainer.current_epoch}, global step {trainer.global_step}"
    if callback.monitor is None or not kept:
        print(f"{where}: saving model to {str(path)!r}", flush=True)
    else:
        print(
            f"{where}: {callback.monitor!r} reached {score:.5g} (best {callback.best_model_score:.5g}), saving "
            f"model to {str(path)!r} as top {callback.save_top_k}",
            flush=True,
        )
