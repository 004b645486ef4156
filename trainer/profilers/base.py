"""The Profiler interface (Lightning's): ``start``/``stop`` an action, ``profile`` it as a context,
``summary`` of what was recorded; ``setup``/``teardown`` around a stage write the report."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


class Profiler:
    """Records durations of named actions. Subclasses implement ``start``, ``stop`` and ``summary``."""

    def __init__(self, dirpath: str | Path | None = None, filename: str | None = None) -> None:
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.filename = filename
        self._stage: str | None = None
        self._rank: int | None = None  # in file names when there are several processes
        self.lightning_module: Any = None  # the stage's module, set by the Trainer before ``setup``

    def start(self, action_name: str) -> None:
        raise NotImplementedError

    def stop(self, action_name: str) -> None:
        raise NotImplementedError

    def summary(self) -> str:
        raise NotImplementedError

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Iterator[None]:
        self.start(action_name)
        try:
            yield
        finally:
            self.stop(action_name)

    def timed(self, action_name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` whose every call is recorded as ``action_name``."""

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            self.start(action_name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.stop(action_name)

        return run

    def timed_iter(self, action_name: str, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable``, each ``next`` recorded as ``action_name`` (the time spent waiting for data)."""
        iterator = iter(iterable)
        while True:
            self.start(action_name)
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.stop(action_name)
            yield item

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | Path | None = None) -> None:
        """``local_rank``: None on one process; else the rank that goes into file names (Lightning's
        ``fit-<filename>-<rank>.txt``), so ranks never overwrite each other's reports."""
        self._stage, self._rank = stage, local_rank
        if self.dirpath is None and log_dir is not None:
            self.dirpath = Path(log_dir)

    def teardown(self, stage: str | None = None) -> None:
        """The stage ended: write the report (global rank zero prints it too; see the Trainer)."""
        report = self.summary()
        if self.dirpath is not None and report:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            name = self.filename or "profiler"
            (self.dirpath / f"{self._stage or stage}-{name}{self._rank_suffix()}.txt").write_text(report)

    def _rank_suffix(self) -> str:
        """``-<rank>`` in file names when several processes write them, else nothing."""
        return "" if self._rank is None else f"-{self._rank}"

    def describe(self) -> str:
        return self.summary()


class PassThroughProfiler(Profiler):
    """Records nothing (what Lightning's ``profiler=None`` means)."""

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass

    def summary(self) -> str:
        return ""
