"""Every Python snippet in the docs runs, and the site builds with ``mkdocs build --strict``.

Convention (see docs/writing-docs.md):

* A ```` ```python ```` block is run. Blocks on one page run in order, in one namespace (a module
  named ``docs_<page>``), so a later block can use what an earlier one defined. Each page runs in
  its own empty temporary working directory.
* A ```` ```python {.no-run} ```` block is shown but not run (it needs several processes, a
  launcher, a GPU, a network, or a part of the package that does not exist yet). It must still
  compile.
* Any other Python-looking fence (``py``, ``python3``) is an error, so no snippet escapes the test
  by a typo. Shell commands go in ```` ```bash ```` blocks; YAML blocks must parse.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
PYTHON_TYPOS = {"py", "python3", "py3", "pycon", "ipython"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the first code line in the .md file
    lang: str
    classes: frozenset[str]
    code: str

    @property
    def runs(self) -> bool:
        return self.lang == "python" and "no-run" not in self.classes

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def parse_info(info: str) -> tuple[str, frozenset[str]]:
    """``python {.no-run title="x"}`` -> ("python", {"no-run"}); ``{.python .no-run}`` works too."""
    info = info.strip()
    attrs = ""
    if "{" in info:
        info, _, attrs = info.partition("{")
    classes = set(re.findall(r"(?:^|\s)\.([\w-]+)", attrs))
    words = info.split()
    lang = words[0] if words else ""
    if not lang:
        lang = next((c for c in sorted(classes) if c != "no-run"), "")
        classes.discard(lang)
    return lang.lower(), frozenset(classes)


def extract_blocks(path: Path) -> list[Block]:
    """Fenced code blocks of a Markdown file, nested ones (admonitions, tabs) dedented."""
    page = path.relative_to(DOCS).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        lang, classes = parse_info(match["info"])
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        else:
            raise AssertionError(f"docs/{page}:{i + 1}: code fence is never closed")
        blocks.append(Block(page, i + 2, lang, classes, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
ALL_BLOCKS = [b for page in PAGES for b in extract_blocks(DOCS / page)]
RUNNABLE_PAGES = sorted({b.page for b in ALL_BLOCKS if b.runs})


def page_id(page: str) -> str:
    return page.removesuffix(".md")


def module_name(page: str) -> str:
    return "docs_" + re.sub(r"\W", "_", page_id(page))


@pytest.fixture
def clean_globals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A fresh working directory and seeds; global state a snippet may change is put back after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))  # snippets import `recipes` as from a checkout
    environ = dict(os.environ)
    safe_globals = list(torch.serialization.get_safe_globals())
    deterministic = torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    argv = list(sys.argv)
    torch.set_num_threads(1)  # snippets are tiny: one thread is faster and never oversubscribes
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield tmp_path
    os.environ.clear()
    os.environ.update(environ)
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals(safe_globals)
    torch.use_deterministic_algorithms(deterministic)
    torch.set_num_threads(threads)
    sys.argv[:] = argv


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=[page_id(p) for p in RUNNABLE_PAGES])
def test_page_snippets_run(page: str, clean_globals: Path) -> None:
    """Run the page's ``python`` blocks in order in one namespace; errors point at the .md line."""
    name = module_name(page)
    module = types.ModuleType(name)
    module.__dict__["__file__"] = str(DOCS / page)
    sys.modules[name] = module  # pickling, dataclasses and DataLoader workers look classes up here
    try:
        for block in (b for b in ALL_BLOCKS if b.page == page and b.runs):
            # Padding with newlines makes traceback line numbers those of the Markdown file.
            code = compile("\n" * (block.line - 1) + block.code, str(DOCS / page), "exec")
            exec(code, module.__dict__)
    finally:
        del sys.modules[name]


def test_pages_were_found() -> None:
    assert "index.md" in PAGES and "quickstart.md" in RUNNABLE_PAGES


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "python" and not b.runs], ids=lambda b: b.where)
def test_no_run_snippets_compile(block: Block) -> None:
    """Blocks that cannot run here must still be valid Python."""
    compile(block.code, block.where, "exec")


def test_python_fences_follow_the_convention() -> None:
    bad = [f"{b.where}: ```{b.lang}" for b in ALL_BLOCKS if b.lang in PYTHON_TYPOS]
    assert not bad, "use ```python (run) or ```python {.no-run} (shown only):\n" + "\n".join(bad)


def test_yaml_blocks_parse() -> None:
    import yaml

    for block in (b for b in ALL_BLOCKS if b.lang in ("yaml", "yml")):
        try:
            yaml.safe_load(block.code)
        except yaml.YAMLError as err:
            pytest.fail(f"{block.where}: {err}")


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with no warning: links, anchors and API references all resolve."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    pytest.importorskip("material")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "trainer" / "index.html").is_file()
