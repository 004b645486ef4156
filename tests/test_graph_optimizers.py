"""The optimizer under ``cuda_graph=True``, on the CPU: its state made before a capture for every parameter that
trains (as torch would make it before a first step), and decoupled weight decay computed as the eager step rounds
it. ``tests/test_cuda_graph_safety.py`` checks the captured step against the eager one on a GPU."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from trainer.graphs.optimizers import DeviceLearningRates, create_missing_state

SPECS: list[tuple[str, dict[str, Any]]] = [
    ("Adam", dict(weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(weight_decay=0.1)),
    ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(weight_decay=0.1)),
    ("Adamax", dict(weight_decay=0.1)),
    ("RMSprop", dict(momentum=0.9, centered=True, weight_decay=0.1)),
    ("Adadelta", dict(weight_decay=0.1)),
    ("ASGD", dict(weight_decay=0.1)),
    ("Rprop", dict()),
    ("SGD", dict(momentum=0.9, weight_decay=0.1, nesterov=True)),
]


def twins(name: str, **kwargs: Any) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter], Any, Any]:
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    make = getattr(torch.optim, name)
    return a, b, make(a, lr=0.01, **kwargs), make(b, lr=0.01, **kwargs)


@pytest.mark.parametrize(("spec", "foreach"), itertools.product(SPECS, (False, True)), ids=str)
def test_state_made_before_a_first_step_steps_as_torchs_own(spec: tuple[str, dict[str, Any]], foreach: bool) -> None:
    """Made ahead (as before a capture), then stepped: bitwise what a fresh optimizer's own first steps give."""
    name, kwargs = spec
    fresh_params, made_params, fresh, made = twins(name, foreach=foreach, **kwargs)
    assert create_missing_state(made) is None
    assert all(made.state[p] for p in made_params)  # made, for parameters with no gradient yet
    assert all(torch.equal(x, y) for x, y in zip(fresh_params, made_params))  # and the parameters untouched
    for _ in range(3):
        for x, y in zip(fresh_params, made_params):
            x.grad = torch.randn_like(x)
            y.grad = x.grad.clone()
        fresh.step()
        made.step()
    assert all(torch.equal(x, y) for x, y in zip(fresh_params, made_params)), name
    for x, y in zip(fresh_params, made_params):
        assert {k: torch.as_tensor(v).tolist() for k, v in fresh.state[x].items()} == {
            k: torch.as_tensor(v).tolist() for k, v in made.state[y].items()
        }


def test_state_that_cannot_be_made_ahead_is_named_and_made_state_is_kept() -> None:
    _, params, _, damped = twins("SGD", momentum=0.9, dampening=0.1)
    assert "SGD(dampening=0.1) steps a parameter's first gradient without dampening" in (
        create_missing_state(damped) or ""
    )
    _, params, _, adam = twins("Adam")
    params[0].grad = torch.ones_like(params[0])
    adam.step()
    kept = adam.state[params[0]]["exp_avg"].clone()
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    adam.add_param_group({"params": [frozen]})
    assert create_missing_state(adam) is None
    assert torch.equal(adam.state[params[0]]["exp_avg"], kept) and params[1] in adam.state
    assert frozen not in adam.state  # only what trains


# ---- decoupled weight decay: 1 - lr * weight_decay as the eager step rounds it -----------------------------
LR, DECAY = 0.01286, 0.1  # float32(1 - LR * DECAY) in double != 1 - float32(LR) * DECAY in float32


def test_decoupled_weight_decay_with_a_device_learning_rate_rounds_as_the_eager_step() -> None:
    """torch's single-tensor step (its foreach step takes a tensor learning rate only when capturable, on a GPU)."""
    assert torch.tensor(1 - LR * DECAY, dtype=torch.float32) != 1 - torch.tensor(LR, dtype=torch.float32) * DECAY
    torch.manual_seed(0)
    eager_params = [torch.nn.Parameter(torch.randn(64, 64)), torch.nn.Parameter(torch.randn(64))]
    device_params = [torch.nn.Parameter(p.detach().clone()) for p in eager_params]
    unused = torch.nn.Parameter(torch.randn(4))  # no gradient: torch does not decay it
    eager = torch.optim.AdamW(eager_params, lr=LR, weight_decay=DECAY, foreach=False)
    device = torch.optim.AdamW([*device_params, unused], lr=LR, weight_decay=DECAY, foreach=False)
    rates = DeviceLearningRates(device, torch.device("cpu"))
    before = unused.detach().clone()
    for p in [*eager_params, *device_params]:
        p.grad = torch.zeros_like(p)  # the step is the decay alone
    eager.step()
    with rates.installed():
        assert device.param_groups[0]["lr"] is rates.tensors[0]
        device.step()
    assert all(torch.equal(x, y) for x, y in zip(eager_params, device_params))
    assert torch.equal(unused, before)
    assert device.param_groups[0]["weight_decay"] == DECAY and device.param_groups[0]["lr"] == LR  # as made
