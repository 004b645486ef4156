"""The single-device strategy: the do-nothing default of every seam the loops call per batch."""

from __future__ import annotations

import collections

import pytest
import torch

from tests.models import Regressor, regression_data
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


def grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


def test_no_sync_leaves_gradients_to_accumulate_as_usual() -> None:
    """One device has nothing to sync: an accumulation micro-batch's backward inside ``no_sync`` must add to
    ``.grad`` exactly as a plain backward does, or accumulate_grad_batches would train differently."""
    module = Regressor()
    strategy = SingleDeviceStrategy()
    strategy.setup_module(module)
    x, y = regression_data(8)[:]

    def backward() -> None:
        torch.nn.functional.mse_loss(module.net(x), y).backward()

    backward()
    once = grads(module)
    module.zero_grad()
    with strategy.no_sync():
        backward()
    assert len(once) == 4 and all(torch.equal(a, b) for a, b in zip(grads(module), once, strict=True))
    backward()  # the step that closes the window adds onto what no_sync left
    assert all(torch.equal(a, 2 * b) for a, b in zip(grads(module), once, strict=True))


def test_no_sync_lets_errors_through() -> None:
    """A failing micro-batch inside ``no_sync`` must still stop the run."""
    with pytest.raises(RuntimeError, match="bad micro-batch"), SingleDeviceStrategy().no_sync():
        raise RuntimeError("bad micro-batch")
