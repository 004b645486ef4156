"""``RichProgressBar``: Lightning's rich bar (``pip install rich``, or the ``rich`` extra of steadytrain).

One ``rich.progress.Progress`` (``progress``) draws a task per bar: ``train_progress_bar_id``,
``val_sanity_progress_bar_id``, ``val_progress_bar_id``, ``test_progress_bar_id``, ``predict_progress_bar_id``,
with the metrics in a last column beside the training bar. ``configure_columns`` gives the other columns (override
it for your own). Where its console is not a terminal, rich prints each bar as it ends instead of redrawing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.callbacks.progress.base import ProgressBar

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID
    from rich.style import Style

    from trainer.callbacks.progress.rich_columns import MetricsTextColumn
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

_MISSING = (
    "`RichProgressBar` requires `rich` >= 10.2.2, which is not installed: pip install rich, or install steadytrain "
    "with its extra: pip install -e '.[rich]' in a clone of the repository. TQDMProgressBar needs nothing extra."
)


@dataclass
class RichProgressBarTheme:
    """Styles (rich style strings or ``Style``) of the bar's parts; Lightning's names and defaults."""

    description: str | Style = ""
    progress_bar: str | Style = "#6206E0"
    progress_bar_finished: str | Style = "#6206E0"
    progress_bar_pulse: str | Style = "#6206E0"
    batch_progress: str | Style = ""
    time: str | Style = "dim"
    processing_speed: str | Style = "dim underline"
    metrics: str | Style = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


class RichProgressBar(ProgressBar):
    """Lightning's arguments: ``refresh_rate`` redraws per second (0 hides the bar), ``leave`` keeps each
    epoch's bar, ``theme`` styles it, ``console_kwargs`` go to ``rich.console.Console``.

    Raises ModuleNotFoundError naming what to install when ``rich`` is missing.
    """

    def __init__(
        self,
        refresh_rate: int = 100,
        leave: bool = False,
        theme: RichProgressBarTheme | None = None,
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            import rich  # noqa: F401
        except ImportError as err:
            raise ModuleNotFoundError(_MISSING) from err
        super().__init__()
        self._refresh_rate = refresh_rate
        self._leave = leave
        self._console_kwargs = console_kwargs or {}
        self.theme = theme or RichProgressBarTheme()
        self.progress: Progress | None = None
        self._metric_component: MetricsTextColumn | None = None
        self._progress_stopped = False
        self._last_refresh = 0.0
        self._reset_progress_bar_ids()

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "progress": None, "_metric_component": None}  # a live display won't pickle

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0

    # ---- the tasks, as Lightning names them ---------------------------------------------------------------
    def _task(self, task_id: TaskID | None) -> Any:
        if self.progress is None or task_id is None:
            raise TypeError(f"{type(self).__name__}: that bar has not started yet.")
        return self.progress.tasks[task_id]

    @property
    def train_progress_bar(self) -> Any:
        return self._task(self.train_progress_bar_id)

    @property
    def val_sanity_check_bar(self) -> Any:
        return self._task(self.val_sanity_progress_bar_id)

    @property
    def val_progress_bar(self) -> Any:
        return self._task(self.val_progress_bar_id)

    @property
    def test_progress_bar(self) -> Any:
        return self._task(self.test_progress_bar_id)

    def _reset_progress_bar_ids(self) -> None:
        self.train_progress_bar_id: TaskID | None = None
        self.val_sanity_progress_bar_id: TaskID | None = None
        self.val_progress_bar_id: TaskID | None = None
        self.test_progress_bar_id: TaskID | None = None
        self.predict_progress_bar_id: TaskID | None = None

    # ---- the display -----------------------------------------------------------------------------------------
    def configure_columns(self, trainer: Trainer) -> list[Any]:
        """The columns of each bar, before the metrics column; override to lay the bar out your way."""
        from rich.progress import BarColumn, TextColumn

        from trainer.callbacks.progress.rich_columns import (
            BatchesProcessedColumn,
            CustomTimeColumn,
            ProcessingSpeedColumn,
        )

        theme = self.theme
        return [
            TextColumn("[progress.description]{task.description}"),
            BarColumn(
                complete_style=theme.progress_bar,
                finished_style=theme.progress_bar_finished,
                pulse_style=theme.progress_bar_pulse,
            ),
            BatchesProcessedColumn(style=theme.batch_progress),
            CustomTimeColumn(style=theme.time),
            ProcessingSpeedColumn(style=theme.processing_speed),
        ]

    def _init_progress(self, trainer: Trainer) -> None:
        """A live display, unless one is running (or the bar is off)."""
        if not self.is_enabled or (self.progress is not None and not self._progress_stopped):
            return
        from rich.console import Console
        from rich.progress import Progress

        from trainer.callbacks.progress.rich_columns import MetricsTextColumn

        self._reset_progress_bar_ids()
        theme = self.theme
        self._metric_component = MetricsTextColumn(theme.metrics, theme.metrics_text_delimiter, theme.metrics_format)
        # Redrawn from the hooks, at most refresh_rate times a second: no thread of rich's drawing beside training.
        self.progress = Progress(
            *self.configure_columns(trainer),
            self._metric_component,
            auto_refresh=False,
            console=Console(**self._console_kwargs),
        )
        self.progress.start()
        self._progress_stopped = False
        self._last_refresh = 0.0

    def _stop_progress(self) -> None:
        if self.progress is not None and not self._progress_stopped:
            self.progress.stop()  # draws the bars' last state
            self._progress_stopped = True

    def refresh(self, hard: bool = False) -> None:
        """Redraw: now with ``hard``, else when ``1 / refresh_rate`` seconds have passed since the last one."""
        if self.progress is None or self._progress_stopped:
            return
        now = time.monotonic()
        if hard or now - self._last_refresh >= 1 / max(self._refresh_rate, 1):
            self._last_refresh = now
            self.progress.refresh()

    def _add_task(self, total: int | float, description: str, visible: bool = True) -> TaskID:
        assert self.progress is not None
        desc = f"[{self.theme.description}]{description}" if self.theme.description else description
        return self.progress.add_task(desc, total=_finite(total), visible=visible)

    def _hide(self, task_id: TaskID | None) -> None:
        if self.progress is not None and task_id is not None:
            self.progress.update(task_id, advance=0, visible=False)
            self.refresh(hard=True)

    def _update(self, task_id: TaskID | None, current: int, visible: bool = True) -> None:
        if self.progress is not None and self.is_enabled and task_id is not None:
            self.progress.update(task_id, completed=current, visible=visible)

    def _update_metrics(self, trainer: Trainer, pl_module: Module) -> None:
        if self.is_enabled and self._metric_component is not None:
            self._metric_component.update(self.get_metrics(trainer, pl_module))

    def _get_train_description(self, current_epoch: int) -> str:
        """``Epoch 3/9``, padded to the width of the validation bar's description."""
        text = f"Epoch {current_epoch}"
        if self.trainer.max_epochs is not None:
            text += f"/{self.trainer.max_epochs - 1}"
        return f"{text:{len(self.validation_description)}}"

    # ---- the hooks -------------------------------------------------------------------------------------------
    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._init_progress(trainer)

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._hide(self.val_sanity_progress_bar_id)

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._init_progress(trainer)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        if self.is_disabled:
            return
        total, description = self.total_train_batches, self._get_train_description(trainer.current_epoch)
        if self.train_progress_bar_id is not None and self._leave:  # this epoch's bar below the last one's
            self._stop_progress()
            self._init_progress(trainer)
        if self.progress is None:
            return
        if self.train_progress_bar_id is None:
            self._start_train_bar(total, description)
        else:
            self.progress.reset(self.train_progress_bar_id, total=_finite(total), description=description, visible=True)

    def _start_train_bar(self, total: int | float, description: str) -> None:
        self.train_progress_bar_id = self._add_task(total, description)
        if self._metric_component is not None:
            self._metric_component.train_task = self.train_progress_bar_id

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.is_enabled and self.train_progress_bar_id is None and self.progress is not None:
            # resumed mid-epoch: on_train_epoch_start did not run for this epoch
            self._start_train_bar(self.total_train_batches, self._get_train_description(trainer.current_epoch))
        self._update(self.train_progress_bar_id, batch_idx + 1)
        self._update_metrics(trainer, pl_module)
        self.refresh()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._update_metrics(trainer, pl_module)
        self.refresh(hard=True)

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._init_progress(trainer)

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_disabled or self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        total = self.total_val_batches_current_dataloader
        if trainer.sanity_checking:
            self._hide(self.val_sanity_progress_bar_id)
            self.val_sanity_progress_bar_id = self._add_task(total, self.sanity_check_description, visible=False)
        else:
            self._hide(self.val_progress_bar_id)
            self.val_progress_bar_id = self._add_task(total, self.validation_description, visible=False)

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_enabled:
            task = self.val_sanity_progress_bar_id if trainer.sanity_checking else self.val_progress_bar_id
            self._update(task, batch_idx + 1)
            self.refresh()

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.is_enabled and trainer.state.fn == "fit":
            self._hide(self.val_progress_bar_id)  # the training bar goes on below it

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        if trainer.state.fn == "fit":
            self._update_metrics(trainer, pl_module)
            self.refresh(hard=True)
        self.reset_dataloader_idx_tracker()

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._init_progress(trainer)

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_disabled or self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        self._hide(self.test_progress_bar_id)
        self.test_progress_bar_id = self._add_task(self.total_test_batches_current_dataloader, self.test_description)

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_enabled:
            self._update(self.test_progress_bar_id, batch_idx + 1)
            self.refresh()

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.reset_dataloader_idx_tracker()

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._init_progress(trainer)

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_disabled or self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        self._hide(self.predict_progress_bar_id)
        total = self.total_predict_batches_current_dataloader
        self.predict_progress_bar_id = self._add_task(total, self.predict_description)

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_enabled:
            self._update(self.predict_progress_bar_id, batch_idx + 1)
            self.refresh()

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self.reset_dataloader_idx_tracker()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` above the live bars (through their console), else Python's ``print``."""
        if self.progress is None or self._progress_stopped or kwargs.get("file") is not None:
            print(*args, **kwargs)
            return
        self.progress.console.print(*args, sep=kwargs.get("sep", " "), end=kwargs.get("end", "\n"))

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        self._stop_progress()

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        self._stop_progress()


def _finite(total: int | float) -> float | None:
    """rich's total: None (a pulsing bar) for a loader without a length."""
    return None if math.isinf(total) or math.isnan(total) else total
