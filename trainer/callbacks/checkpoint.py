"""``ModelCheckpoint``: keep the best k checkpoints by a metric, and always a complete ``last``."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.trainer import Trainer

_MODES = ("min", "max")


class ModelCheckpoint(Callback):
    """Save checkpoints on global rank zero, each written atomically.

    ``filename`` may use ``{epoch}``, ``{step}`` and any logged metric, e.g.
    ``"{epoch}-{val_loss:.3f}"``. With ``monitor`` the best ``save_top_k`` files are kept
    (worse ones are removed only after the new file is complete); ``save_last`` keeps
    ``last.ckpt`` as the newest state, which ``fit(ckpt_path="last")`` resumes from.
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str = "epoch={epoch}-step={step}",
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool = True,
        every_n_epochs: int | None = 1,
        every_n_train_steps: int | None = None,
    ) -> None:
        if mode not in _MODES:
            raise ValueError(f"ModelCheckpoint(mode={mode!r}): choose 'min' or 'max'.")
        if save_top_k < -1:
            raise ValueError(f"ModelCheckpoint(save_top_k={save_top_k!r}) must be -1 (all), 0 or more.")
        for name, value in (("every_n_epochs", every_n_epochs), ("every_n_train_steps", every_n_train_steps)):
            if value is not None and value < 1:
                raise ValueError(f"ModelCheckpoint({name}={value!r}) must be >= 1 or None.")
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self._dirpath_given = dirpath is not None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.every_n_epochs = every_n_epochs
        self.every_n_train_steps = every_n_train_steps
        self.best_k_models: dict[str, float] = {}
        self.best_model_path = ""
        self.last_model_path = ""
        self._last_saved_step = -1
        self._step_at_batch_start = -1

    @property
    def state_key(self) -> str:
        return f"ModelCheckpoint[{self.monitor}]"

    @property
    def best_model_score(self) -> float | None:
        return self.best_k_models.get(self.best_model_path)

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        if stage == "fit" and self.dirpath is None:
            # Ranks agree on the folder rank zero chose (only it knows the logger's version).
            self.dirpath = Path(trainer.strategy.broadcast(str(trainer.log_dir / "checkpoints")))

    def on_train_batch_start(self, trainer: Trainer, module: Module, batch: Any, batch_idx: int) -> None:
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        n = self.every_n_train_steps
        if n is None or trainer.global_step == self._step_at_batch_start:
            return  # an accumulation micro-batch: no optimizer step ended here
        if trainer.global_step % n == 0 and trainer.global_step != self._last_saved_step:
            self.save(trainer)

    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        n = self.every_n_epochs
        if n is not None and (trainer.current_epoch + 1) % n == 0 and trainer.global_step != self._last_saved_step:
            self.save(trainer)

    def save(self, trainer: Trainer) -> None:
        """Collective: decide on rank zero, save once, keep top-k and ``last``."""
        from trainer.state import save_trainer_checkpoint, trainer_state

        self._last_saved_step = trainer.global_step
        assert self.dirpath is not None
        score = self._score(trainer)
        path = self.dirpath / f"{self._format(trainer)}.ckpt"
        keep = trainer.strategy.broadcast(self._should_keep(score, str(path)))
        state = trainer_state(trainer)  # built once, after every rank agreed
        if keep:
            dropped = self._remember(str(path), score)
            state["callbacks"][self.state_key] = self.state_dict()  # the top-k after this save
            save_trainer_checkpoint(trainer, path, state)
            self._delete(trainer, dropped)  # only once the new file is complete
        if self.save_last:
            self.last_model_path = str(self.dirpath / "last.ckpt")
            state["callbacks"][self.state_key] = self.state_dict()
            save_trainer_checkpoint(trainer, Path(self.last_model_path), state)

    def _score(self, trainer: Trainer) -> float:
        if self.monitor is None:
            return float(trainer.global_step)
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise KeyError(
                f"ModelCheckpoint(monitor={self.monitor!r}) found no such logged metric; logged: "
                f"{sorted(trainer.callback_metrics) or 'nothing'}. Log it with self.log({self.monitor!r}, ...)."
            )
        return float(value)

    def _format(self, trainer: Trainer) -> str:
        values: dict[str, Any] = {k: float(v) for k, v in trainer.callback_metrics.items()}
        values.update(epoch=trainer.current_epoch, step=trainer.global_step)
        names = {n.split(":")[0] for n in re.findall(r"{([^}]+)}", self.filename)}
        missing = sorted(n for n in names if n not in values)
        if missing:
            raise KeyError(f"ModelCheckpoint(filename={self.filename!r}) uses {missing}, which were not logged.")
        safe = {re.sub(r"\W", "_", k): v for k, v in values.items()}
        template = re.sub(r"{([^}:]+)", lambda m: "{" + re.sub(r"\W", "_", m.group(1)), self.filename)
        return template.format(**safe)

    @property
    def _order(self) -> str:
        """Without a monitor the newest (highest step) counts as best."""
        return self.mode if self.monitor is not None else "max"

    def _should_keep(self, score: float, path: str) -> bool:
        if self.save_top_k == 0 or math.isnan(score):
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k or path in self.best_k_models:
            return True
        worst = self.best_k_models[self._worst()]
        return score < worst if self._order == "min" else score > worst

    def _worst(self) -> str:
        pick = max if self._order == "min" else min
        return pick(self.best_k_models, key=lambda p: self.best_k_models[p])

    def _remember(self, path: str, score: float) -> list[str]:
        """Add ``path`` to the top-k; return the paths that fell out of it."""
        self.best_k_models[path] = score
        dropped = []
        while self.save_top_k != -1 and len(self.best_k_models) > self.save_top_k:
            dropped.append(self._worst())
            del self.best_k_models[dropped[-1]]
        best = min if self._order == "min" else max
        self.best_model_path = best(self.best_k_models, key=lambda p: self.best_k_models[p])
        return dropped

    def _delete(self, trainer: Trainer, paths: list[str]) -> None:
        if trainer.is_global_zero:
            for path in paths:
                if path != self.last_model_path:
                    Path(path).unlink(missing_ok=True)

    def state_dict(self) -> dict[str, Any]:
        return {
            "dirpath": str(self.dirpath) if self.dirpath else None,
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "last_model_path": self.last_model_path,
            "monitor": self.monitor,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_k_models = dict(state.get("best_k_models", {}))
        self.best_model_path = state.get("best_model_path", "")
        self.last_model_path = state.get("last_model_path", "")
        if not self._dirpath_given and state.get("dirpath"):
            self.dirpath = Path(state["dirpath"])  # a resumed run keeps writing to its own folder
