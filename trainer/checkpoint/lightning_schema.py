"""Lightning's checkpoint schema, read into our parts: a run started under Lightning continues here.

Lightning 2.x saves ``state_dict``, ``optimizer_states``, ``lr_schedulers``, its loops' progress
(``loops`` -> ``fit_loop``: ready/started/processed/completed counts), each callback's state under
``Callback.state_key`` (``"ModelCheckpoint{'monitor': ..., ...}"``) and the precision plugin's
state under its class name (``"MixedPrecision"``: the GradScaler's). It saves no RNG and no data
position: its own resume of a loader without ``state_dict`` restarts that loader, and so does
ours here, so a continued run ends where Lightning's own continuation ends. What cannot be put
back exactly (a stateful loader's state, a checkpoint saved inside a step or a validation, a
scaler without a scaler to take it) refuses the file before anything loads.
"""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.checkpoint.kinds import LIGHTNING_NEEDED, LIGHTNING_VERSION
from trainer.checkpoint.restore import warn_callbacks_missing

if TYPE_CHECKING:
    from trainer.view import TrainerView

VERSION_KEY = LIGHTNING_VERSION
_FIT_KEYS = {
    "state_dict",  # the loop's own state: a stateful loader's position under "combined_loader"
    "epoch_progress",
    "epoch_loop.state_dict",
    "epoch_loop.batch_progress",
    "epoch_loop.scheduler_progress",
    "epoch_loop.automatic_optimization.state_dict",
    "epoch_loop.automatic_optimization.optim_progress",
    "epoch_loop.manual_optimization.state_dict",
    "epoch_loop.manual_optimization.optim_step_progress",
    "epoch_loop.val_loop.state_dict",
    "epoch_loop.val_loop.batch_progress",
}
_OWN_STATES = (  # empty unless a loop or a loader keeps state of its own
    "state_dict",
    "epoch_loop.automatic_optimization.state_dict",
    "epoch_loop.manual_optimization.state_dict",
    "epoch_loop.val_loop.state_dict",
)


def is_lightning(checkpoint: dict[str, Any]) -> bool:
    return VERSION_KEY in checkpoint


def read(trainer: TrainerView, checkpoint: dict[str, Any], path: Path, fitting: bool) -> dict[str, Any]:
    """One state per part (``restore.PARTS``); every reason the file cannot continue exactly, at once."""
    if not fitting:
        return {"module": checkpoint}
    version = checkpoint[VERSION_KEY]
    missing = [key for key in LIGHTNING_NEEDED if key not in checkpoint]
    if missing:
        raise ValueError(
            f"{path} is a Lightning {version} checkpoint without {missing} (saved with save_weights_only=True?), so "
            "it cannot continue a run; load its weights with Module.load_from_checkpoint(path) and start a new one."
        )
    problems: list[str] = []
    progress, loader_restarts = _position(checkpoint["loops"], checkpoint["global_step"], problems)
    precision = _precision(trainer, checkpoint, problems)
    datamodule = _datamodule(trainer, checkpoint, problems)
    if problems:
        raise ValueError(
            f"{path} (Lightning {version}) cannot be continued exactly, so nothing of it was loaded: "
            + "; ".join(problems)
            + ". Load its weights alone with Module.load_from_checkpoint(path) and start a new run."
        )
    if loader_restarts and trainer.is_global_zero:
        warnings.warn(
            f"{path} was saved by Lightning in the middle of epoch {progress['epoch']}, after "
            f"{progress['batches_done']} batches, and Lightning records no data position: as Lightning's own resume "
            "does, the rest of that epoch reads the training loader from its first batch.",
            stacklevel=6,  # the user's fit()
        )
    return {
        "module": checkpoint,
        "callbacks": _callback_states(trainer, checkpoint.get("callbacks") or {}),
        "precision": precision,
        "progress": progress,
        "data": {"world_size": trainer.world_size, "loader_restarts": loader_restarts},
        "ranks": None,  # Lightning saves no RNG: the process's goes on, as under Lightning
        "datamodule": datamodule,
        "optimizers": checkpoint["optimizer_states"],
        "schedulers": checkpoint["lr_schedulers"],
    }


def _counts(progress: dict[str, Any]) -> tuple[int, int, int, int]:
    total = progress["total"]
    return total["ready"], total["started"], total["processed"], total["completed"]


