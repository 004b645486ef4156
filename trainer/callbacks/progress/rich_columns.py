"""The columns of ``RichProgressBar``'s default layout (``configure_columns``), and the metrics column it adds last.

Imported only with ``rich`` installed (``RichProgressBar`` says what to install otherwise).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rich.progress import ProgressColumn, Task, TaskID
from rich.style import Style
from rich.text import Text


class BatchesProcessedColumn(ProgressColumn):
    """``12/50``: batches done of the loader's batches (``--`` for a loader without a length)."""

    def __init__(self, style: str | Style) -> None:
        self.style = style
        super().__init__()

    def render(self, task: Task) -> Text:
        total = "--" if task.total is None else int(task.total)
        return Text(f"{int(task.completed)}/{total}", style=self.style)


class CustomTimeColumn(ProgressColumn):
    """``0:00:12 • 0:01:40``: time spent and time left."""

    max_refresh = 0.5

    def __init__(self, style: str | Style) -> None:
        self.style = style
        super().__init__()

    def render(self, task: Task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        remaining = task.time_remaining if task.total is not None else None
        spent = "-:--:--" if elapsed is None else str(timedelta(seconds=int(elapsed)))
        left = "-:--:--" if remaining is None else str(timedelta(seconds=int(remaining)))
        return Text(f"{spent} • {left}", style=self.style)


class ProcessingSpeedColumn(ProgressColumn):
    """``3.42it/s``."""

    def __init__(self, style: str | Style) -> None:
        self.style = style
        super().__init__()

    def render(self, task: Task) -> Text:
        speed = f"{task.speed:>.2f}" if task.speed is not None else "0.00"
        return Text(f"{speed}it/s", style=self.style)


class MetricsTextColumn(ProgressColumn):
    """``v_num: 0 train_loss: 0.123``: the bar's metrics, beside the training bar (``train_task``) only."""

    def __init__(self, style: str | Style, text_delimiter: str, metrics_format: str) -> None:
        self._style = style
        self._text_delimiter = text_delimiter
        self._metrics_format = metrics_format
        self._metrics: dict[str, Any] = {}
        self.train_task: TaskID | None = None
        super().__init__()

    def update(self, metrics: dict[str, Any]) -> None:
        self._metrics = metrics

    def render(self, task: Task) -> Text:
        if task.id != self.train_task:
            return Text()
        parts = []
        for name, value in self._metrics.items():
            if not isinstance(value, str):
                try:
                    value = f"{value:{self._metrics_format}}"
                except (TypeError, ValueError):
                    value = str(value)
            parts.append(f"{name}: {value}")
        return Text(self._text_delimiter.join(parts), justify="left", style=self._style)
