"""Optimizers a graph can capture, their learning rates on the device, and checkpoints left as they were.

A captured optimizer step must not read anything from the host. torch's Adam-family optimizers do
that with ``capturable=True`` (their step counters live on the device) and a learning rate given as a
device tensor; SGD has no ``capturable`` flag, but its fused kernel reads a device learning rate. So
the trainer turns those on (``make_capturable``) and keeps each group's learning rate as a device
tensor (``DeviceLearningRates``): the group itself keeps its float, which every LR scheduler, the
LearningRateMonitor and the checkpoint read and write as before; the tensor takes the float's value
before each step (one fill, only when it changed), and the optimizer sees the tensor only while a step
runs. A checkpoint holds the optimizer's own settings (``capturable``/``fused`` as the user made them,
step counters on the CPU where torch keeps them then), so it resumes with or without ``cuda_graph``.

Two things keep the captured step's arithmetic the eager step's:

- Decoupled weight decay (AdamW, and Adam/NAdam/RAdam with ``decoupled_weight_decay=True``) multiplies
  each parameter by ``1 - lr * weight_decay``, which the eager step computes in double precision from
  the group's floats and a device learning rate would compute in float32: for about one learning
  rate in a thousand (weight decay 0.01) the factor then rounds differently. So while a step runs,
  such a group's ``weight_decay`` is 0 and a step pre-hook multiplies its parameters by a float32
  device tensor filled from the factor computed on the host in double, as the eager step rounds it.
- Optimizer state is made before a capture for every parameter that trains (``create_missing_state``):
  state a graph creates would be created afresh, zeroed, at every replay.

Fused kernels (SGD's, which a capture needs, and Adam's with ``fused=True``) read a float32 learning
rate from the device where the eager step passes a double: they round ``lr`` to float32 once per
step, which docs/cuda-graphs.md bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

SETTINGS = ("capturable", "fused", "foreach")  # what make_capturable may change in a param group
# state a zero-gradient step changes from what torch makes before a parameter's first step, and its value then
FRESH: dict[str, dict[str, float | str]] = {
    "NAdam": {"mu_product": 1.0},
    "Adamax": {"exp_inf": 0.0},
    "ASGD": {"eta": "lr", "mu": 1.0, "ax": 0.0},
}


class LearningRates(Protocol):
    """How the groups' learning rates reach a step that may be captured."""

    assigned: int | None  # after ``installed``: a group whose learning rate the step assigned itself

    def installed(self) -> Any:
        """Context: the step runs with the device learning rates. A learning rate the step assigns itself
        (e.g. a warm-up in ``on_before_optimizer_step``) is kept, and its group named in ``assigned``: a
        captured step would keep its first value."""
        ...

    def refresh(self) -> None:
        """Before a replay: copy changed learning rates to the device."""
        ...


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Turn on what lets ``optimizer.step()`` be captured with a device learning rate, or refuse it by name."""
    name = type(optimizer).__name__
    if optimizer.defaults.get("differentiable"):
        raise ValueError(f"cuda_graph=True cannot capture {name}(differentiable=True); leave differentiable off.")
    if "capturable" in optimizer.defaults:
        changes: dict[str, Any] = {"capturable": True}
    elif isinstance(optimizer, torch.optim.SGD):
        changes = {"fused": True, "foreach": False}  # the fused kernel takes a device learning rate
        optimizer._step_supports_amp_scaling = True  # type: ignore[attr-defined]  # as SGD(fused=True) sets
        optimizer._need_device_dtype_check_for_fused = True  # type: ignore[attr-defined]
    else:
        raise ValueError(
            f"cuda_graph=True cannot capture {name}: its step reads values on the host. Capturable optimizers: "
            "Adam, AdamW, SGD, and torch's others with a `capturable` flag (NAdam, RAdam, Adamax, RMSprop, "
            "Adadelta, ASGD, Rprop). Use one of those, or leave cuda_graph=False."
        )
    original = [{key: group.get(key) for key in SETTINGS} for group in [optimizer.defaults, *optimizer.param_groups]]
    for group in [optimizer.defaults, *optimizer.param_groups]:
        group.update(changes)
    optimizer._warned_capturable_if_run_uncaptured = True  # type: ignore[attr-defined]  # warm-up steps are eager
    optimizer.register_state_dict_post_hook(_saved_as_made(original))
    optimizer.register_load_state_dict_pre_hook(_loaded_capturable(changes))


def _saved_as_made(original: list[dict[str, Any]]) -> Any:
    """A ``state_dict`` post-hook: the groups' settings as the user made them (``original[0]``: the defaults, for
    groups added later); on the CPU the step counters torch keeps there when neither capturable nor fused."""

    def hook(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        made = [*original[1:], *[original[0]] * len(state["param_groups"])]
        groups = [{**group, **made[i]} for i, group in enumerate(state["param_groups"])]
        host_steps = {
            index
            for group in groups
            if not group.get("capturable") and not group.get("fused")
            for index in group["params"]
        }
        packed = {
            index: _with_host_step(entry) if index in host_steps else entry for index, entry in state["state"].items()
        }
        return {**state, "param_groups": groups, "state": packed}

    return hook


def _with_host_step(entry: Any) -> Any:
    step = entry.get("step") if isinstance(entry, dict) else None
    if not isinstance(step, torch.Tensor) or step.device.type == "cpu":
        return entry
    return {**entry, "step": step.detach().to("cpu", torch.float32)}  # a new dict: the live state is untouched


def _loaded_capturable(changes: dict[str, Any]) -> Any:
    """A ``load_state_dict`` pre-hook: the loaded groups keep the capturable settings, so torch puts the
    step counters on the device as it does for a capturable optimizer."""

    def hook(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "param_groups": [{**group, **changes} for group in state["param_groups"]]}

    return hook


class DeviceLearningRates:
    """Each param group's learning rate as a float32 device tensor, filled from the group's float; for a group
    with decoupled weight decay, its factor ``1 - lr * weight_decay`` too (see the module docstring).

    A group whose learning rate is already a tensor on the device is left alone (torch's schedulers
    fill it in place); a CPU tensor is read like a float.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.optimizer = optimizer
        self.device = device
        self.tensors: list[torch.Tensor] = []
        self.values: list[float] = []  # what each tensor holds
        self.decays: list[torch.Tensor] = []  # each group's decoupled weight decay factor
        self.decay_values: list[float] = []
        self.decaying: list[int] = []  # while a step runs: the groups whose decay the pre-hook applies
        self.assigned: int | None = None
        optimizer.register_step_pre_hook(self._decay)

    def refresh(self) -> None:
        groups = self.optimizer.param_groups
        while len(self.tensors) < len(groups):
            self.tensors.append(torch.full((), math.nan, dtype=torch.float32, device=self.device))
            self.decays.append(torch.full((), math.nan, dtype=torch.float32, device=self.device))
            self.values.append(math.nan)
            self.decay_values.append(math.nan)
        for i, group in enumerate(groups):
            lr = _host_lr(group["lr"])
            if lr is None:
                continue
            if lr != self.values[i]:
                self.tensors[i].fill_(lr)
                self.values[i] = lr
            decay = 1 - lr * group["weight_decay"] if _decouples(self.optimizer, group) else math.nan
            if decay == decay and decay != self.decay_values[i]:  # the eager step's factor, in double
                self.decays[i].fill_(decay)
                self.decay_values[i] = decay

    @contextmanager
    def installed(self) -> Iterator[None]:
        self.refresh()
        groups = self.optimizer.param_groups
        owned = [_host_lr(g["lr"]) is not None for g in groups]
        before = [group["lr"] for group in groups]
        for group, tensor, ours in zip(groups, self.tensors, owned):
            if ours:
                group["lr"] = tensor
        self.decaying = [i for i, group in enumerate(groups) if owned[i] and _decouples(self.optimizer, group)]
        decay = [groups[i]["weight_decay"] for i in self.decaying]
        for i in self.decaying:
            groups[i]["weight_decay"] = 0.0  # the pre-hook decays instead
        self.assigned = None
        try:
            yield
        finally:
            for i, weight_decay in zip(self.decaying, decay):
                if groups[i]["weight_decay"] == 0.0:
                    groups[i]["weight_decay"] = weight_decay
            self.decaying = []
            for i, group in enumerate(groups):
                if not owned[i]:
                    continue
                if group["lr"] is self.tensors[i]:
                    group["lr"] = before[i]
                elif self.assigned is None:
                    self.assigned = i

    def _decay(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """A step pre-hook: what torch's step would do first, each parameter with a gradient times its factor."""
        for i in self.decaying:
            params = [p for p in optimizer.param_groups[i]["params"] if p.grad is not None]
            if params:
                with torch.no_grad():  # hooks run before the step's own no_grad
                    torch._foreach_mul_(params, self.decays[i])


def _host_lr(lr: Any) -> float | None:
    """A learning rate the trainer hands the device (a float, or a CPU tensor read like one); None for a device
    tensor of the user's own."""
    if isinstance(lr, torch.Tensor):
        return float(lr) if lr.device.type == "cpu" else None
    return float(lr)


def _decouples(optimizer: torch.optim.Optimizer, group: dict[str, Any]) -> bool:
    """Whether the group's step begins with ``param.mul_(1 - lr * weight_decay)`` on float32 parameters, which
    the trainer then does itself (fused kernels take the decay inside: left to them)."""
    decoupled = group.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW))
    return bool(
        decoupled
        and group.get("weight_decay")
        and not group.get("fused")
        and all(p.dtype == torch.float32 for p in group["params"])
    )


