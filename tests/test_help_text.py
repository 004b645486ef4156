"""``fit --help`` lists the names the Trainer accepts (from its registries) and shows docstrings as plain text."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("jsonargparse", reason="the CLI needs jsonargparse: pip install 'jsonargparse[signatures]'")
import trainer.strategies as strategies
from tests.cli_fixtures.tiny import Data, Model
from trainer import Trainer
from trainer.cli import CLI
from trainer.cli.help_text import plain
from trainer.precision import PRECISIONS


def fit_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        CLI(Model, Data, args=["fit", "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def flag_help(out: str, flag: str) -> str:
    match = re.search(rf"^  --{re.escape(flag)} \S+\n(.*?)(?=^  --)", out, re.MULTILINE | re.DOTALL)
    assert match, f"--{flag} not in the help"
    return " ".join(match[1].split())


def test_strategy_and_precision_choices_come_from_the_registries(capsys: pytest.CaptureFixture[str]) -> None:
    strategies.register_strategy("mine", "trainer.strategies.single:SingleDeviceStrategy")
    try:
        out = fit_help(capsys)
    finally:
        del strategies.STRATEGIES["mine"]
    names = ", ".join(["auto", *strategies.STRATEGIES, "mine"])
    assert flag_help(out, "trainer.strategy").startswith(f"one of {names}, or a Strategy instance")
    assert "fsdp" in names
    assert flag_help(out, "trainer.precision").startswith(f"one of {', '.join(PRECISIONS)} (")
    assert "16-true, bf16-true" in ", ".join(PRECISIONS)


def test_help_headings_are_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    out = fit_help(capsys)
    assert "``" not in out and ":class:" not in out
    assert "Runs a Module: Trainer(max_epochs=3).fit(module, train_loader, val_loader)" in out


def test_the_trainer_docstring_names_every_registered_choice() -> None:
    doc = " ".join((Trainer.__init__.__doc__ or "").split())
    assert all(f'"{name}"' in doc for name in [*strategies.STRATEGIES, *PRECISIONS])


def test_plain_text_of_docstring_markup() -> None:
    assert plain("Runs a ``Module``: see :class:`~trainer.Trainer` and :meth:`fit` or `x`.") == (
        "Runs a Module: see Trainer and fit or x."
    )
