"""``RichModelSummary``: ``ModelSummary``'s table printed as a ``rich`` table (what a ``RichProgressBar`` run gets)."""

from __future__ import annotations

import importlib.util
from typing import Any, Literal

from trainer.callbacks.model_summary import ModelSummary, SummaryData, human_count

_RICH_AVAILABLE = importlib.util.find_spec("rich") is not None
_RIGHT = ("Params", "Params per Device", "FLOPs", "In sizes", "Out sizes")


class RichModelSummary(ModelSummary):
    """The layer table in rich text; ``header_style`` (a ``summarize_kwargs`` key, "bold magenta" by default)
    styles its header. Needs ``rich`` (``pip install -U rich``)."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if not _RICH_AVAILABLE:
            raise ModuleNotFoundError(
                "`RichModelSummary` requires `rich` to be installed. Install it by running `pip install -U rich`."
            )
        super().__init__(max_depth, **summarize_kwargs)

    @staticmethod
    def summarize(
        summary_data: SummaryData,
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        """Print the table and the totals (``ModelSummary.summarize``'s arguments)."""
        from rich import get_console
        from rich.table import Table

        modes = total_training_modes
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in summary_data:
            style = "dim" if name == " " else "white" if name in ("In sizes", "Out sizes") else None
            justify: Literal["left", "right"] = "right" if name in _RIGHT else "left"
            table.add_column(name, justify=justify, style=style, no_wrap=name == "Name")
        for row in zip(*(values for _, values in summary_data)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        grid = Table.grid(expand=True)
        grid.add_column()
        grid.add_column()
        for label, value in (
            ("Trainable params", human_count(trainable_parameters)),
            ("Non-trainable params", human_count(total_parameters - trainable_parameters)),
            ("Total params", human_count(total_parameters)),
            ("Total estimated model params size (MB)", f"{model_size:,.3f}"),
            ("Modules in train mode", modes["train"]),
            ("Modules in eval mode", modes["eval"]),
            ("Total FLOPs", human_count(total_flops)),
        ):
            grid.add_row(f"[bold]{label}[/]: {value:<10}" if isinstance(value, str) else f"[bold]{label}[/]: {value}")
        console.print(grid)
