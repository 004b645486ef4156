"""What ``self.log(..., sync_dist=True)`` gives across ranks, as a Lightning user expects it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trainer.results import Results


class _TwoRanks:
    """A stand-in strategy for two ranks whose other rank logged the same values as this one."""

    world_size, is_global_zero = 2, True

    def __init__(self) -> None:
        self.ops: list[str] = []

    def gather_objects(self, obj: Any) -> list[Any]:
        return [obj, obj]

    def all_reduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        self.ops.append(op)
        return tensor * 2 if op == "sum" else tensor


@pytest.mark.parametrize(("fx", "expected"), [("sum", 6.0), ("mean", 3.0), ("max", 3.0), ("min", 3.0)])
def test_a_synced_step_value_is_reduced_with_its_reduce_fx(fx: str, expected: float) -> None:
    """Lightning reduces a ``sync_dist`` step value with its ``reduce_fx``: a per-step count summed over ranks."""
    results = Results("train")
    results.batch = torch.zeros(4, 1)
    results.log("seen", 3.0, on_step=True, on_epoch=False, sync_dist=True, reduce_fx=fx)
    results.log("own", 3.0, on_step=True, on_epoch=False, reduce_fx="sum")
    strategy = _TwoRanks()
    values = results.pop_step_metrics(strategy)  # type: ignore[arg-type]
    assert float(values["seen"]) == expected and float(values["own"]) == 3.0
    assert strategy.ops == [fx]  # one collective, for the synced value only
