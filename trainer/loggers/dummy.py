"""Lightning's ``DummyLogger``: what ``fast_dev_run`` logs to, so code that uses ``self.logger`` still runs."""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from trainer.loggers.base import Logger


def nop(*args: Any, **kwargs: Any) -> None:
    """What any method of a dummy does."""


def _nop_method(name: str) -> Any:
    """``nop`` for an ordinary name; a special one (``__deepcopy__``, ``__getstate__``, ...) stays missing, so
    copy and pickle treat a dummy as the plain object it is."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return nop


class DummyExperiment:
    """Takes any call, item or attribute and does nothing (``self.logger.experiment.add_image(...)``)."""

    def __getattr__(self, name: str) -> Any:
        return _nop_method(name)

    def __getitem__(self, _: Any) -> DummyExperiment:
        return self

    def __setitem__(self, *args: Any) -> None:
        pass


class DummyLogger(Logger):
    """Logs nothing; under ``fast_dev_run`` it replaces the loggers, as in Lightning (``log_dir`` is None)."""

    name = ""
    version = ""
    save_dir = None

    def __init__(self) -> None:
        self._experiment = DummyExperiment()

    @property
    def experiment(self) -> DummyExperiment:
        return self._experiment

    @override
    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        pass

    @override
    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getitem__(self, _: int) -> DummyLogger:
        return self  # Lightning's: ``trainer.logger[0]`` works on a DummyLogger too

    def __getattr__(self, name: str) -> Any:
        return _nop_method(name)  # any other logger method: a no-op


def on_global_zero() -> bool:
    """Whether this process is global rank zero (the process group's rank, else the launcher's environment)."""
    from trainer.loggers.folder import global_rank

    return global_rank() == 0
