"""``ModelSummary``: the table of layers Lightning prints when fit starts, and ``summarize`` that builds it.

``summarize(module, max_depth)`` is usable on its own (``print(summarize(model))``); the callback
calls it on global rank zero with the module's ``example_input_array`` moved the way a batch is.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

UNKNOWN = "?"  # a shape that was not seen (layer not called, or input of another kind)
SummaryData = list[tuple[str, list[str]]]  # (column header, its values), Lightning's ``summary_data``
_UNITS = (" ", "K", "M", "B", "T")


def human_count(number: float) -> str:
    """``123  ``, ``1.2 K``, ``2.0 M``, ``400 T``: Lightning's abbreviation of parameter and FLOP counts."""
    digits = int(math.floor(math.log10(number)) + 1) if number > 0 else 1
    groups = min(math.ceil(digits / 3), len(_UNITS))
    scaled = number * 10 ** (-3 * (groups - 1))
    if groups == 1 or scaled >= 100:
        return f"{int(scaled):,d} {_UNITS[groups - 1]}"
    return f"{scaled:,.1f} {_UNITS[groups - 1]}"


def _shape(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value]
    return UNKNOWN


def _count(params: Iterator[nn.Parameter]) -> int:
    """Elements of initialised parameters (a lazy layer's are unknown until its first forward)."""
    return sum(p.numel() for p in params if not isinstance(p, nn.parameter.UninitializedParameter))


@dataclass
class LayerRow:
    """One layer of the table."""

    name: str
    type: str
    params: int
    training: bool
    flops: int = 0
    in_size: Any = UNKNOWN
    out_size: Any = UNKNOWN


@dataclass
class Summary:
    """What the table shows; ``str(summary)`` is the table."""

    rows: list[LayerRow]
    total_params: int
    trainable_params: int
    size_mb: float  # the parameters' bytes (their real dtypes) in MB
    modes: dict[str, int]  # submodules in "train" and in "eval" mode
    total_flops: int = 0
    shapes: bool = False  # an example input ran: the in/out size columns are shown
    other_params: int = 0  # parameters outside the listed layers (e.g. on the root module)

    def __str__(self) -> str:
        return format_table(
            self._columns(), self.total_params, self.trainable_params, self.size_mb, self.modes, self.total_flops
        )

    def _columns(self) -> list[tuple[str, list[str]]]:
        rows = self.rows
        columns = [
            (" ", [str(i) for i in range(len(rows))]),
            ("Name", [r.name for r in rows]),
            ("Type", [r.type for r in rows]),
            ("Params", [human_count(r.params) for r in rows]),
            ("Mode", ["train" if r.training else "eval" for r in rows]),
            ("FLOPs", [human_count(r.flops) for r in rows]),
        ]
        if self.shapes:
            columns += [("In sizes", [str(r.in_size) for r in rows]), ("Out sizes", [str(r.out_size) for r in rows])]
        if self.other_params:  # Lightning's extra row: parameters no listed layer owns
            extra = {" ": " ", "Name": "other params", "Params": human_count(self.other_params)}
            columns = [(head, [*values, extra.get(head, "n/a")]) for head, values in columns]
        return columns


def format_table(
    summary_data: SummaryData,
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
    total_training_modes: dict[str, int],
    total_flops: int = 0,
) -> str:
    """The plain-text table of ``ModelSummary.summarize``'s arguments: the columns, then the totals."""
    widths = [max([len(head), *map(len, values)]) for head, values in summary_data]
    line = " | ".join(head.ljust(w) for (head, _), w in zip(summary_data, widths))
    rule = "-" * len(line)
    height = max((len(values) for _, values in summary_data), default=0)
    body = [
        " | ".join(values[i].ljust(w) for (_, values), w in zip(summary_data, widths)).rstrip() for i in range(height)
    ]
    totals = [
        (human_count(trainable_parameters), "Trainable params"),
        (human_count(total_parameters - trainable_parameters), "Non-trainable params"),
        (human_count(total_parameters), "Total params"),
        (f"{model_size:,.3f}", "Total estimated model params size (MB)"),
        (str(total_training_modes["train"]), "Modules in train mode"),
        (str(total_training_modes["eval"]), "Modules in eval mode"),
        (human_count(total_flops), "Total Flops"),
    ]
    return "\n".join([line.rstrip(), rule, *body, rule, *(f"{value:<10}{what}" for value, what in totals)])


def _layers(module: nn.Module, max_depth: int) -> list[tuple[str, nn.Module]]:
    """The submodules shown: none for 0, the children for 1, every one for -1, else down to that depth."""
    if max_depth == 0:
        return []
    if max_depth == 1:
        return list(module.named_children())
    layers = list(module.named_modules())[1:]
    return layers if max_depth < 0 else [(n, m) for n, m in layers if n.count(".") < max_depth]


