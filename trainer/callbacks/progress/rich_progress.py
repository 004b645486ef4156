"""``RichProgressBar``: Lightning's rich bar (``pip install rich``, or the ``rich`` extra of steadytrain).

The same stages and numbers as ``TQDMProgressBar``; on a terminal one ``rich.progress.Progress``
draws every bar with the metrics beside the training bar. Where stdout is not a terminal it writes the
same plain lines as ``TQDMProgressBar``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.callbacks.progress.displays import Display, Metrics, postfix
from trainer.callbacks.progress.staged import StagedProgressBar

_MISSING = (
    "RichProgressBar needs the `rich` package, which is not installed: pip install rich, or install steadytrain "
    "with its extra: pip install -e '.[rich]' in a clone of the repository. TQDMProgressBar needs nothing extra."
)


@dataclass
class RichProgressBarTheme:
    """Styles (rich style strings) of the bar's parts; Lightning's names and defaults."""

    description: str = ""
    progress_bar: str = "#6206E0"
    progress_bar_finished: str = "#6206E0"
    progress_bar_pulse: str = "#6206E0"
    batch_progress: str = ""
    time: str = "dim"
    processing_speed: str = "dim underline"
    metrics: str = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


class RichProgressBar(StagedProgressBar):
    """Lightning's arguments: ``refresh_rate`` redraws per second (0 hides the bar), ``leave`` keeps each
    epoch's bar, ``theme`` styles it, ``console_kwargs`` go to ``rich.console.Console``.

    Raises ImportError naming the extra to install when ``rich`` is missing.
    """

    def __init__(
        self,
        refresh_rate: int = 100,
        leave: bool = False,
        theme: RichProgressBarTheme | None = None,
        console_kwargs: dict[str, Any] | None = None,
        line_interval_s: float = 10.0,
    ) -> None:
        try:
            import rich  # noqa: F401
        except ImportError as err:
            raise ImportError(_MISSING) from err
        # The bars move every batch; rich itself redraws at most refresh_rate times a second.
        super().__init__(1 if refresh_rate > 0 else 0, leave, line_interval_s)
        self.rich_refresh_rate = refresh_rate
        self.theme = theme or RichProgressBarTheme()
        self.console_kwargs = console_kwargs or {}

    def terminal_display(self) -> Display:
        return RichDisplay(self.theme, self.rich_refresh_rate, self.console_kwargs)


class RichDisplay:
    """One live ``rich.progress.Progress``: a task per open bar, metrics in a column of their own."""

    def __init__(self, theme: RichProgressBarTheme, refresh_per_second: int, console_kwargs: dict[str, Any]) -> None:
        from rich import progress as rp
        from rich.console import Console

        columns = [
            rp.TextColumn("[progress.description]{task.description}", style=theme.description),
            rp.BarColumn(
                complete_style=theme.progress_bar,
                finished_style=theme.progress_bar_finished,
                pulse_style=theme.progress_bar_pulse,
            ),
            rp.MofNCompleteColumn(),
            rp.TimeElapsedColumn(),
            rp.TimeRemainingColumn(),
            rp.TextColumn("{task.fields[metrics]}", style=theme.metrics),
        ]
        self.theme = theme
        self.progress = rp.Progress(
            *columns, console=Console(**console_kwargs), refresh_per_second=max(refresh_per_second, 1)
        )
        self._tasks: dict[str, Any] = {}
        self._leave: dict[str, bool] = {}

    def open(self, key: str, desc: str, total: int | None, initial: int, position: int, leave: bool) -> None:
        if not self._tasks:
            self.progress.start()
        task = self._tasks.get(key)
        if task is None:
            self._tasks[key] = self.progress.add_task(desc, total=total, completed=initial, metrics="")
        else:
            self.progress.reset(task, total=total, completed=initial, description=desc)
        self._leave[key] = leave

    def update(self, key: str, n: int, metrics: Metrics | None, final: bool = False) -> None:
        task = self._tasks.get(key)
        if task is None:
            return
        fields: dict[str, Any] = {}
        if metrics is not None:
            delimiter, fmt = self.theme.metrics_text_delimiter, self.theme.metrics_format
            shown = {k: format(v, fmt) if isinstance(v, float) else v for k, v in metrics().items()}
            fields["metrics"] = postfix(shown).replace(", ", delimiter)
        self.progress.update(task, completed=n, refresh=final, **fields)

    def close(self, key: str) -> None:
        task = self._tasks.pop(key, None)
        if task is not None and not self._leave.get(key, True):
            self.progress.remove_task(task)
        if not self._tasks:
            self.progress.stop()  # what was left stays printed; the next start draws afresh
            for task_id in list(self.progress.task_ids):
                self.progress.remove_task(task_id)

    def close_all(self) -> None:
        for key in list(self._tasks):
            self.close(key)

    def write(self, text: str, end: str = "\n") -> None:
        self.progress.console.print(text, end=end)
