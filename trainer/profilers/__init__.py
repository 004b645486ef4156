"""Profilers (``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler())``), Lightning's names.

With no profiler nothing is timed and the loops pay nothing. With one, the calls the loops resolve
once per epoch (the step, the batch transfer, every overridden hook, the next batch from the
loader) are wrapped in ``profiler.profile(name)``; at a stage's end the report is printed on global
rank zero and written to the run folder.
"""

from __future__ import annotations

from typing import Any

from trainer.exceptions import MisconfigurationException
from trainer.profilers.base import PassThroughProfiler, Profiler
from trainer.profilers.simple import AdvancedProfiler, SimpleProfiler

PROFILERS = ("simple", "advanced", "pytorch")


def build_profiler(profiler: str | Profiler | None) -> Profiler | None:
    """The ``profiler=`` flag as a Profiler (None: no profiling at all)."""
    if profiler is None or isinstance(profiler, Profiler):
        return profiler
    if profiler == "simple":
        return SimpleProfiler()
    if profiler == "advanced":
        return AdvancedProfiler()
    if profiler == "pytorch":
        from trainer.profilers.torch_profiler import PyTorchProfiler

        return PyTorchProfiler()
    raise MisconfigurationException(
        f"profiler={profiler!r}: choose one of {', '.join(PROFILERS)}, a Profiler instance, or None."
    )


def __getattr__(name: str) -> Any:
    if name == "PyTorchProfiler":  # imports torch.profiler only when asked for
        from trainer.profilers.torch_profiler import PyTorchProfiler

        return PyTorchProfiler
    raise AttributeError(name)


class XLAProfiler(Profiler):
    """Lightning's TPU profiler: the name imports, so a ported file runs; building one says what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise MisconfigurationException(
            "XLAProfiler: steadytrain does not run on TPUs (XLA); use profiler='pytorch' (torch.profiler) on CPU or "
            "CUDA, or profiler='simple'."
        )


__all__ = [
    "AdvancedProfiler",
    "PassThroughProfiler",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
    "XLAProfiler",
    "build_profiler",
]
