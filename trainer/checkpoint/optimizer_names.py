"""Optimizer states keyed by parameter name, the form FSDP checkpoints store.

``optimizer.state_dict()`` names a parameter by its position; FSDP's ``get_optimizer_state_dict``
by its name in the module. Converting between the two lets a checkpoint of either kind resume
under any strategy and world size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _names(module: nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}


def is_name_keyed(state: dict[str, Any]) -> bool:
    groups = state.get("param_groups", [])
    return any(isinstance(p, str) for g in groups for p in g.get("params", []))


def name_keyed_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> Any:
    """``optimizer.state_dict()``'s form (parameters by index) turned into parameters by name."""
    if is_name_keyed(state):
        return state
    return _rekey(optimizer, state, _names(module), by_name=True)


def index_keyed_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> Any:
    """A state keyed by parameter name (FSDP's) turned into ``optimizer.load_state_dict``'s form."""
    if not is_name_keyed(state):
        return state
    return _rekey(optimizer, state, _names(module), by_name=False)


def _rekey(optimizer: torch.optim.Optimizer, state: dict[str, Any], names: dict[int, str], by_name: bool) -> Any:
    """Saved group ``i`` is this optimizer's group ``i``; a parameter is found by its position (by index) or name."""
    saved_groups = state["param_groups"]
    if len(saved_groups) != len(optimizer.param_groups):
        raise ValueError(f"{len(saved_groups)} saved parameter groups, {len(optimizer.param_groups)} now")
    new_state: dict[Any, Any] = {}
    groups = []
    index = 0
    for saved, group in zip(saved_groups, optimizer.param_groups):
        keys: list[Any] = []
        for position, param in enumerate(group["params"]):
            name = names[id(param)]
            old = name if not by_name else saved["params"][position]
            new = name if by_name else index
            if old in state["state"]:
                new_state[new] = state["state"][old]
            keys.append(new)
            index += 1
        groups.append({**saved, "params": keys})
    return {"state": new_state, "param_groups": groups}
