"""Checks of the Trainer's flags, so a typo fails when the Trainer is built, with the valid values named."""

from __future__ import annotations

import ast
import functools
import inspect
import logging
import os
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from trainer.exceptions import MisconfigurationException, MisconfigurationTypeError

NONFINITE = ("raise", "skip", "off")
DATA_CHANGE = ("raise", "restart_epoch")
CLIP = ("norm", "value")


def check_limit(name: str, value: int | float | None) -> int | float | None:
    """A batch limit: None, a fraction in [0, 1] or a count (a whole float above 1 counts, as in Lightning)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MisconfigurationTypeError(f"{name}={value!r} must be None, a batch count >= 0, or a fraction in [0, 1].")
    if value == 1:
        _say_what_one_means(name, value)
    if 0 <= value <= 1:
        return value
    if value > 1 and value % 1.0 == 0:
        return int(value)
    raise MisconfigurationException(
        f"You have passed invalid value {value} for {name}, it has to be in [0.0, 1.0] or an int ({name}={value!r}: "
        "a float is a fraction of the batches, an int a count)."
    )


def _say_what_one_means(name: str, value: int | float) -> None:
    """Lightning's note (at INFO level) on a flag set to 1 or 1.0: one batch, or all of them."""
    if isinstance(value, int):
        what = {
            "limit_train_batches": "1 batch per epoch will be used.",
            "val_check_interval": "validation will run after every batch.",
        }.get(name, "1 batch will be used.")
    else:
        what = {
            "limit_train_batches": "100% of the batches per epoch will be used.",
            "val_check_interval": "validation will run at the end of the training epoch.",
        }.get(name, "100% of the batches will be used.")
    logging.getLogger("trainer").info(f"`Trainer({name}={value})` was configured so {what}")


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


_DURATION = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")


def as_duration(what: str, duration: str | timedelta | dict[str, int] | None) -> timedelta | None:
    """``"DD:HH:MM:SS"``, a ``timedelta``, or ``timedelta``'s keywords as a dict (``{"hours": 2}``); ``what``
    names the value in the error (``"Timer(duration={!r})"``, formatted with it)."""
    if duration is None or isinstance(duration, timedelta):
        return duration
    if isinstance(duration, dict):
        return timedelta(**duration)
    match = _DURATION.fullmatch(duration.strip()) if isinstance(duration, str) else None
    if match is None:
        raise MisconfigurationException(
            f"{what.format(duration)} is not a duration: expected a string in the format DD:HH:MM:SS (e.g. "
            "'00:12:00:00'), a datetime.timedelta, or a dict of timedelta keywords such as {'hours': 12}."
        )
    days, hours, minutes, seconds = (int(g) for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def check_val_check_interval(
    value: int | float | str | timedelta | dict[str, int] | None, every_n_epochs: int | None
) -> int | float | timedelta:
    """An int (every N training batches), a fraction of an epoch in (0, 1], or a time (Lightning 2.6's
    'DD:HH:MM:SS', timedelta or dict: validate once that much wall time passed); None means 1.0."""
    if value is None:
        return 1.0
    if isinstance(value, str | timedelta | dict):
        return as_duration("val_check_interval={!r}", value)  # type: ignore[return-value]
    if isinstance(value, float) and every_n_epochs is None:
        raise MisconfigurationException(
            "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
            "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`. Got "
            f"val_check_interval={value!r}."
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"val_check_interval={value!r} must be an int (batches) or a float (fraction of an epoch).")
    if value == 1:
        _say_what_one_means("val_check_interval", value)
    if isinstance(value, float) and value > 1 and value % 1.0 == 0:
        value = int(value)  # a whole float counts batches, as in Lightning
    if isinstance(value, int) and value < 1:
        raise MisconfigurationException(
            f"You have passed invalid value {value} for val_check_interval (val_check_interval={value!r}): an int "
            "counts training batches and must be >= 1."
        )
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise MisconfigurationException(
            f"You have passed invalid value {value} for val_check_interval (val_check_interval={value!r}): a float "
            "is a fraction of an epoch in (0, 1]."
        )
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
)


