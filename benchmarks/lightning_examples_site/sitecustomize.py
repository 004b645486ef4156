"""Stand-ins for Lightning's example scripts (benchmarks/lightning_examples.py), the same on both sides, then
the parity recorder (tests/lightning_parity_site/sitecustomize.py).

``EXAMPLE_TRAINER_OVERRIDES`` (JSON): Trainer arguments forced on every ``Trainer(...)``, for an example that
hard-codes ``accelerator="gpu"`` or has no flag to keep it short. ``EXAMPLE_CIFAR10_STANDIN=1``: torchvision's
CIFAR10 takes the synthetic batches (it checks their md5 sums against the real ones otherwise).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Any


def _force_trainer_arguments(overrides: dict[str, Any]) -> None:
    if os.environ.get("PARITY_FRAMEWORK") == "lightning":
        from lightning.pytorch import Trainer
    else:
        from trainer import Trainer
    init = Trainer.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, **overrides})

    Trainer.__init__ = __init__  # type: ignore[method-assign]


def _cifar10_standin() -> None:
    from torchvision.datasets import CIFAR10

    CIFAR10._check_integrity = lambda self: True  # type: ignore[method-assign]


if os.environ.get("PARITY_FRAMEWORK"):
    if os.environ.get("EXAMPLE_CIFAR10_STANDIN"):
        _cifar10_standin()
    if overrides := json.loads(os.environ.get("EXAMPLE_TRAINER_OVERRIDES", "{}")):
        _force_trainer_arguments(overrides)
    _path = Path(__file__).resolve().parents[2] / "tests" / "lightning_parity_site" / "sitecustomize.py"
    _spec = importlib.util.spec_from_file_location("parity_sitecustomize", _path)
    assert _spec is not None and _spec.loader is not None
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