@contextlib.contextmanager
def _recording_shapes(rows: dict[str, LayerRow], layers: list[tuple[str, nn.Module]]) -> Iterator[None]:
    """Record each layer's first input and output shapes during the block."""

    def hook_for(row: LayerRow) -> Any:
        def hook(layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            if row.in_size == UNKNOWN:
                inputs = (*args, *kwargs.values())
                row.in_size = _shape(inputs[0] if len(inputs) == 1 else inputs)
                row.out_size = _shape(output)

        return hook

    handles = [
        layer.register_forward_hook(hook_for(rows[name]), with_kwargs=True)
        for name, layer in layers
        if not isinstance(layer, torch.jit.ScriptModule)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _run_example(module: nn.Module, example: Any, counter: FlopCounterMode) -> None:
    """One forward in eval mode without gradients; every submodule's mode is put back after."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        with torch.no_grad(), counter:
            if isinstance(example, list | tuple):
                module(*example)
            elif isinstance(example, dict):
                module(**example)
            else:
                module(example)
    finally:
        for m, training in modes.items():
            m.training = training


def summarize(module: nn.Module, max_depth: int = 1, example_input: Any = None) -> Summary:
    """Summarize ``module``'s layers down to ``max_depth`` (-1: all, 0: totals only).

    With an ``example_input`` (by default the module's ``example_input_array``, moved to its
    parameters' device) one forward pass fills in the shapes and FLOPs; it is passed as
    ``module(*x)`` for a list or tuple, ``module(**x)`` for a dict, else ``module(x)``.
    """
    if not isinstance(max_depth, int) or max_depth < -1:
        raise MisconfigurationException(f"max_depth={max_depth!r}: use -1 (every layer), 0 (none) or a depth >= 1.")
    if example_input is None:
        example_input = _module_example(module)
    layers = _layers(module, max_depth)
    rows = {name: LayerRow(name, type(m).__name__, _count(m.parameters()), m.training) for name, m in layers}
    summary = Summary(
        rows=list(rows.values()),
        total_params=_count(module.parameters()),
        trainable_params=_count(p for p in module.parameters() if p.requires_grad),
        size_mb=sum(p.numel() * p.element_size() for p in module.parameters()) * 1e-6,
        modes=_modes(module),
    )
    listed = {id(p) for _, layer in layers for p in layer.parameters()}
    summary.other_params = _count(p for p in module.parameters() if id(p) not in listed)
    if example_input is not None:
        _measure(module, example_input, rows, layers, summary)
    return summary


def _module_example(module: nn.Module) -> Any:
    example = getattr(module, "example_input_array", None)
    if example is None:
        return None
    from trainer.move import move_to_device

    param = next(module.parameters(), None)
    return move_to_device(example, param.device) if param is not None else example


def _modes(module: nn.Module) -> dict[str, int]:
    flags = [m.training for m in list(module.modules())[1:]]
    return {"train": flags.count(True), "eval": flags.count(False)}


def _measure(
    module: nn.Module, example: Any, rows: dict[str, LayerRow], layers: list[tuple[str, nn.Module]], summary: Summary
) -> None:
    counter = FlopCounterMode(display=False)
    with _recording_shapes(rows, layers):
        _run_example(module, example, counter)
    per_module = counter.get_flop_counts()
    prefix = type(module).__name__
    for name, row in rows.items():
        row.flops = sum(per_module.get(f"{prefix}.{name}", {}).values())
    summary.total_flops = counter.get_total_flops()
    summary.shapes = True


class ModelSummary(Callback):
    """Print the layer table (``summarize``) when fit starts, on global rank zero.

    ``max_depth=0`` prints nothing. ``summarize_kwargs`` is accepted as Lightning accepts it (for
    subclasses that render the table differently) and otherwise unused.
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if not isinstance(max_depth, int) or max_depth < -1:
            raise MisconfigurationException(
                f"ModelSummary(max_depth={max_depth!r}): use -1 (every layer), 0 (off) or a depth >= 1."
            )
        self._max_depth = max_depth
        self._summarize_kwargs = summarize_kwargs

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        if not self._max_depth or not trainer.is_global_zero:
            return
        example = _example_as_batch(trainer, pl_module)
        if example is None:
            summary = summarize(pl_module, self._max_depth)
        else:  # the random streams stay as they were: rank zero's must not drift from the others'
            devices = [trainer.strategy.root_device] if trainer.strategy.root_device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), trainer.precision_plugin.forward_context():
                summary = summarize(pl_module, self._max_depth, example)
        self.summarize(
            summary._columns(),
            summary.total_params,
            summary.trainable_params,
            summary.size_mb,
            summary.modes,
            total_flops=summary.total_flops,
            **self._summarize_kwargs,
        )

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
        """Show the table; override to render it elsewhere (Lightning's arguments: the columns as
        ``(header, values)`` pairs, the parameter counts, the size in MB, the submodules per mode)."""
        print(
            format_table(
                summary_data, total_parameters, trainable_parameters, model_size, total_training_modes, total_flops
            ),
            flush=True,
        )


def _example_as_batch(trainer: Trainer, pl_module: Module) -> Any:
    """``example_input_array`` through the batch transfer hooks, as Lightning moves it."""
    example = getattr(pl_module, "example_input_array", None)
    if example is None:
        return None
    from trainer.data.device import transfer

    move = transfer(trainer)
    return move(example) if move is not None else example