def check_types(values: dict[str, Any]) -> None:
    """Counts must be ints (``max_epochs=1.5`` would silently round up, a string would fail deep inside)."""
    for name in INT_FLAGS:
        value = values[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise MisconfigurationTypeError(
                f"`{name}` should be an integer{' or None' if name != 'max_steps' else ''}, got {name}={value!r}."
            )
    clip = values["gradient_clip_val"]
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float)):
        raise MisconfigurationTypeError(
            "`gradient_clip_val` should be an int or a float (or None for no clipping). "
            f"Got gradient_clip_val={clip!r}."
        )


def check_counts(values: dict[str, Any]) -> None:
    """The integer flags, each with its own range."""
    check_types(values)
    max_epochs, max_steps = values["max_epochs"], values["max_steps"]
    if max_epochs is not None and max_epochs < -1:
        raise MisconfigurationException(
            f"`max_epochs` must be a non-negative integer or -1. You passed in max_epochs={max_epochs}: use >= 0, "
            "-1 (no limit) or None (1000 unless max_steps or max_time)."
        )
    if max_steps < -1:
        raise MisconfigurationException(
            f"`max_steps` must be a non-negative integer or -1. You passed in max_steps={max_steps} (-1: no limit)."
        )
    for name in ("min_epochs", "min_steps"):
        if values[name] is not None and values[name] < 0:
            raise MisconfigurationException(f"{name}={values[name]!r} must be >= 0 or None.")
    if values["accumulate_grad_batches"] < 1:
        raise MisconfigurationException(f"accumulate_grad_batches={values['accumulate_grad_batches']!r} must be >= 1.")
    if values["log_every_n_steps"] < 0:
        raise MisconfigurationException(
            f"log_every_n_steps={values['log_every_n_steps']!r} must be >= 0 (0: step values never reach the "
            "loggers, only epoch values; Lightning's meaning)."
        )
    every = values["check_val_every_n_epoch"]
    if every is not None and every < 1:
        raise MisconfigurationException(f"check_val_every_n_epoch={every!r} must be >= 1 or None.")
    reload = values["reload_dataloaders_every_n_epochs"]
    if isinstance(reload, bool) or not isinstance(reload, int) or reload < 0:
        error = MisconfigurationException if isinstance(reload, int) else MisconfigurationTypeError
        raise error(
            f"`reload_dataloaders_every_n_epochs` should be an int >= 0, got {reload!r} (0: the loaders are "
            "requested once; n: again every n epochs)."
        )
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
        raise MisconfigurationException(
            f"fast_dev_run={fast!r} is not a valid configuration. It should be >= 0: a bool, or an int (batches per "
            "stage)."
        )
    overfit = check_limit("overfit_batches", overfit)
    limits = [
        check_limit(f"limit_{s}_batches", values[f"limit_{s}_batches"]) for s in ("train", "val", "test", "predict")
    ]
    if fast:
        limits = [fast] * 4
    if overfit:
        limits[0] = limits[1] = overfit
    return dict(zip(("train", "validation", "test", "predict"), limits))


