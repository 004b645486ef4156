"""``PyTorchProfiler``: ``torch.profiler`` over the stage, operator tables and a Chrome trace in the run folder."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.exceptions import MisconfigurationException
from trainer.profilers.base import Profiler

SORT_KEYS: tuple[str, ...] = ("cpu_time", "cuda_time", "cpu_time_total", "cuda_time_total", "cpu_memory_usage")
SORT_KEYS += ("cuda_memory_usage", "self_cpu_memory_usage", "self_cuda_memory_usage", "count")


class PyTorchProfiler(Profiler):
    """The operators each action ran (CPU, and CUDA where present), and ``<stage>-trace.json`` to open
    in chrome://tracing or Perfetto. Lightning's arguments, with its meaning:

    - ``group_by_input_shapes``: the table groups operators by input shapes (records shapes);
    - ``emit_nvtx``: NVTX ranges for an outside profiler (``nsys``) instead of torch.profiler (CUDA only);
    - ``export_to_chrome``: write the trace file;
    - ``record_module_names``: each submodule's forward is a range named ``[pl][module]<class>: <name>``;
    - ``table_kwargs``: more arguments of ``EventList.table`` for the report;
    - ``**profiler_kwargs``: ``torch.profiler.profile``'s own.
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        emit_nvtx: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = True,
        table_kwargs: dict[str, Any] | None = None,
        record_shapes: bool = False,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath, filename)
        cuda = torch.cuda.is_available()
        self.row_limit, self.sort_by_key = row_limit, sort_by_key or ("cuda_time_total" if cuda else "cpu_time_total")
        if self.sort_by_key not in SORT_KEYS:
            raise MisconfigurationException(f"PyTorchProfiler(sort_by_key={sort_by_key!r}): choose one of {SORT_KEYS}.")
        if emit_nvtx and not cuda:
            raise MisconfigurationException("PyTorchProfiler(emit_nvtx=True) needs a CUDA device (NVTX ranges).")
        self.table_kwargs = _checked_table_kwargs(table_kwargs or {})
        self.group_by_input_shapes, self.emit_nvtx = group_by_input_shapes, emit_nvtx
        self.export_to_chrome, self.record_module_names = export_to_chrome, record_module_names
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        record_shapes = record_shapes or group_by_input_shapes
        self._kwargs = {"activities": activities, "record_shapes": record_shapes, **profiler_kwargs}
        self._profiler: Any = None
        self._ranges: dict[str, Any] = {}
        self._hooks: list[Any] = []

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | Path | None = None) -> None:
        super().setup(stage, local_rank, log_dir)
        if self.emit_nvtx:
            self._profiler = torch.autograd.profiler.emit_nvtx(record_shapes=self._kwargs["record_shapes"])
        else:
            self._profiler = torch.profiler.profile(**self._kwargs)
        self._profiler.__enter__()
        if self.record_module_names and isinstance(self.lightning_module, nn.Module):
            self._hooks = _name_module_ranges(self.lightning_module)

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
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.__exit__(None, None, None)
            if not self.emit_nvtx:
                self._table = self._report(profiler)
                if self.dirpath is not None and self.export_to_chrome:
                    self.dirpath.mkdir(parents=True, exist_ok=True)
                    trace = f"{self._stage or stage}-trace{self._rank_suffix()}.json"
                    profiler.export_chrome_trace(str(self.dirpath / trace))
        super().teardown(stage)

    def _report(self, profiler: Any) -> str:
        averages = profiler.key_averages(group_by_input_shape=self.group_by_input_shapes)
        return averages.table(sort_by=self.sort_by_key, row_limit=self.row_limit, **self.table_kwargs)  # type: ignore[no-any-return]

    def summary(self) -> str:
        return getattr(self, "_table", "")


def _checked_table_kwargs(table_kwargs: dict[str, Any]) -> dict[str, Any]:
    valid = set(inspect.signature(torch.autograd.profiler_util.EventList.table).parameters) - {"self"}
    for key in table_kwargs:
        if key in ("sort_by", "row_limit"):
            raise KeyError(
                f"table_kwargs={{{key!r}: ...}}: pass it as PyTorchProfiler({key.replace('by', 'by_key')}=...)."
            )
        if key not in valid:
            raise KeyError(
                f"table_kwargs={{{key!r}: ...}}: EventList.table takes {sorted(valid - {'sort_by', 'row_limit'})}."
            )
    return table_kwargs


def _name_module_ranges(module: nn.Module) -> list[Any]:
    """A ``record_function`` range around each submodule's forward, named after its class and path."""
    hooks = []
    for name, sub in module.named_modules():
        label = f"[pl][module]{type(sub).__module__}.{type(sub).__name__}: {name}"
        scopes: list[Any] = []

        def enter(_: nn.Module, __: Any, label: str = label, scopes: list[Any] = scopes) -> None:
            scopes.append(torch.profiler.record_function(label))
            scopes[-1].__enter__()

        def leave(_: nn.Module, __: Any, ___: Any, scopes: list[Any] = scopes) -> None:
            if scopes:
                scopes.pop().__exit__(None, None, None)

        hooks += [sub.register_forward_pre_hook(enter), sub.register_forward_hook(leave)]
    return hooks
