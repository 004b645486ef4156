"""What ``self.log`` gives across ranks, and which loggers each rank calls, as a Lightning user expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.loggers import CSVLogger, Logger
from trainer.metric_log import MetricLog
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


class _OwnLogger(Logger):
    """A user's logger with no ``@rank_zero_only``: Lightning calls it on every rank (all-rank logging)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, float]] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append(metrics)

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class _SpyCSV(CSVLogger):
    """steadytrain's CSV logger, subclassed: still one of ours, written by global rank zero only."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        raise AssertionError("a steadytrain logger was called on a rank other than zero")


class _RankOne:
    world_size, is_global_zero = 1, False


def test_a_users_own_logger_is_called_on_every_rank_ours_on_rank_zero_only(tmp_path: Path) -> None:
    own = _OwnLogger()
    log = MetricLog(_RankOne(), [_SpyCSV(tmp_path), own])  # type: ignore[arg-type]
    log.results.batch = torch.zeros(4, 1)
    log.results.log("rank-1", 1.0, on_step=False, on_epoch=True)
    log.epoch_end(epoch=0, step=1)
    log.flush_loggers()
    assert own.rows == [{"rank-1": 1.0, "epoch": 0}]
