"""``ModelCheckpoint``'s option checks, its state's restore, and the words of its monitor warnings.

Kept apart from the saving rules (``checkpoint.py``) so each stays small: a bad option is refused at
construction, naming the value and what would be valid, with Lightning's error types and words.
"""

import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.callbacks.checkpoint import ModelCheckpoint

MODES = ("min", "max")


def check_options(
    mode: str,
    save_top_k: int,
    monitor: str | None,
    save_last: Any,
    every_n_epochs: int | None,
    every_n_train_steps: int | None,
    train_time_interval: timedelta | None,
) -> None:
    """Refuse what ModelCheckpoint cannot do, as Lightning does."""
    if mode not in MODES:
        raise MisconfigurationException(
            f"ModelCheckpoint(mode={mode!r}): `mode` can be 'min' or 'max', but got {mode}."
        )
    if save_top_k < -1:
        raise MisconfigurationException(
            f"ModelCheckpoint(save_top_k={save_top_k!r}) must be -1 (all), 0 or more: Invalid value for "
            f"save_top_k={save_top_k}. Must be >= -1"
        )
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise MisconfigurationException(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid configuration. No quantity "
            "for top_k to track: pass monitor=, or save_top_k=-1 (all), 0 or 1 (the newest)."
        )
    if save_last not in (True, False, None, "link"):
        raise ValueError(f"ModelCheckpoint(save_last={save_last!r}): use True, False, None or 'link'.")
    for name, value in (("every_n_epochs", every_n_epochs), ("every_n_train_steps", every_n_train_steps)):
        if value is not None and value < 0:
            raise MisconfigurationException(
                f"ModelCheckpoint({name}={value!r}) must be >= 0 or None: Invalid value for {name}={value}. "
                "Must be >= 0"
            )
    if sum(triggers(every_n_train_steps, train_time_interval, every_n_epochs)) > 1:
        raise MisconfigurationException(
            f"Combination of parameters every_n_train_steps={every_n_train_steps}, every_n_epochs="
            f"{every_n_epochs} and train_time_interval={train_time_interval} should be mutually exclusive: "
            "ModelCheckpoint saves on one of them."
        )


def triggers(every_n_train_steps: int | None, interval: timedelta | None, every_n_epochs: int | None) -> list[bool]:
    return [bool(every_n_train_steps), interval is not None, bool(every_n_epochs)]


def worst_value(mode: str) -> torch.Tensor:
    """Lightning's ``kth_value`` before any checkpoint is ranked: the worst possible score."""
    return torch.tensor(torch.inf if mode == "min" else -torch.inf)


def as_tensor(value: Any) -> torch.Tensor | None:
    """A score as Lightning keeps it: a 0-d tensor (None stays None)."""
    return None if value is None else value if isinstance(value, torch.Tensor) else torch.tensor(float(value))


def load_state(callback: "ModelCheckpoint", state_dict: dict[str, Any]) -> None:
    """As Lightning: a ``dirpath`` given that is not the checkpoint's restores only ``best_model_path`` (the
    other files are not in this folder). Without one, a resumed run keeps writing to its own folder."""
    callback.best_model_path = state_dict.get("best_model_path", "")
    saved_in = state_dict.get("dirpath")
    if callback._dirpath_given and saved_in and str(saved_in) != str(callback.dirpath):
        warnings.warn(
            f"The dirpath has changed from {saved_in!r} to {callback.dirpath!r}, therefore `best_model_score`, "
            "`kth_best_model_path`, `kth_value`, `last_model_path` and `best_k_models` won't be reloaded. Only "
            "`best_model_path` will be reloaded.",
            stacklevel=3,
        )
        return
    callback.best_k_models = dict(state_dict.get("best_k_models", {}))
    score = state_dict.get("best_model_score", callback.best_k_models.get(callback.best_model_path))
    callback.best_model_score = as_tensor(score)
    callback.kth_best_model_path = state_dict.get("kth_best_model_path", "")
    callback.kth_value = as_tensor(state_dict.get("kth_value", callback.kth_value))  # type: ignore[assignment]
    callback.last_model_path = state_dict.get("last_model_path", "")
    callback.current_score = state_dict.get("current_score")
    callback._last_global_step_saved = state_dict.get("last_global_step_saved", 0)
    if not callback._dirpath_given and saved_in:
        callback.dirpath = saved_in  # a resumed run keeps writing to its own folder


def warn_missing_monitor(monitor: str, logged: list[str]) -> None:
    warnings.warn(
        f"`ModelCheckpoint(monitor={monitor!r})` could not find the monitored key in the returned metrics: "
        f"{logged}. HINT: Did you call `log({monitor!r}, value)` in the `LightningModule`? No top-k checkpoint is "
        "kept until it is logged.",
        stacklevel=3,
    )


def missing_monitor(monitor: str, logged: list[str]) -> KeyError:
    return KeyError(
        f"ModelCheckpoint(monitor={monitor!r}) found no such logged metric; logged: {logged or 'nothing'}. "
        f"Log it with self.log({monitor!r}, ...)."
    )


def logged_score(logged: Any, score: float | None) -> torch.Tensor | None:
    """The score as Lightning keeps ``current_score``: the logged tensor itself (NaN as ``score``'s inf)."""
    if score is None:
        return None
    if isinstance(logged, torch.Tensor) and not torch.isnan(logged).any():
        return logged.detach().cpu().clone()
    return torch.tensor(score)