def _position(loops: dict[str, Any], global_step: int, problems: list[str]) -> tuple[dict[str, Any], bool]:
    """Our ``Progress`` where Lightning's fit loop would go on (its ``reset()`` rules), and whether the epoch's
    loader starts over."""
    fit = loops.get("fit_loop")
    if not isinstance(fit, dict):
        problems.append("its loops hold no 'fit_loop' progress")
        return {}, False
    unknown = sorted(set(fit) - _FIT_KEYS)
    own = {key: fit[key] for key in _OWN_STATES if fit.get(key)}
    extra = set(fit.get("epoch_loop.state_dict") or {}) - {"_batches_that_stepped"}
    if unknown or extra or own:
        held = unknown + sorted(extra) + [f"{k}={v!r}" for k, v in own.items()]
        problems.append(f"its fit loop holds state steadytrain does not restore ({', '.join(held)[:300]})")
    batches, vals = fit.get("epoch_loop.batch_progress"), fit.get("epoch_loop.val_loop.batch_progress")
    if "epoch_progress" not in fit or batches is None:
        problems.append("its fit loop has no epoch_progress or epoch_loop.batch_progress")
        return {}, False
    if vals is not None and len(set(_counts(vals))) > 1:
        problems.append("it was saved in the middle of a validation, which Lightning re-runs and steadytrain cannot")
    ready, started, processed, completed = _counts(fit["epoch_progress"])
    epoch = fit["epoch_progress"]["current"]["completed"]
    b_ready, b_started, b_processed, b_completed = _counts(batches)
    state = {"epoch": epoch, "batches_done": 0, "total_batches": b_completed, "global_step": global_step}
    if ready == started == processed == completed or (started == ready - 1 and processed == completed == started):
        return state, False  # between epochs, or at an epoch's start: the epoch starts (again)
    if ready == started == processed and completed == processed - 1:  # in on_train_epoch_end: the next epoch
        return {**state, "epoch": epoch + 1}, False
    if not (ready == started and processed == started - 1 and completed == processed):
        problems.append(f"its epoch progress {fit['epoch_progress']['total']} is no point Lightning resumes from")
        return state, False
    if not (b_ready == b_started == b_processed and b_completed == b_processed - 1):
        where = "after a batch's end" if b_completed == b_processed else "inside a training step"
        problems.append(f"it was saved {where} ({batches['total']}), where Lightning's resume is not defined here")
        return state, False
    if batches.get("is_last_batch"):  # after the epoch's last batch: Lightning goes on with the next epoch
        return {**state, "epoch": epoch + 1, "total_batches": b_processed}, False
    done = batches["current"]["completed"] + 1
    # The batch's validation and plateau schedulers: Lightning skips them on resume (closed).
    return {**state, "batches_done": done, "total_batches": b_processed, "closed_at": b_processed}, True


def _callback_states(trainer: TrainerView, saved: dict[str, Any]) -> dict[str, Any]:
    """Lightning's states by our ``state_key``: the same key, or the one saved key of the callback's class whose
    settings (``monitor``, ``mode``, ...) it has. Saved states no callback takes are named in a warning, as Lightning
    does."""
    states, taken = {}, set()
    for cb in trainer.callbacks:
        key = cb.state_key if cb.state_key in saved else _lightning_key(cb, saved)
        if key is not None:
            states[cb.state_key] = saved[key]
            taken.add(key)
    left = [key for key in saved if key not in taken]
    if left and trainer.is_global_zero:
        warn_callbacks_missing(left, stacklevel=8)  # the user's fit()
    return states


def _lightning_key(callback: Any, saved: dict[str, Any]) -> str | None:
    """``"Name{'monitor': 'x', ...}"``: Lightning's ``state_key`` of a callback of class Name with these settings."""
    found = []
    for key in saved:
        match = re.fullmatch(r"(?P<name>[\w.]+)(?P<kwargs>\{.*\})?", key)
        if match is None or match["name"] != type(callback).__qualname__:
            continue
        try:
            kwargs = ast.literal_eval(match["kwargs"]) if match["kwargs"] else {}
        except (ValueError, SyntaxError):
            continue
        if isinstance(kwargs, dict) and all(
            getattr(callback, name) == value for name, value in kwargs.items() if hasattr(callback, name)
        ):
            found.append(key)
    return found[0] if len(found) == 1 else None


def _precision(trainer: TrainerView, checkpoint: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The GradScaler's state of Lightning's ``MixedPrecision`` plugin (or its older key), in ours."""
    scaler = checkpoint.get("MixedPrecision") or checkpoint.get("native_amp_scaling_state")
    if not scaler:
        return {}
    if getattr(trainer.precision_plugin, "scaler", None) is None:
        problems.append(
            f"it holds a GradScaler's state (precision='16-mixed') but this Trainer's precision "
            f"{type(trainer.precision_plugin).__name__} has no scaler to take it: pass Trainer(precision='16-mixed')"
        )
    return {"scaler": scaler}


def _datamodule(trainer: TrainerView, checkpoint: dict[str, Any], problems: list[str]) -> dict[str, Any] | None:
    """Lightning saves a DataModule's ``state_dict()`` under its class name; a non-empty one needs that class."""
    datamodule = getattr(trainer, "datamodule", None)
    name = type(datamodule).__qualname__ if datamodule is not None else None
    if name is not None and name in checkpoint:
        return dict(checkpoint[name])
    names = ("LightningDataModule", "DataModule")
    held = [k for k, v in checkpoint.items() if k.endswith(names) and isinstance(v, dict) and v]
    if held:
        problems.append(f"it holds the state of DataModule {held} but fit() was given none of that class")
    return None
