"""The random generators of the user's own that a captured step may draw from.

A CUDA graph replays a random kernel with the generator's state read on the device, which torch
keeps in step for the device's default generator; a generator of the user's
(``self.gen = torch.Generator(device="cuda")`` and ``torch.randn(..., generator=self.gen)``) must be
registered with the graph before its capture. They are found where users keep them: as attributes of
the module and its submodules (directly, or in a list, tuple or dict there).
"""

from __future__ import annotations

from typing import Any

import torch


def find_generators(module: torch.nn.Module, device: torch.device) -> list[torch.Generator]:
    """The generators on ``device`` held by ``module`` and its submodules, each once."""
    found: dict[int, torch.Generator] = {}
    for sub in module.modules():
        for value in vars(sub).values():
            for item in _items(value):
                if isinstance(item, torch.Generator) and _on(item.device, device):
                    found.setdefault(id(item), item)
    return list(found.values())


def _items(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, dict):
        return list(value.values())
    return [value]


def _on(where: torch.device, device: torch.device) -> bool:
    return where.type == device.type and (where.index == device.index or None in (where.index, device.index))
