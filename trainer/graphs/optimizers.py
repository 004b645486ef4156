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
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

SETTINGS = ("capturable", "fused", "foreach")  # what make_capturable may change in a param group


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
    """Each param group's learning rate as a float32 device tensor, filled from the group's float.

    A group whose learning rate is already a tensor on the device is left alone (torch's schedulers
    fill it in place); a CPU tensor is read like a float.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.optimizer = optimizer
        self.device = device
        self.tensors: list[torch.Tensor] = []
        self.values: list[float] = []  # what each tensor holds
        self.assigned: int | None = None

    def refresh(self) -> None:
        groups = self.optimizer.param_groups
        while len(self.tensors) < len(groups):
            self.tensors.append(torch.full((), math.nan, dtype=torch.float32, device=self.device))
            self.values.append(math.nan)
        for i, group in enumerate(groups):
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):
                if lr.device.type != "cpu":
                    continue
                lr = float(lr)
            if lr != self.values[i]:
                self.tensors[i].fill_(lr)
                self.values[i] = lr

    @contextmanager
    def installed(self) -> Iterator[None]:
        self.refresh()
        groups = self.optimizer.param_groups
        owned = [not (isinstance(g["lr"], torch.Tensor) and g["lr"].device.type != "cpu") for g in groups]
        before = [group["lr"] for group in groups]
        for group, tensor, ours in zip(groups, self.tensors, owned):
            if ours:
                group["lr"] = tensor
        self.assigned = None
        try:
            yield
        finally:
            for i, group in enumerate(groups):
                if not owned[i]:
                    continue
                if group["lr"] is self.tensors[i]:
                    group["lr"] = before[i]
                elif self.assigned is None:
                    self.assigned = i


class HostLearningRates:
    """Learning rates left where they are (a backend whose optimizer step reads them on the host)."""

    assigned: int | None = None

    def refresh(self) -> None:
        pass

    @contextmanager
    def installed(self) -> Iterator[None]:
        yield
