"""The single-device strategy: the do-nothing default of every seam the loops call per batch."""

from __future__ import annotations

import collections

import torch

from tests.models import Regressor
from trainer.strategies import SingleDeviceStrategy

Pair = collections.namedtuple("Pair", ["x", "y"])


def test_step_function_is_the_modules_own_step() -> None:
    module = Regressor()
    strategy = SingleDeviceStrategy()
    strategy.setup_module(module)
    assert strategy.step_function("training") == module.training_step  # no extra frame per batch
    assert strategy.step_function("validation") == module.validation_step


def test_batches_are_left_alone_on_cpu_and_moved_elsewhere() -> None:
    assert SingleDeviceStrategy("cpu").batch_mover() is None
    mover = SingleDeviceStrategy("meta").batch_mover()  # a device every machine has
    assert mover is not None
    moved = mover({"pair": Pair(torch.ones(2), [torch.zeros(3)]), "name": "b"})
    assert moved["pair"].x.device.type == "meta" and moved["pair"].y[0].device.type == "meta"
    assert isinstance(moved["pair"], Pair) and moved["name"] == "b"


def test_collectives_return_their_input() -> None:
    strategy = SingleDeviceStrategy()
    value = torch.tensor([1.0, 2.0])
    assert strategy.all_reduce(value, "sum") is value
    assert strategy.all_gather(value).shape == (1, 2)
    assert strategy.reduce_boolean_decision(True) and not strategy.reduce_boolean_decision(False)
    with strategy.no_sync():
        pass