def max_epochs_limit(max_epochs: int | None, max_steps: int, timed: bool) -> int:
    """The epoch limit a fit runs, Lightning's rule: None means 1000 epochs (with a warning) unless ``max_steps``
    or a ``Timer`` (``max_time``: ``timed``) bounds the run; -1 means no limit."""
    if max_epochs is not None:
        return max_epochs
    if max_steps != -1 or timed:
        return -1
    import warnings

    from trainer.user_warnings import PossibleUserWarning

    warnings.warn(
        "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set `max_epochs=-1`.",
        PossibleUserWarning,
        stacklevel=4,
    )
    return 1000


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
    if values["gradient_clip_algorithm"] not in (*CLIP, None):
        raise MisconfigurationException(
            f"`gradient_clip_algorithm` {values['gradient_clip_algorithm']} is invalid. Got gradient_clip_algorithm="
            f"{values['gradient_clip_algorithm']!r}: choose one of {', '.join(CLIP)}."
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


def from_environment(init: Callable[..., None]) -> Callable[..., None]:
    """Lightning's ``PL_TRAINER_<FLAG>`` environment variables (``PL_<CLASS>_<FLAG>`` for a subclass): a flag not
    passed takes its variable's value, read as a Python literal when it is one (``"7"`` is 7, ``"False"`` False)."""
    names = list(inspect.signature(init).parameters)[1:]

    @functools.wraps(init)
    def with_environment(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.update(zip(names, args))
        prefix = f"PL_{type(self).__name__.upper()}_"
        for name in names:
            value = os.environ.get(prefix + name.upper())
            if name not in kwargs and value:
                try:
                    kwargs[name] = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    kwargs[name] = value
        init(self, **kwargs)

    return with_environment


def check_deterministic(value: Any) -> bool | str:
    """Lightning's ``deterministic``: True, False, None (False) or "warn"."""
    if value is None:
        return False
    if value not in (True, False, "warn"):
        raise MisconfigurationException(f"deterministic={value!r}: choose True, False, None or 'warn'.")
    return value  # type: ignore[no-any-return]


def check_model_registry(value: str | None) -> None:
    """Lightning's model hub upload (``model_registry="name"``) needs Lightning's cloud service; refused by name."""
    if value is not None:
        raise MisconfigurationException(
            f"model_registry={value!r}: steadytrain has no model registry (Lightning uploads to its cloud hub). "
            "Leave it None; copy the checkpoint where you keep models (ModelCheckpoint(dirpath=...))."
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
_BAREBONES_REFUSED = {  # Lightning's rules: any fast_dev_run but False/0, detect_anomaly on, any profiler
    "fast_dev_run": "Development run is not meant for raw speed evaluation so it is disabled in barebones mode.",
    "detect_anomaly": "Anomaly detection can impact raw speed so it is disabled in barebones mode.",
    "profiler": "Profiling can impact raw speed so it is disabled in barebones mode.",
}

# Lightning's note (INFO) when barebones mode is on: what it turned off, each with the flag that would turn it on.
_BAREBONES_NOTE = (
    "You are running in `Trainer(barebones=True)` mode. All features that may impact raw speed have been disabled "
    "to facilitate analyzing the Trainer overhead. Specifically, the following features are deactivated:\n"
    " - Checkpointing: `Trainer(enable_checkpointing=True)`\n"
    " - Progress bar: `Trainer(enable_progress_bar=True)`\n"
    " - Model summary: `Trainer(enable_model_summary=True)`\n"
    " - Logging: `Trainer(logger=True)`, `Trainer(log_every_n_steps>0)`, `self.log(...)`, `self.log_dict(...)`\n"
    " - Sanity checking: `Trainer(num_sanity_val_steps>0)`\n"
    " - Development run: `Trainer(fast_dev_run=True)`\n"
    " - Anomaly detection: `Trainer(detect_anomaly=True)`\n"
    " - Profiling: `Trainer(profiler=...)`"
)


def unset_flags(barebones: bool, values: dict[str, Any]) -> tuple[Any, ...]:
    """The flags of ``UNSET_DEFAULTS`` resolved (None: the default), in that order.

    ``barebones=True`` (Lightning's rules) turns off checkpointing, loggers, the progress bar, the model summary
    and the sanity check, and refuses any of them given on, and ``fast_dev_run``, ``detect_anomaly`` or a
    profiler. ``log_every_n_steps`` becomes 0 (no step is a logging step), as in Lightning.
    """
    if not isinstance(barebones, bool):
        raise MisconfigurationException(f"barebones={barebones!r} must be True or False.")
    if not barebones:
        return tuple(UNSET_DEFAULTS[k] if values[k] is None else values[k] for k in UNSET_DEFAULTS)
    for name, why in _BAREBONES_OFF.items():
        if values[name] not in (None, False, 0):
            raise MisconfigurationException(f"`Trainer(barebones=True, {name}={values[name]!r})` was passed. {why}")
    for name, why in _BAREBONES_REFUSED.items():
        if values[name] not in (None, False, 0) or (name == "profiler" and values[name] is not None):
            raise MisconfigurationException(f"`Trainer(barebones=True, {name}={values[name]!r})` was passed. {why}")
    logging.getLogger("trainer").info(_BAREBONES_NOTE)
    return False, False, False, False, 0, 0
