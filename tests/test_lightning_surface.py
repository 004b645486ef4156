"""Lightning 2.6's public surface beside ours (issue 34), where the ``compat`` extra installs Lightning.

Listed from Lightning itself: every public name of ``lightning.pytorch``'s modules; every parameter of
``Trainer.__init__``, of ``LightningModule``'s and ``LightningDataModule``'s public methods, and of each callback's,
logger's, strategy's and profiler's ``__init__``. Each is steadytrain's through the port table
(``tests/lightning_port.py``), or is in ``REFUSED`` (``tests/lightning_refused.py``) with the reason and the error
a user gets, which the last test triggers. The migration guide shows that table.
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.lightning_port import port
from tests.lightning_refused import FORWARDED, REFUSED

pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow  # importing Lightning costs ~6 s of CPU

CLASSES_OF = ("callbacks", "loggers", "strategies", "profilers")
MODULE_CLASSES = ("LightningModule", "LightningDataModule")


def lightning(path: str) -> Any:
    module, _, name = path.rpartition(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(importlib.import_module(module), name)


def ours(path: str) -> Any:
    """What a port of ``from <module> import <name>`` gives, or None where it fails."""
    module, _, name = path.rpartition(".")
    namespace: dict[str, Any] = {}
    try:
        exec(port(f"from {module} import {name}"), namespace)
    except ImportError:
        return None
    return namespace[name]


def short(path: str) -> str:
    return path.removeprefix("lightning.pytorch.")


def public_methods(cls: type) -> list[str]:
    """Methods a user calls or overrides: Lightning's own, not ``torch.nn.Module``'s."""
    return [
        name
        for name in dir(cls)
        if not name.startswith("_")
        and callable(getattr(cls, name))
        and getattr(getattr(cls, name), "__module__", "").startswith("lightning.")
    ]


def surface() -> Iterator[tuple[str, Any, list[str]]]:
    """(Lightning path, Lightning's object, the methods whose parameters count)."""
    from benchmarks.lightning_guide import SURFACE, lightning_public_names

    for sub in SURFACE:
        module_path = "lightning.pytorch" + (f".{sub}" if sub else "")
        module = importlib.import_module(module_path)
        for name in lightning_public_names(module):
            if sub == "tuner" and name != "Tuner":
                continue  # the rest of its namespace is its submodules
            obj = getattr(module, name)
            methods: list[str] = []
            if name == "Trainer" or (sub in CLASSES_OF and inspect.isclass(obj)):
                methods = ["__init__"]
            elif name in MODULE_CLASSES and not sub:
                methods = public_methods(obj)
            yield f"{module_path}.{name}", obj, methods


def parameters(function: Any) -> tuple[list[str], bool]:
    """Named parameters (not self, not ``*args``/``**kwargs``) and whether it takes ``**kwargs``."""
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return [], True
    skip = ("self", "cls")  # a restricted classmethod's signature shows cls
    named = [p.name for p in params if p.name not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


def gaps() -> list[str]:
    """Each Lightning name, method or parameter a port cannot find and ``REFUSED`` does not list."""
    found = []
    for path, theirs, methods in surface():
        key = short(path)
        mine = ours(path)
        if mine is None:
            found.append(key)
            continue
        if key in REFUSED:
            continue  # it imports and refuses when built: its parameters do not matter
        for method in methods:
            if not hasattr(mine, method):
                found.append(f"{key}.{method}")
                continue
            wanted, _ = parameters(getattr(theirs, method))
            have, takes_kwargs = parameters(getattr(mine, method))
            forwarded = takes_kwargs and f"{key}.{method}" in FORWARDED
            found += [f"{key}.{method}({name})" for name in wanted if name not in have and not forwarded]
    return [gap for gap in found if gap not in REFUSED]


def test_every_lightning_name_and_parameter_is_ours_or_refused_with_a_reason() -> None:
    missing = gaps()
    assert missing == [], f"{len(missing)} Lightning names/parameters are neither ours nor in REFUSED: {missing}"


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_each_refusal_gives_its_message(key: str) -> None:
    """The error a user meets, triggered by the Lightning code the entry names (ported by its imports)."""
    refusal = REFUSED[key]
    with pytest.raises(Exception, match=refusal.message):
        exec(port(refusal.call), {})


def test_the_guide_shows_the_refused_table() -> None:
    from benchmarks.lightning_guide import GUIDE

    text = GUIDE.read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", text.split("<!-- generated: refused -->")[1], re.M))
    assert listed >= set(REFUSED), "regenerate: python benchmarks/lightning_tests.py --guide --out DIR"
