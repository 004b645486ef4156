"""The package's shape: no import cycles (type-only imports included), and loops that never ask which
strategy runs them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trainer"


def import_graph() -> dict[str, set[str]]:
    """Every module of the package and the modules of the package it imports, wherever the import is."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    graph = import_graph()
    assert len(graph) > 40  # the walk found the package
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_loops_callbacks_and_checkpoints_never_import_a_concrete_strategy() -> None:
    """A new strategy is one file: nothing that runs a loop may depend on DDP, DP or FSDP."""
    graph = import_graph()
    concrete = {m for m in graph if m.startswith("trainer.strategies.") and not m.endswith((".base", ".single"))}
    concrete.discard("trainer.strategies.registry")
    for module, imported in graph.items():
        if module.startswith(("trainer.loops", "trainer.callbacks", "trainer.checkpoint")):
            assert not imported & concrete, f"{module} imports {sorted(imported & concrete)}"
