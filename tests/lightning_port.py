"""One Lightning import line in steadytrain's names: the only edit a ported Lightning script gets.

Used by the tests that run Lightning users' scripts (tests/lightning_scripts, tests/lightning_style,
tests/cli_fixtures/lightning_script.py), so each port is the same mechanical rewrite.
"""

from __future__ import annotations

import re

# Lightning's names that steadytrain spells differently; the port imports ours under Lightning's name.
RENAMED = {
    "LightningModule": "Module as LightningModule",
    "LightningDataModule": "DataModule as LightningDataModule",
    "LightningCLI": "CLI as LightningCLI",
    "LightningArgumentParser": "ArgumentParser as LightningArgumentParser",
}
# Lightning's module -> steadytrain's (a submodule such as callbacks.finetuning maps to its package).
PACKAGES = {
    r"lightning\.pytorch": "trainer",
    r"lightning\.pytorch\.callbacks(?:\.\w+)?": "trainer.callbacks",
    r"lightning\.pytorch\.loggers(?:\.\w+)?": "trainer.loggers",
    r"lightning\.pytorch\.profilers(?:\.\w+)?": "trainer.profilers",
    r"lightning\.pytorch\.cli": "trainer.cli",
    r"lightning\.pytorch\.utilities(?:\.\w+)?": "trainer.utilities",
    r"lightning\.pytorch\.tuner(?:\.\w+)?": "trainer.tuner",
    r"lightning\.pytorch\.strategies(?:\.\w+)?": "trainer.strategies",
    r"lightning\.pytorch\.demos(?:\.\w+)?": "trainer.demos",
    # where Lightning defines its top-level names: LightningModule in core, Trainer in trainer
    r"lightning\.pytorch\.(?:core|trainer)(?:\.\w+)?": "trainer",
}
# ``import lightning as L`` / ``import lightning.pytorch as pl``: trainer has L.LightningModule, L.Trainer, ...
MODULES = {r"lightning(?:\.pytorch)?": "trainer"}


def port(line: str) -> str:
    """``from lightning.pytorch[.x] import A, B`` and ``import lightning[.pytorch] as L`` in steadytrain's
    names; any other line unchanged (its indentation kept)."""
    indent, code = re.fullmatch(r"(\s*)(.*)", line, re.DOTALL).groups()  # type: ignore[union-attr]
    for pattern, ours in PACKAGES.items():
        if match := re.fullmatch(rf"from {pattern} import (.+)", code):
            names = [RENAMED.get(name.strip(), name.strip()) for name in match[1].split(",")]
            return f"{indent}from {ours} import {', '.join(names)}"
    for pattern, ours in MODULES.items():
        if match := re.fullmatch(rf"import {pattern} as (\w+)", code):
            return f"{indent}import {ours} as {match[1]}"
    return line
