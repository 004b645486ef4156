"""Lightning's class paths in a config or on a command line (``class_path: lightning.pytorch.callbacks.EarlyStopping``,
``--trainer.logger lightning.pytorch.loggers.CSVLogger``) read as steadytrain's, so a LightningCLI project's YAML
files port unchanged, as its Python does by its import lines.

steadytrain's packages mirror Lightning's (``callbacks``, ``loggers``, ``strategies``, ``profilers``, ``cli``, ...):
``lightning.pytorch.a.b.Name`` (or ``lightning.fabric.a.b.Name``: Fabric's cluster environments and plug-ins) is
``Name`` in the nearest of ``trainer.a.b``, ``trainer.a``, ``trainer`` that has it; a path none has is left as
written, for jsonargparse to name.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

# Lightning's names that steadytrain spells differently (the port of import lines uses this table too).
RENAMED = {
    "LightningModule": "Module",
    "LightningDataModule": "DataModule",
    "LightningCLI": "CLI",
    "LightningArgumentParser": "ArgumentParser",
}
_PACKAGES = r"(?:lightning\.pytorch|lightning\.fabric|pytorch_lightning|lightning_fabric)"
_PATH = re.compile(rf"\b{_PACKAGES}((?:\.[a-z_]\w*)*)\.([A-Z]\w*)\b")


def ported_class_path(match: re.Match[str]) -> str:
    parts = [part for part in match[1].split(".") if part]
    name = RENAMED.get(match[2], match[2])
    while True:
        module = ".".join(["trainer", *parts])
        try:
            if hasattr(importlib.import_module(module), name):
                return f"{module}.{name}"
        except ImportError:
            pass
        if not parts:
            return match[0]
        parts.pop()


def port_class_paths(text: str) -> str:
    """``text`` (a YAML or JSON config, or one argument) with each Lightning class path replaced by ours."""
    if "lightning" not in text:
        return text
    return _PATH.sub(ported_class_path, text)


def port_class_paths_in(value: Any) -> Any:
    """``value`` (a config as dicts and lists, e.g. ``trainer_defaults``) with Lightning's class paths as ours."""
    if isinstance(value, str):
        return port_class_paths(value)
    if isinstance(value, dict):
        return {k: port_class_paths_in(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(port_class_paths_in(v) for v in value)
    return value
