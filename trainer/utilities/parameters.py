"""Lightning's ``utilities.parameter_tying``: which parameters a module shares between its layers (a tied
embedding and output layer), and tying them again after a copy or a load broke the tie."""

from __future__ import annotations

from torch import nn


def find_shared_parameters(module: nn.Module) -> list[list[str]]:
    """Each group of names that hold one parameter object (``[["encoder.weight", "decoder.weight"]]``)."""
    groups: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def set_shared_parameters(module: nn.Module, shared_params: list[list[str]]) -> nn.Module:
    """Make every name of each group hold the group's first parameter (what ``find_shared_parameters`` gave)."""
    for first, *others in shared_params:
        param = module.get_parameter(first)
        for name in others:
            owner, _, attr = name.rpartition(".")
            setattr(module.get_submodule(owner), attr, param)
    return module


__all__ = ["find_shared_parameters", "set_shared_parameters"]
