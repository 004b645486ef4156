"""Lightning's import lines in steadytrain's names: the only edit a ported Lightning script gets.

Used by the tests that run Lightning users' scripts (tests/lightning_scripts, tests/lightning_style,
tests/cli_fixtures/lightning_script.py) and by benchmarks/lightning_tests.py, which ports Lightning's own
test files, so each port is the same mechanical rewrite. The table maps module paths, never single names:
a name a port cannot find fails at its import line, where the port says so.
"""

from __future__ import annotations

import re

# Lightning's names that steadytrain spells differently; the port imports ours under Lightning's name (the CLI reads
# Lightning's class paths in configs with the same table).
from trainer.lightning_paths import RENAMED

# Lightning's module -> the steadytrain module that holds its public names. A module not listed takes its
# nearest listed parent: ``lightning.pytorch.callbacks.early_stopping`` -> ``trainer.callbacks``.
MODULES = {
    "lightning": "trainer",  # ``import lightning as L``: L.LightningModule, L.Trainer, ...
    "lightning.pytorch": "trainer",
    "lightning.pytorch.accelerators": "trainer.accelerators",
    "lightning.pytorch.callbacks": "trainer.callbacks",
    "lightning.pytorch.callbacks.progress": "trainer.callbacks.progress",
    "lightning.pytorch.callbacks.progress.rich_progress": "trainer.callbacks.progress.rich_progress",
    "lightning.pytorch.callbacks.progress.tqdm_progress": "trainer.callbacks.progress.tqdm_progress",
    "lightning.pytorch.callbacks.rich_model_summary": "trainer.callbacks.rich_model_summary",
    "lightning.pytorch.cli": "trainer.cli",
    # where Lightning defines its top-level names: LightningModule in core, Trainer in trainer
    "lightning.pytorch.core": "trainer",
    "lightning.pytorch.core.module": "trainer.module",
    "lightning.pytorch.core.optimizer": "trainer.optim",
    "lightning.pytorch.core.datamodule": "trainer.datamodule",
    "lightning.pytorch.core.mixins": "trainer.hparams",
    "lightning.pytorch.core.saving": "trainer.saving",
    "lightning.pytorch.demos": "trainer.demos",
    "lightning.pytorch.loggers": "trainer.loggers",
    "lightning.pytorch.loops": "trainer.loops",
    "lightning.pytorch.plugins": "trainer.plugins",
    "lightning.pytorch.profilers": "trainer.profilers",
    "lightning.pytorch.strategies": "trainer.strategies",
    "lightning.pytorch.trainer": "trainer",
    "lightning.pytorch.trainer.trainer": "trainer.trainer",
    "lightning.pytorch.trainer.states": "trainer.states",
    "lightning.pytorch.tuner": "trainer.tuner",
    "lightning.pytorch.utilities": "trainer.utilities",
    "lightning.pytorch.utilities.data": "trainer.utilities.data",
    "lightning.pytorch.utilities.exceptions": "trainer.utilities.exceptions",
    # lightning.fabric's modules holding names a Lightning script uses with the Trainer; fabric's others stay its own
    "lightning.fabric.plugins.environments": "trainer.plugins.environments",
    "lightning.fabric.utilities.exceptions": "trainer.utilities.exceptions",
    "lightning.fabric.utilities.rank_zero": "trainer.utilities.rank_zero",
    "lightning.fabric.utilities.seed": "trainer.utilities.seed",
    "lightning.fabric.utilities.warnings": "trainer.utilities.warnings",
}

# Lightning's internal modules: the loops, the connectors that mutate its Trainer, its launchers and wrappers. A port
# never needs them; benchmarks/lightning_tests.py lends them from Lightning (``lend_private``), as the _private names.
INTERNAL_MODULES = (
    "lightning.pytorch.loops",
    "lightning.pytorch.overrides",
    "lightning.pytorch.strategies.launchers",
    "lightning.pytorch.trainer.call",
    "lightning.pytorch.trainer.configuration_validator",
    "lightning.pytorch.trainer.connectors",
)

_FROM = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<module>lightning(?:\.(?:pytorch|fabric)(?:\.\w+)*)?) import "
    r"(?:\((?P<group>[^)]*)\)|(?P<names>[^#\n]*?))(?P<tail>[ \t]*(?:#[^\n]*)?)$",
    re.MULTILINE,
)
_IMPORT_AS = re.compile(
    r"^(?P<indent>[ \t]*)import (?P<module>lightning(?:\.pytorch)?) as (?P<alias>\w+)", re.MULTILINE
)


def ported_module(module: str) -> str | None:
    """steadytrain's module for Lightning's ``module``; None outside ``lightning.pytorch`` (``lightning.fabric``'s
    modules other than the few listed)."""
    if module in MODULES:
        return MODULES[module]
    if not module.startswith("lightning.pytorch."):
        return None
    parts = module.split(".")
    while ".".join(parts) not in MODULES:
        parts.pop()
    return MODULES[".".join(parts)]


def _ported_name(name: str) -> str:
    """``LightningModule`` -> ``Module as LightningModule``; ``LightningModule as LM`` -> ``Module as LM``."""
    name, _, alias = (part.strip() for part in name.partition(" as "))
    if name in RENAMED:
        return f"{RENAMED[name]} as {alias or name}"
    return f"{name} as {alias}" if alias else name


def _port_from(match: re.Match[str], lend_private: bool) -> str:
    ours = ported_module(match["module"])
    if ours is None:
        return match[0]
    indent, tail = match["indent"], match["tail"]
    names = [n.strip() for n in (match["group"] or match["names"]).replace("\n", " ").split(",") if n.strip()]
    names = [n for n in names if not n.startswith("#")]
    internal = match["module"].startswith(INTERNAL_MODULES)
    private = [n for n in names if n.startswith("_") or internal] if lend_private else []
    public = [_ported_name(n) for n in names if n not in private]
    lines = []
    if public:
        lines.append(f"{indent}from {ours} import {', '.join(public)}")
    if private:  # Lightning's internals stay Lightning's: they are no part of the API a port needs
        lines.append(f"{indent}from {match['module']} import {', '.join(private)}")
    if match["group"] is not None and not private:  # a parenthesised list keeps its lines, so line numbers hold
        body = re.sub(r"\b(\w+)(?:\s+as\s+(\w+))?\b", lambda m: _ported_name(m[0]), match["group"])
        return f"{indent}from {ours} import ({body}){tail}"
    return "\n".join(lines) + tail


def port_source(source: str, lend_private: bool = False) -> str:
    """Every ``from lightning.pytorch[.x] import ...`` (parenthesised lists too) and ``import lightning[.pytorch]
    as L`` of ``source`` in steadytrain's names; every other line unchanged. ``lend_private`` keeps the
    ``_private`` names of an import line importing from Lightning (benchmarks/lightning_tests.py: a test file's
    use of Lightning's internals then fails only the tests that use them)."""
    source = _FROM.sub(lambda match: _port_from(match, lend_private), source)
    return _IMPORT_AS.sub(lambda m: f"{m['indent']}import trainer as {m['alias']}", source)


def port(line: str) -> str:
    """One line of a script, ported (see ``port_source``)."""
    return port_source(line)
