"""Shared pytest set-up. Keep each block separate and labelled by what it serves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist


# ---- markers: `cuda` tests skip where torch sees no CUDA device (slow: see addopts) ----------
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_cuda = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_cuda)


# ---- strategies / distributed: no process group outlives its test ----------------------------
@pytest.fixture(autouse=True)
def _destroy_process_group() -> Iterator[None]:
    yield
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
