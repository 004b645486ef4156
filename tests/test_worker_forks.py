"""Workers are forked after a short GIL-free pause when a process group exists (CPython gh-112275)."""

from __future__ import annotations

import types

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import worker_forks
from trainer.signals import start_iterator


@pytest.mark.parametrize("group", [True, False], ids=["process-group", "single-process"])
def test_workers_are_forked_after_a_pause_only_where_a_process_group_runs(
    monkeypatch: pytest.MonkeyPatch, group: bool
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(worker_forks, "time", types.SimpleNamespace(sleep=pauses.append))
    monkeypatch.setattr(worker_forks, "process_group_running", lambda: group)
    loader = DataLoader(TensorDataset(torch.arange(32.0)), batch_size=16, num_workers=1)
    assert len(list(start_iterator(loader))) == 2
    assert pauses == ([worker_forks.GRACE_S] if group else [])


def test_a_loader_without_workers_forks_nothing_and_never_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(worker_forks, "time", types.SimpleNamespace(sleep=pauses.append))
    monkeypatch.setattr(worker_forks, "process_group_running", lambda: True)
    assert len(list(start_iterator(DataLoader(TensorDataset(torch.arange(32.0)), batch_size=16)))) == 2
    assert pauses == []


def test_no_process_group_here_means_no_pause() -> None:
    assert worker_forks.process_group_running() is torch.distributed.is_initialized()
