"""``PyTorchProfiler``: ``torch.profiler`` over the stage, operator tables and a Chrome trace in the run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainer.exceptions import MisconfigurationException
from trainer.profilers.base import Profiler


class PyTorchProfiler(Profiler):
    """The operators each action ran (CPU, and CUDA where present), and ``<stage>-trace.json`` to open
    in chrome://tracing or Perfetto."""

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        record_shapes: bool = False,
        row_limit: int = 20,
        sort_by_key: str = "cpu_time_total",
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath, filename)
        self.row_limit, self.sort_by_key = row_limit, sort_by_key
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._kwargs = {"activities": activities, "record_shapes": record_shapes, **profiler_kwargs}
        self._profiler: torch.profiler.profile | None = None
        self._ranges: dict[str, Any] = {}

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | Path | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        self._profiler = torch.profiler.profile(**self._kwargs)
        self._profiler.__enter__()

    def start(self, action_name: str) -> None:
        scope = torch.profiler.record_function(action_name)
        scope.__enter__()
        self._ranges[action_name] = scope

    def stop(self, action_name: str) -> None:
        scope = self._ranges.pop(action_name, None)
        if scope is None:
            raise MisconfigurationException(f"profiler action {action_name!r} was stopped without a start.")
        scope.__exit__(None, None, None)

    def teardown(self, stage: str | None = None) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.__exit__(None, None, None)
            self._table = profiler.key_averages().table(sort_by=self.sort_by_key, row_limit=self.row_limit)
            if self.dirpath is not None:
                self.dirpath.mkdir(parents=True, exist_ok=True)
                trace = f"{self._stage or stage}-trace{self._rank_suffix()}.json"
                profiler.export_chrome_trace(str(self.dirpath / trace))
        super().teardown(stage)

    def summary(self) -> str:
        return getattr(self, "_table", "")
