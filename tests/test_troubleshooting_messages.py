"""docs/troubleshooting.md quotes the messages "word for word": each quoted line must be one the code can raise.

Every line of the page's ``text`` blocks must match a message template in ``trainer/`` (an f-string
whose ``{...}`` parts stand for the example values; ``...`` in the page cuts a long message short).
The messages that list choices (strategies, precisions) would match any list that way, so they are
raised here and compared character for character: a new strategy or precision that the page
does not list fails this test.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

import pytest

from tests.helpers import REPO_ROOT
from trainer import Trainer

PAGE = REPO_ROOT / "docs" / "troubleshooting.md"
PREFIX = re.compile(r"^(?:UserWarning|[A-Z]\w*Error|error): ")
ANY = None  # a placeholder token: any text
Token = str | None


def quoted_lines() -> list[str]:
    blocks = re.findall(r"```text\n(.*?)```", PAGE.read_text(), re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _tokens(node: ast.AST) -> list[Token] | None:
    """A string expression as literal text and placeholders; None if it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts: list[Token] = []
        for value in node.values:
            parts += _tokens(value) or [ANY] if not isinstance(value, ast.FormattedValue) else [ANY]
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _tokens(node.left), _tokens(node.right)
        if left is not None or right is not None:
            return (left or [ANY]) + (right or [ANY])
    return None


def templates() -> Iterator[list[Token]]:
    for path in (REPO_ROOT / "trainer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            tokens = _tokens(node)
            if tokens is not None and sum(len(t) for t in tokens if t) >= 20:  # a message, not a separator
                yield [t.strip("\n") if t else t for t in tokens]  # a line written with its newline


def _regex(tokens: list[Token]) -> str:
    return "".join(".*?" if t is ANY else re.escape(t) for t in tokens)


def matches(line: str, tokens: list[Token], full: re.Pattern[str] | None = None) -> bool:
    """``line`` is the template with values filled in; with ``...`` in it, the text before is a prefix of one."""
    if (full or re.compile(_regex(tokens), re.DOTALL)).fullmatch(line) is not None:
        return True
    if "..." not in line:
        return False
    start = line.split("...")[0]
    for k, token in enumerate(tokens):  # the cut falls inside token k
        tail = re.fullmatch(_regex(tokens[:k]) + "(.*)", start, re.DOTALL)
        if tail is not None and (token is ANY or token.startswith(tail[1])):
            return True
    return False


TEMPLATES = [(tokens, re.compile(_regex(tokens), re.DOTALL)) for tokens in templates()]


def _raised(make: Callable[[], object]) -> str:
    with pytest.raises(Exception) as info:
        make()
    return str(info.value)


# Messages that name the valid choices: raised, and compared in full.
RAISED: dict[str, Callable[[], str]] = {
    "strategy='deepspeed' is not a known strategy": lambda: _raised(lambda: Trainer(strategy="deepspeed")),
    "Precision 'fp16' is invalid": lambda: _raised(lambda: Trainer(accelerator="cpu", precision="fp16")),
}


@pytest.mark.parametrize("line", quoted_lines())
def test_each_quoted_message_is_one_the_code_raises(line: str) -> None:
    message = PREFIX.sub("", line)
    message = re.sub(
        r"^invalid --trainer\.\* value: (?:ValueError|MisconfigurationException): ", "", message
    )  # the CLI's prefix
    for start, make in RAISED.items():
        if message.startswith(start):
            assert message == make()
            return
    assert any(matches(message, *template) for template in TEMPLATES), f"no message in trainer/ reads: {message}"


def test_the_page_quotes_messages() -> None:
    lines = quoted_lines()
    assert len(lines) > 50 and any(line.startswith("strategy=") for line in lines)


def test_a_changed_message_is_caught() -> None:
    assert not any(matches("strategy='x' is not a known strategy; pick one of a, b.", *t) for t in TEMPLATES)
    assert any(matches("strategy='x' is not a known strategy; choose one of a, b.", *t) for t in TEMPLATES)
