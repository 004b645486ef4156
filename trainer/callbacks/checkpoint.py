"""``ModelCheckpoint``: keep the best k checkpoints by a metric, and always a complete ``last.ckpt``.

Lightning's options and rules for when to save: every ``every_n_train_steps`` optimizer steps,
every ``train_time_interval``, or every ``every_n_epochs`` epochs, at the end of the training
epoch when validation runs once per epoch (or never), else after each validation. One
difference on purpose: ``save_last`` defaults to True, as ``fit(ckpt_path="last")`` resumes from it.
``last.ckpt`` is a file of its own (a copy, or a reflink where the filesystem has them), never a hard
link another checkpoint's bytes could be rewritten through; ``save_last="link"`` makes it Lightning's
symbolic link instead.
"""

import math
import os
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from trainer.callbacks.base import Checkpoint
from trainer.callbacks.checkpoint_naming import default_dirpath, fill_filename, last_path, report
from trainer.callbacks.checkpoint_options import (
    as_tensor,
    check_options,
    load_state,
    logged_score,
    missing_monitor,
    triggers,
    warn_missing_monitor,
    worst_value,
)
from trainer.claims import RunNames, refuse_url

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer


class ModelCheckpoint(Checkpoint):
    """Save checkpoints (global rank zero writes each atomically; every rank takes part).

    ``filename`` may use ``{epoch}``, ``{step}`` and any logged metric, e.g. ``"{epoch}-{val_loss:.3f}"``
    (which gives ``epoch=3-val_loss=0.123.ckpt`` with ``auto_insert_metric_name``). With ``monitor``
    the best ``save_top_k`` files are kept (worse ones are removed only after the new file is
    complete); ``last.ckpt`` is a copy of the newest state, which ``fit(ckpt_path="last")`` resumes.
    """

    monitors_metrics = True
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1  # a name that exists gets -v<STARTING_VERSION>, then the next free -v<n>

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | Literal["link"] | None = True,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        check_options(mode, save_top_k, monitor, save_last, every_n_epochs, every_n_train_steps, train_time_interval)
        fired = triggers(every_n_train_steps, train_time_interval, every_n_epochs)
        # a str, absolute with ``~`` expanded, as Lightning's (a remote URL is kept as given)
        self.dirpath = _local_dirpath(os.fspath(dirpath)) if dirpath is not None else None
        self._dirpath_given = dirpath is not None
        self.filename = filename
        self.monitor = monitor
        self.verbose = verbose
        self.save_last = save_last
        self.save_top_k = save_top_k
        self.save_weights_only = save_weights_only
        self.mode = mode
        self.auto_insert_metric_name = auto_insert_metric_name
        self.every_n_train_steps = every_n_train_steps or 0
        self.train_time_interval = train_time_interval
        self.every_n_epochs = every_n_epochs if every_n_epochs is not None else (0 if any(fired) else 1)
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.enable_version_counter = enable_version_counter
        self.save_on_exception = save_on_exception  # one more save when a stage raises (checkpoint_on_exception.py)
        self.best_k_models: dict[str, float] = {}
        self.best_model_path = ""
        self.best_model_score: torch.Tensor | None = None  # as Lightning's: plain attributes a user may set
        self.kth_best_model_path = ""
        self.kth_value: torch.Tensor = worst_value(mode)
        self.last_model_path = ""
        self.current_score: torch.Tensor | None = None
        self._last_global_step_saved = 0  # as in Lightning: nothing to save before the first step
        self._last_time_saved = time.monotonic()
        self._saved_this_fit = False
        self._deferred = False  # a step's save waits for the validation that logs the monitored value
        self._warned_missing = False
        self._names = RunNames(self._in_state)  # the checkpoint names this run may replace
        self._last: Path | None = None  # rank zero: the name of this callback's last checkpoint, once claimed

    @property
    def state_key(self) -> str:
        """Lightning's key; a weights-only callback beside a full one with the same settings keeps its own state."""
        weights_only = {"save_weights_only": True} if self.save_weights_only else {}
        return self._generate_state_key(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self.every_n_train_steps,
            every_n_epochs=self.every_n_epochs,
            train_time_interval=self.train_time_interval,
            **weights_only,
        )

    @property
    def _former_state_key(self) -> str:
        """The key steadytrain used before it took Lightning's: its checkpoints still restore."""
        return f"ModelCheckpoint[{self.monitor}]" + (", weights_only" if self.save_weights_only else "")

    # ---- when to save ----------------------------------------------------------------------------------
    def setup(self, trainer: "Trainer", pl_module: "Module", stage: str) -> None:
        if stage == "fit" and self.dirpath is None:
            # Ranks agree on the folder rank zero chose (only it knows the logger's version).
            self.dirpath = trainer.strategy.broadcast(default_dirpath(trainer))
        if self.save_last == "link" and "://" in str(self.dirpath):
            raise ValueError(
                f"`ModelCheckpoint(save_last='link')` is only supported for local file paths, got "
                f"`dirpath={self.dirpath}`: a symbolic link needs a local filesystem; use save_last=True there."
            )
        refuse_url(str(self.dirpath), "ModelCheckpoint's dirpath")
        if stage == "fit" and trainer.is_global_zero:
            from trainer.checkpoint.leftovers import clean

            clean(str(self.dirpath))  # a killed save's temporary and empty name, where their writer is gone
            self._warn_if_dir_not_empty()
        self._last_time_saved = time.monotonic()
        self._saved_this_fit = False
        self._last = None

    def on_train_batch_end(
        self, trainer: "Trainer", pl_module: "Module", outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._skip(trainer):
            return
        due = bool(self.every_n_train_steps) and trainer.global_step % self.every_n_train_steps == 0
        if self.train_time_interval is not None:  # rank zero's clock decides for every rank
            elapsed = time.monotonic() - self._last_time_saved
            due = bool(trainer.strategy.broadcast(elapsed >= self.train_time_interval.total_seconds()))
        if due and self._defers(trainer, batch_idx):
            self._deferred = True
        elif due:
            self.save(trainer)

    def _defers(self, trainer: "Trainer", batch_idx: int) -> bool:
        """Lightning's rule: a step's save waits for the next validation's end when the monitored value is not
        logged yet, or a validation right after this batch will log a fresh one (the one now is stale)."""
        if self.monitor is None:
            return False
        if self.monitor not in self._candidates(trainer):
            return True
        return not self._saves_at_train_epoch_end(trainer) and trainer.fit_loop.validation.due(batch_idx)

    def on_train_epoch_end(self, trainer: "Trainer", pl_module: "Module") -> None:
        if not self._skip(trainer) and self._saves_at_train_epoch_end(trainer) and self._epoch_due(trainer):
            self.save(trainer)

    def on_validation_end(self, trainer: "Trainer", pl_module: "Module") -> None:
        if self._skip(trainer) or self._saves_at_train_epoch_end(trainer):
            return
        if self._deferred or self._epoch_due(trainer):
            self._deferred = False
            self.save(trainer)

    def on_exception(self, trainer: "Trainer", pl_module: "Module", exception: BaseException) -> None:
        if self.save_on_exception:
            from trainer.callbacks.checkpoint_on_exception import save_on_exception

            save_on_exception(self, trainer, exception)

    def on_train_end(self, trainer: "Trainer", pl_module: "Module") -> None:
        """Lightning's rule: with ``save_last``, a fit that saved nothing (``every_n_epochs`` larger than
        ``max_epochs``, say) still ends with ``last.ckpt``, so ``ckpt_path="last"`` has a run to resume."""
        if self.save_last and not self._saved_this_fit and not self._skip(trainer):
            self._write_last(trainer)

    def _skip(self, trainer: "Trainer") -> bool:
        return (
            trainer.state.fn != "fit"
            or trainer.sanity_checking
            or bool(trainer.fast_dev_run)
            or self._last_global_step_saved == trainer.global_step
        )

    def _epoch_due(self, trainer: "Trainer") -> bool:
        return self.every_n_epochs >= 1 and (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _saves_at_train_epoch_end(self, trainer: "Trainer") -> bool:
        """Lightning's rule: at the epoch end when validation runs once an epoch (or never)."""
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if isinstance(trainer.val_check_interval, timedelta) or trainer.check_val_every_n_epoch != 1:
            return False  # an epoch end may have no validation: saves wait for the validations' ends
        if trainer.val_dataloaders is None or sum(trainer.num_val_batches) == 0:
            return True
        return trainer.val_check_interval == 1.0

    # ---- saving ---------------------------------------------------------------------------------------
    def save(self, trainer: "Trainer") -> None:
        """Collective: rank zero decides and claims the names, the checkpoint is built and written once, ``last``
        links to it."""
        assert self.dirpath is not None
        self._last_global_step_saved = trainer.global_step
        self._last_time_saved = time.monotonic()
        self._saved_this_fit = True
        score = self._score(trainer)
        self.current_score = logged_score(trainer.callback_metrics.get(self.monitor or ""), score)
        name = self.format_checkpoint_name(self._candidates(trainer))  # on every rank: a bad template fails on all
        chosen = self._choose(trainer, name, score) if trainer.is_global_zero else None
        keep, path, last = trainer.strategy.broadcast(chosen)
        dropped = self._remember(path, score) if keep and score is not None else []
        if self.save_last:
            self.last_model_path = last
        if not keep and not self.save_last:
            return
        self._write(trainer, Path(path if keep else last), link=Path(last) if keep and self.save_last else None)
        self._delete(trainer, dropped)
        if trainer.is_global_zero:
            for lg in trainer.loggers:
                lg.after_save_checkpoint(self)
        if self.verbose and trainer.is_global_zero:
            report(self, trainer, Path(path if keep else last), score, keep)

    def _write_last(self, trainer: "Trainer") -> None:
        """``last.ckpt`` alone, outside the top-k (collective, as ``save``)."""
        assert self.dirpath is not None
        self._last_global_step_saved = trainer.global_step
        self._saved_this_fit = True
        last = self._spelled(self._last_path(trainer)) if trainer.is_global_zero else None
        self.last_model_path = trainer.strategy.broadcast(last)
        self._write(trainer, Path(self.last_model_path))
        if self.verbose and trainer.is_global_zero:
            report(self, trainer, Path(self.last_model_path), 0.0, kept=False)

    def _write(self, trainer: "Trainer", path: Path, link: Path | None = None) -> None:
        """Save ``path`` (and make ``link`` the same checkpoint); a failure gives back the names claimed for it."""
        try:
            trainer.save_checkpoint(str(path), self.save_weights_only)  # as Lightning calls it (a mock may check)
            if link is not None:
                if trainer.is_global_zero:
                    from trainer.checkpoint.sharded import link_any_checkpoint

                    link_any_checkpoint(path, link, symlink=self.save_last == "link")
                trainer.strategy.barrier()
        except BaseException:
            if trainer.is_global_zero:
                self._names.give_back_new()  # their placeholders: never a checkpoint that was written
            raise
        self._names.new = []

    # ---- names: a run replaces only its own files ------------------------------------------------------
    def _choose(self, trainer: "Trainer", name: str, score: float | None) -> tuple[bool, str, str]:
        """Rank zero: whether to keep this checkpoint, its path and ``last``'s, each claimed for this run."""
        assert self.dirpath is not None
        ext, counter, keep = self.FILE_EXTENSION, self.enable_version_counter, self._should_keep(score)
        start, replaces = self.STARTING_VERSION, self._replaced()
        path = self._names.claim(self.dirpath, name, ext, counter, replaces, start) if keep else Path()
        last = self._last_path(trainer) if self.save_last else Path()
        return keep, self._spelled(path), self._spelled(last)

    def _spelled(self, path: Path) -> str:
        """``path`` as Lightning spells it, ``os.path.join(dirpath, name)``: a ``Path`` drops a leading ``./``."""
        return os.path.join(str(self.dirpath), path.name) if path.name else str(path)

    def _in_state(self, path: str) -> bool:
        """Named in this callback's state: written by this run, or by the run it resumed."""
        return path in self.best_k_models or path in (self.best_model_path, self.last_model_path)

    def _last_path(self, trainer: "Trainer") -> Path:
        return last_path(self, trainer)

    def _warn_if_dir_not_empty(self) -> None:
        """Lightning's warning: another run's checkpoints may be there (they are never replaced: see ``RunNames``)."""
        assert self.dirpath is not None
        if self.save_top_k != 0 and os.path.isdir(self.dirpath) and os.listdir(self.dirpath):
            warnings.warn(f"Checkpoint directory {self.dirpath} exists and is not empty.", stacklevel=2)

    def _score(self, trainer: "Trainer") -> float | None:
        """The monitored value (``epoch`` and ``step`` need no ``self.log``); NaN counts as the worst possible
        value (``inf`` in mode min), as in Lightning. None: not logged before any validation ran (warned once)."""
        if self.monitor is None:
            return float(trainer.global_step)
        value = self._candidates(trainer).get(self.monitor)
        if value is None and trainer.fit_loop.progress.validations == 0:
            if not self._warned_missing:  # Lightning's rule: maybe a validation metric, logged later
                self._warned_missing = True
                warn_missing_monitor(self.monitor, sorted(self._candidates(trainer)))
            return None
        if value is None:
            raise missing_monitor(self.monitor, sorted(trainer.callback_metrics))
        score = float(value)
        return (math.inf if self.mode == "min" else -math.inf) if math.isnan(score) else score

    def _candidates(self, trainer: "Trainer") -> dict[str, Any]:
        """Logged values, with ``epoch`` and ``step`` the Trainer's unless the module logged its own."""
        values: dict[str, Any] = {k: float(v) for k, v in trainer.callback_metrics.items()}
        values.setdefault("epoch", trainer.current_epoch)
        values.setdefault("step", trainer.global_step)
        return values

    def format_checkpoint_name(self, metrics: dict[str, Any]) -> str:
        """``filename`` (default ``{epoch}-{step}``) filled in (``checkpoint_naming.fill_filename``)."""
        return fill_filename(self.filename or "{epoch}-{step}", metrics, self.auto_insert_metric_name)

    @property
    def _order(self) -> str:
        """Without a monitor the newest (highest step) counts as best."""
        return self.mode if self.monitor is not None else "max"

    def _should_keep(self, score: float | None) -> bool:
        if self.save_top_k == 0 or score is None:
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        worst = self.best_k_models[self._worst()]
        return score < worst if self._order == "min" else score > worst

    def _replaced(self) -> str | None:
        """Lightning's rule: the one file a kept checkpoint may take the name of is the one it drops (the newest,
        without a monitor); any other file with that name stays, and the new one is ``<name>-v<n>``."""
        if self.monitor is None:
            return self.best_model_path or None
        full = self.save_top_k != -1 and len(self.best_k_models) >= self.save_top_k
        return self._worst() if full and self.best_k_models else None

    def _worst(self) -> str:
        pick = max if self._order == "min" else min
        return pick(self.best_k_models, key=lambda p: self.best_k_models[p])

    def _remember(self, path: str, score: float) -> list[str]:
        """Add ``path`` to the top-k; return the paths that fell out of it. Without a monitor, as Lightning:
        no ranking (``best_k_models`` stays empty), the newest is the best, ``save_top_k=1`` keeps only it."""
        if self.monitor is None and self.save_top_k in (1, -1):
            previous, self.best_model_path = self.best_model_path, path
            return [previous] if self.save_top_k == 1 and previous and previous != path else []
        self.best_k_models[path] = score
        dropped = []
        while self.save_top_k != -1 and len(self.best_k_models) > self.save_top_k:
            dropped.append(self._worst())
            del self.best_k_models[dropped[-1]]
        best = min if self._order == "min" else max
        self.best_model_path = best(self.best_k_models, key=lambda p: self.best_k_models[p])
        self.best_model_score = as_tensor(self.best_k_models[self.best_model_path])
        if self.save_top_k == -1 or len(self.best_k_models) == self.save_top_k:
            self.kth_best_model_path = self._worst()
            self.kth_value = as_tensor(self.best_k_models[self.kth_best_model_path])  # type: ignore[assignment]
        return dropped

    def _delete(self, trainer: "Trainer", paths: list[str]) -> None:
        from trainer.checkpoint.sharded import remove_checkpoint

        if trainer.is_global_zero:
            for path in paths:
                if path != self.last_model_path:
                    remove_checkpoint(path)  # a file, or a sharded directory

    def to_yaml(self, filepath: str | Path | None = None) -> None:
        """Write ``best_k_models`` (path: score) to a YAML file, ``<dirpath>/best_k_models.yaml`` by default."""
        import yaml

        assert filepath is not None or self.dirpath, "to_yaml() needs a filepath before the callback has a dirpath"
        path = Path(filepath) if filepath is not None else Path(str(self.dirpath), "best_k_models.yaml")
        path.write_text(yaml.safe_dump({k: float(v) for k, v in self.best_k_models.items()}))

    def state_dict(self) -> dict[str, Any]:
        return {
            "dirpath": str(self.dirpath) if self.dirpath else None,
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "current_score": self.current_score,
            "last_model_path": self.last_model_path,
            "monitor": self.monitor,
            "last_global_step_saved": self._last_global_step_saved,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        load_state(self, state_dict)


def _local_dirpath(dirpath: str) -> str:
    return dirpath if "://" in dirpath else os.path.realpath(os.path.expanduser(dirpath))