def create_missing_state(optimizer: torch.optim.Optimizer) -> str | None:
    """Before a capture: the optimizer's state, as torch makes it before a first step, for every parameter that
    trains and has none yet (no gradient in any step so far). Made by torch's own step (without its hooks) on
    zero gradients with no weight decay, the parameters put back, the counters as before a first step. Returns
    why it cannot be made exactly, or None."""
    missing = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad and not optimizer.state.get(p)]
    if not missing:
        return None
    name = type(optimizer).__name__
    step: Callable[[torch.optim.Optimizer], Any] | None = getattr(type(optimizer).step, "__wrapped__", None)
    damped = [g["dampening"] for g in optimizer.param_groups if g.get("momentum") and g.get("dampening")]
    if damped:
        return (
            f"{name}(dampening={damped[0]}) steps a parameter's first gradient without dampening, which a captured "
            f"step cannot do for the {len(missing)} parameter(s) with no gradient before the capture"
        )
    if step is None:
        return f"{name}.step is not torch's: its state cannot be made before the capture"
    _zero_gradient_step(optimizer, missing, step)
    lr = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    for p in missing:
        _as_before_a_first_step(optimizer.state[p], FRESH.get(name, {}), lr[id(p)])
    return None


def _zero_gradient_step(
    optimizer: torch.optim.Optimizer, missing: list[torch.Tensor], step: Callable[[torch.optim.Optimizer], Any]
) -> None:
    """``step`` on ``missing`` alone, with zero gradients and no weight decay; everything put back after."""
    grads = {p: p.grad for g in optimizer.param_groups for p in g["params"]}
    values = [p.detach().clone() for p in missing]
    decay = [g.get("weight_decay") for g in optimizer.param_groups]
    try:
        for p in grads:
            p.grad = None
        for p in missing:
            p.grad = torch.zeros_like(p)
        for group in optimizer.param_groups:
            if "weight_decay" in group:
                group["weight_decay"] = 0.0
        step(optimizer)
    finally:
        for group, weight_decay in zip(optimizer.param_groups, decay):
            if "weight_decay" in group:
                group["weight_decay"] = weight_decay
        with torch.no_grad():
            for p, value in zip(missing, values):
                p.copy_(value)
        for p, grad in grads.items():
            p.grad = grad


def _as_before_a_first_step(state: dict[str, Any], fresh: dict[str, float | str], lr: Any) -> None:
    for key, value in state.items():
        named = 0.0 if key == "step" else fresh.get(key)
        if named is None:
            continue
        start = float(lr) if named == "lr" else float(named)
        if isinstance(value, torch.Tensor):
            value.fill_(start)
        else:
            state[key] = type(value)(start)


class HostLearningRates:
    """Learning rates left where they are (a backend whose optimizer step reads them on the host)."""

    assigned: int | None = None

    def refresh(self) -> None:
        pass

    @contextmanager
    def installed(self) -> Iterator[None]:
        yield
