"""Checks of the Trainer's flags, so a typo fails when the Trainer is built, with the valid values named."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from trainer.exceptions import MisconfigurationException

NONFINITE = ("raise", "skip", "off")
DATA_CHANGE = ("raise", "restart_epoch")
CLIP = ("norm", "value")


def check_limit(name: str, value: int | float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise MisconfigurationException(f"{name}={value!r} must be None, a batch count >= 0, or a fraction in [0, 1].")
    if isinstance(value, float) and value > 1.0:
        raise MisconfigurationException(
            f"{name}={value!r}: a float is a fraction in [0, 1]; use an int for a batch count."
        )


def as_timedelta(name: str, value: float | timedelta | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        seconds = None if value is None else value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}={value!r} must be a number of seconds or a datetime.timedelta.")
    else:
        seconds = float(value)
    if seconds is not None and seconds <= 0:
        raise MisconfigurationException(f"{name}={value!r} must be positive.")
    return None if seconds is None else timedelta(seconds=seconds)


def check_val_check_interval(value: int | float | None) -> int | float:
    """An int (every N training batches) or a fraction of an epoch in (0, 1]; None means 1.0."""
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"val_check_interval={value!r} must be an int (batches) or a float (fraction of an epoch).")
    if isinstance(value, int) and value < 1:
        raise MisconfigurationException(
            f"val_check_interval={value!r}: an int counts training batches and must be >= 1."
        )
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise MisconfigurationException(f"val_check_interval={value!r}: a float is a fraction of an epoch in (0, 1].")
    return value


INT_FLAGS = (
    "max_epochs",
    "min_epochs",
    "max_steps",
    "min_steps",
    "accumulate_grad_batches",
    "check_val_every_n_epoch",
    "num_sanity_val_steps",
    "log_every_n_steps",
    "num_nodes",
    "seed",
    "reload_dataloaders_every_n_epochs",
)


def check_types(values: dict[str, Any]) -> None:
    """Counts must be ints (``max_epochs=1.5`` would silently round up, a string would fail deep inside)."""
    for name in INT_FLAGS:
        value = values[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name}={value!r} must be an int{' or None' if name != 'max_steps' else ''}.")
    clip = values["gradient_clip_val"]
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
        raise TypeError(f"gradient_clip_val={clip!r} must be a number (or None for no clipping).")


def check_counts(values: dict[str, Any]) -> None:
    """The integer flags, each with its own range."""
    check_types(values)
    max_epochs, max_steps = values["max_epochs"], values["max_steps"]
    if max_epochs is not None and max_epochs < -1:
        raise MisconfigurationException(
            f"max_epochs={max_epochs!r} must be >= 0, -1 (no limit) or None (1000 unless max_steps)."
        )
    if max_steps < -1:
        raise MisconfigurationException(f"max_steps={max_steps!r} must be -1 (no limit) or >= 0.")
    for name in ("min_epochs", "min_steps"):
        if values[name] is not None and values[name] < 0:
            raise MisconfigurationException(f"{name}={values[name]!r} must be >= 0 or None.")
    if values["accumulate_grad_batches"] < 1:
        raise MisconfigurationException(f"accumulate_grad_batches={values['accumulate_grad_batches']!r} must be >= 1.")
    if values["log_every_n_steps"] < 1:
        raise MisconfigurationException(f"log_every_n_steps={values['log_every_n_steps']!r} must be >= 1.")
    every = values["check_val_every_n_epoch"]
    if every is not None and every < 1:
        raise MisconfigurationException(f"check_val_every_n_epoch={every!r} must be >= 1 or None.")
    if values["num_sanity_val_steps"] < -1:
        raise MisconfigurationException(
            f"num_sanity_val_steps={values['num_sanity_val_steps']!r} must be -1 (all), 0 or more."
        )


def debug_limits(values: dict[str, Any]) -> dict[str, int | float | None]:
    """limit_*_batches by stage ("train", "validation", "test", "predict"), as ``fast_dev_run`` and
    ``overfit_batches`` set them (Lightning's rules), checked."""
    fast, overfit = values["fast_dev_run"], values["overfit_batches"]
    if isinstance(fast, bool) or fast is None:
        fast = int(bool(fast))
    elif not isinstance(fast, int) or fast < 0:
        raise MisconfigurationException(f"fast_dev_run={fast!r} must be a bool or an int >= 0 (batches per stage).")
    check_limit("overfit_batches", overfit)
    limits = [values[f"limit_{s}_batches"] for s in ("train", "val", "test", "predict")]
    if fast:
        limits = [fast] * 4
    if overfit:
        limits[0] = limits[1] = overfit
    for stage, value in zip(("train", "val", "test", "predict"), limits):
        check_limit(f"limit_{stage}_batches", value)
    return dict(zip(("train", "validation", "test", "predict"), limits))


def max_epochs(max_epochs: int | None, max_steps: int) -> int | None:
    """Lightning's rule: None means 1000 epochs unless ``max_steps`` is set; -1 means no limit (None)."""
    if max_epochs == -1:
        return None
    return 1000 if max_epochs is None and max_steps == -1 else max_epochs


def apply_sync_batchnorm(strategy: Any, sync_batchnorm: bool) -> None:
    """``sync_batchnorm`` is the strategy's business; one that cannot do it says so."""
    if not sync_batchnorm:
        return
    if not hasattr(strategy, "sync_batchnorm"):
        raise MisconfigurationException(
            f"sync_batchnorm=True needs several processes (strategy='ddp'); strategy={strategy.name!r} has one, "
            "where BatchNorm already sees the whole batch."
        )
    strategy.sync_batchnorm = True


def check_choices(values: dict[str, Any]) -> None:
    """The flags that take one of a few names."""
    if values["gradient_clip_algorithm"] not in CLIP:
        raise MisconfigurationException(
            f"gradient_clip_algorithm={values['gradient_clip_algorithm']!r}: choose one of {', '.join(CLIP)}."
        )
    clip = values["gradient_clip_val"]
    if clip is not None and clip <= 0:
        raise MisconfigurationException(f"gradient_clip_val={clip!r} must be > 0 or None.")
    if values["on_nonfinite_loss"] not in NONFINITE:
        raise MisconfigurationException(
            f"on_nonfinite_loss={values['on_nonfinite_loss']!r}: choose one of {', '.join(NONFINITE)}."
        )
    if values["on_data_change"] not in DATA_CHANGE:
        raise MisconfigurationException(
            f"on_data_change={values['on_data_change']!r}: choose one of {', '.join(DATA_CHANGE)}."
        )


# Lightning's defaults for the flags it takes as None ("unset"), which barebones mode turns off.
UNSET_DEFAULTS = {
    "logger": True,
    "enable_checkpointing": True,
    "enable_progress_bar": True,
    "enable_model_summary": True,
    "num_sanity_val_steps": 2,
    "log_every_n_steps": 50,
}
_BAREBONES_OFF = {
    "enable_checkpointing": "Checkpointing can impact raw speed so it is disabled in barebones mode.",
    "logger": "Logging can impact raw speed so it is disabled in barebones mode.",
    "enable_progress_bar": "The progress bar can impact raw speed so it is disabled in barebones mode.",
    "log_every_n_steps": "Logging can impact raw speed so it is disabled in barebones mode.",
    "enable_model_summary": "Model summary can impact raw speed so it is disabled in barebones mode.",
    "num_sanity_val_steps": "Sanity checking can impact raw speed so it is disabled in barebones mode.",
}
_BAREBONES_REFUSED = {
    "fast_dev_run": "Development run is not meant for raw speed evaluation so it is disabled in barebones mode.",
    "detect_anomaly": "Anomaly detection can impact raw speed so it is disabled in barebones mode.",
    "profiler": "Profiling can impact raw speed so it is disabled in barebones mode.",
}


def unset_flags(barebones: bool, values: dict[str, Any]) -> tuple[Any, ...]:
    """The flags of ``UNSET_DEFAULTS`` resolved (None: the default), in that order.

    ``barebones=True`` (Lightning's rules) turns off checkpointing, loggers, the progress bar, the model summary
    and the sanity check, and refuses any of them given on, and ``fast_dev_run``, ``detect_anomaly`` or a
    profiler. ``log_every_n_steps`` keeps its default: with no logger nothing is written.
    """
    if not isinstance(barebones, bool):
        raise MisconfigurationException(f"barebones={barebones!r} must be True or False.")
    if not barebones:
        return tuple(UNSET_DEFAULTS[k] if values[k] is None else values[k] for k in UNSET_DEFAULTS)
    for name, why in _BAREBONES_OFF.items():
        if values[name] not in (None, False, 0):
            raise MisconfigurationException(f"`Trainer(barebones=True, {name}={values[name]!r})` was passed. {why}")
    for name, why in _BAREBONES_REFUSED.items():
        if values[name] not in (None, False, 0):
            raise MisconfigurationException(f"`Trainer(barebones=True, {name}={values[name]!r})` was passed. {why}")
    return False, False, False, False, 0, UNSET_DEFAULTS["log_every_n_steps"]
