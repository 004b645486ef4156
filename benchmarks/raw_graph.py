"""The hand-written whole-step CUDA graph of PyTorch's CUDA graphs guide ("whole network capture"), the anchor
``Trainer(cuda_graph=True)`` is measured against in ``benchmarks/gpu_step.py``.

The guide's recipe: a ``capturable`` optimizer, three warm-up steps on a side stream, gradients set to
None before the capture (so backward allocates them from the graph's pool), forward, backward and
optimizer step captured once, then per batch a copy into the static inputs and one ``replay()``.
The warm-up steps here train on the first batches (as the trainer's do); no logging, no hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch
from torch import nn

WARM_UP = 3


def run_graph(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[..., torch.Tensor],
    dtype: torch.dtype | None,
    steady_from: int,
) -> tuple[float, float]:
    """Train over ``loader`` with the captured step: (whole run, steps from ``steady_from`` on) in seconds."""
    batches = iter(loader)
    first_x, first_y = next(batches)
    static_x, static_y = first_x.clone(), first_y.clone()

    def step() -> torch.Tensor:
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(static_x), static_y)
        loss.backward()
        optimizer.step()
        return loss

    model.train()
    current, side = torch.cuda.current_stream(), torch.cuda.Stream()
    graph: torch.cuda.CUDAGraph | None = None
    torch.cuda.synchronize()
    start = steady = time.perf_counter()
    for i, (x, y) in enumerate(_chain(first_x, first_y, batches)):
        if i == steady_from:
            torch.cuda.synchronize()
            steady = time.perf_counter()
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        if i < WARM_UP:
            side.wait_stream(current)
            with torch.cuda.stream(side):
                optimizer.zero_grad(set_to_none=True)
                step()
            current.wait_stream(side)
        elif graph is None:
            graph = torch.cuda.CUDAGraph()
            optimizer.zero_grad(set_to_none=True)  # backward then allocates the gradients from the graph's pool
            with torch.cuda.graph(graph):
                step()
            graph.replay()
        else:
            graph.replay()
    torch.cuda.synchronize()
    end = time.perf_counter()
    return end - start, end - steady


def _chain(
    x: torch.Tensor, y: torch.Tensor, rest: Iterable[tuple[torch.Tensor, torch.Tensor]]
) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    yield x, y
    yield from rest
