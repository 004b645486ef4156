"""``--help`` that says what the code does: choices from the registries the Trainer checks against,
and docstrings (group headings, flag help) as plain text rather than reStructuredText markup."""

from __future__ import annotations

import argparse
import re

_ROLE = re.compile(r":\w+:`~?([^`]+)`")  # :class:`~trainer.Module` -> trainer.Module
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`")


def plain(text: str | None) -> str | None:
    """``Module`` and :class:`Module` as Module: how a terminal should show a docstring."""
    if not text:
        return text
    text = _ROLE.sub(lambda m: m[1].rsplit(".", 1)[-1] if m[0].find("~") >= 0 else m[1], text)
    return _LITERAL.sub(lambda m: m[1] or m[2], text)


def registry_help() -> dict[str, str]:
    """The help of ``--trainer.strategy`` and ``--trainer.precision``, from ``STRATEGIES`` and ``PRECISIONS``."""
    from trainer.precision import _ALIASES, PRECISIONS
    from trainer.strategies import STRATEGIES

    aliases = ", ".join(sorted({repr(k) for k in _ALIASES}))
    return {
        "strategy": f"one of {', '.join(['auto', *STRATEGIES])}, or a Strategy instance (e.g. DDPStrategy(...)).",
        "precision": f"one of {', '.join(PRECISIONS)} (Lightning's aliases {aliases} also work), or a Precision.",
    }


def set_registry_help(parser: argparse.ArgumentParser, nested_key: str) -> None:
    """Replace the docstring's list of names by the registries' (a new strategy shows up by itself)."""
    texts = {f"{nested_key}.{name}": text for name, text in registry_help().items()}
    for action in parser._actions:
        if action.dest in texts:
            action.help = texts[action.dest]


def plain_help(parser: argparse.ArgumentParser) -> None:
    """Group headings and flag help without docstring markup (called before ``--help`` is formatted)."""
    for group in parser._action_groups:
        group.description = plain(group.description)
        group.title = plain(group.title)  # type: ignore[assignment]
    for action in parser._actions:
        if isinstance(action.help, str) and action.help != argparse.SUPPRESS:
            action.help = plain(action.help)


def usage(with_ckpt_path: bool) -> str:
    """A short usage line, so an error message is not buried under every flag (--help lists them)."""
    usage = "%(prog)s [--config FILE] [--print_config] [--seed_everything N] [--trainer.* ...] [--model.* ...] "
    return usage + ("[--data.* ...] [--ckpt_path PATH]" if with_ckpt_path else "[--data.* ...]")
