"""Lightning's own tests of public behaviour, run under Lightning and, ported by their import lines only, under
steadytrain: how many of the tests that pass under Lightning pass ported, and why each other one fails.

    PYTHONPATH=. python benchmarks/lightning_tests.py --lightning PATH [--out DIR] [--jobs N] [--reuse]
        [--dirs trainer callbacks ...] [--files tests_pytorch/trainer/test_trainer.py ...]

``PATH`` is a checkout of Lightning's repository (a work tree, or its git directory with ``--ref``; by
default the tag of the installed Lightning version, else the newest tag before it). Its
``tests/tests_pytorch`` is copied twice under ``--out``: as it is, and with every ``.py`` file's import lines
rewritten by ``tests/lightning_port.py`` (the test files and their helpers; ``conftest.py`` and
``helpers/runif.py`` are the test runner's machinery, not a user's code, and stay Lightning's on both sides,
so both sides skip the same tests). Lightning's internals a test file imports (``_private`` names, its loops and
connectors: ``INTERNAL_MODULES``) are lent from Lightning, so they fail only the tests that use them, as
``internals``. Each test file runs in its own pytest process on the CPU, on each side.
Nothing of Lightning's is committed here: the harness takes a checkout.

Every test that passes under Lightning and not ported is classed (``classify``):

- ``import``: the ported file stops at an import line; the missing name is kept;
- ``internals``: the failing line, or a ``mock.patch`` in the test, reaches Lightning's internals (its loops,
  connectors, ``_private`` names, module paths patched by string);
- ``difference``: a documented difference (``DIFFERENCES``: the test, the reason, where the migration guide
  says so);
- ``public``: anything else: a value, a file, a warning, an error type, a hook's arguments or order.

The interpreter needs torch, lightning and steadytrain's dependencies, plus what Lightning's tests import
(``pip install cloudpickle scikit-learn pandas``). Writes ``summary.json`` and ``report.md`` under ``--out``;
``--guide`` rewrites the migration guide's generated parts (what a port cannot find, the tests that show each
documented difference) from the run in ``--out`` (benchmarks/lightning_guide.py); ``--reclassify`` classes the
run in ``--out`` again with today's rules, without running a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.lightning_tests_classes import DIFFERENCES, classify
from tests.lightning_port import RENAMED, port_source

REPO = Path(__file__).resolve().parents[1]
DIRS = ["trainer", "callbacks", "checkpointing", "loops", "core", "loggers", "models", "tuner"]
TOP_FILES = ["test_cli.py"]  # tests_pytorch's own files measured with the directories (LightningCLI)
KEEP = {"conftest.py", "helpers/runif.py"}  # the test runner's machinery: Lightning's on both sides
# Lightning's own pytest settings (its pyproject.toml), without the doctests of its source tree.
PYTEST_INI = """[pytest]
addopts = --strict-markers --color=no --disable-pytest-warnings -p no:cacheprovider
markers =
    cloud: Run the cloud tests for example
filterwarnings =
    error::FutureWarning
    ignore::FutureWarning:onnxscript
    ignore:You are using `torch.load` with `weights_only=False`.*:FutureWarning
    ignore::FutureWarning:torch.distributed.algorithms.ddp_comm_hooks
    ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated.*:FutureWarning
xfail_strict = true
"""


@dataclass
class Outcome:
    status: str  # passed, failed, error, skipped, missing (the file stopped or timed out before it)
    text: str = ""  # the failure's message and short traceback


# ---- preparing the two trees --------------------------------------------------------------------------------
def lightning_tests(checkout: Path, ref: str | None, into: Path) -> Path:
    """``tests/tests_pytorch`` of the checkout, as files under ``into`` (exported from git when ``ref``)."""
    if ref is None and (checkout / "tests" / "tests_pytorch").is_dir():
        shutil.copytree(checkout / "tests" / "tests_pytorch", into / "tests_pytorch")
        return into / "tests_pytorch"
    ref = ref or default_ref(checkout)
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir(checkout)), "archive", ref, "tests/tests_pytorch"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into), "--strip-components=1"], input=archive, check=True)
    return into / "tests_pytorch"


def git_dir(checkout: Path) -> Path:
    return checkout / ".git" if (checkout / ".git").exists() else checkout


def default_ref(checkout: Path) -> str:
    """The installed Lightning's tag, else the newest release tag before it."""
    from importlib.metadata import version

    installed = tuple(int(p) for p in version("lightning").split(".")[:3])
    tags = subprocess.run(
        ["git", "--git-dir", str(git_dir(checkout)), "tag"], capture_output=True, text=True, check=True
    ).stdout.split()
    releases = sorted(
        (tuple(int(p) for p in tag.split(".")), tag) for tag in tags if re.fullmatch(r"\d+\.\d+\.\d+", tag)
    )
    older = [tag for numbers, tag in releases if numbers <= installed]
    if not older:
        raise SystemExit(f"no release tag at or before Lightning {installed} in {checkout}")
    if older[-1] != ".".join(map(str, installed)):
        print(f"lightning_tests: no tag {'.'.join(map(str, installed))}; using {older[-1]}", flush=True)
    return older[-1]


def port_tree(tests: Path, into: Path) -> Path:
    """A copy of ``tests`` with every user-code file's import lines ported."""
    ported = into / "tests_pytorch"
    shutil.copytree(tests, ported)
    for path in ported.rglob("*.py"):
        if path.relative_to(ported).as_posix() not in KEEP:
            path.write_text(port_source(path.read_text(), lend_private=True))
    return ported


# ---- running one file ---------------------------------------------------------------------------------------
def run_file(root: Path, test_file: str, xml: Path, timeout: float, ported: bool) -> str:
    """One pytest process over one file; returns how it ended ("ok", "timeout")."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *([str(REPO)] if ported else [])])}
    env.update(CUDA_VISIBLE_DEVICES="", WANDB_MODE="disabled")
    command = [sys.executable, "-m", "pytest", test_file, f"--junitxml={xml}", "--tb=short", "-q"]
    try:
        subprocess.run(
            command,
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "ok"


def outcomes(xml: Path, test_file: str) -> dict[str, Outcome]:
    """Test id -> outcome from a junit file; a collection error is kept under the file's own id."""
    if not xml.exists():
        return {}
    results: dict[str, Outcome] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        status, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, text = ("failed" if child.tag == "failure" else "error"), _text(child)
                break
            if child.tag == "skipped":
                status = "skipped"
        if case.get("classname", "") == "" or name.endswith(f"::{Path(test_file).stem}"):
            name = f"{test_file}::<collection>"
        if results.get(name, Outcome("passed")).status == "passed" or status != "passed":
            results[name] = Outcome(status, text)
    return results


def _text(element: ET.Element) -> str:
    return f"{element.get('message', '')}\n{element.text or ''}"[-6000:]


# ---- the report ---------------------------------------------------------------------------------------------
def compare(lightning: dict[str, dict[str, Outcome]], ported: dict[str, dict[str, Outcome]], root: Path) -> dict:
    """Per file: the tests passing under Lightning, and each one's ported result with its class."""
    rows = {}
    for test_file, results in sorted(lightning.items()):
        passing = [name for name, outcome in results.items() if outcome.status == "passed"]
        ours = ported.get(test_file, {})
        collection = ours.get(f"{test_file}::<collection>")
        entries = {}
        for name in passing:
            outcome = ours.get(name) or ours.get(ported_id(name)) or collection
            outcome = outcome or Outcome("missing", "the ported file ended before this test")
            if outcome.status == "passed":
                entries[name] = {"status": "passed"}
                continue
            kind, reason = classify(name, outcome.text, root / test_file)
            entries[name] = {"status": outcome.status, "class": kind, "reason": reason}
        rows[test_file] = entries
    return rows


def ported_id(test_id: str) -> str:
    """A test's id in the ported file: a parameter named after a class the port renames (``[LightningModule]``)
    is named after ours there (``[Module]``)."""
    name, bracket, params = test_id.partition("[")
    for lightning, ours in RENAMED.items():
        params = re.sub(rf"\b{lightning}\b", ours, params)
    return name + bracket + params


def summarize(rows: dict) -> dict:
    by_dir: dict[str, Counter[str]] = defaultdict(Counter)
    for test_file, entries in rows.items():
        directory = test_file.split("/")[1] if test_file.count("/") > 1 else "."
        for entry in entries.values():
            by_dir[directory]["lightning_passing"] += 1
            by_dir[directory][entry.get("class", "passed")] += 1
    total: Counter[str] = Counter()
    for counts in by_dir.values():
        total.update(counts)
    return {"total": dict(total), "by_dir": {d: dict(c) for d, c in sorted(by_dir.items())}}


def report(rows: dict, summary: dict) -> str:
    classes = ["passed", "import", "internals", "difference", "public"]
    lines = ["| directory | Lightning passing | " + " | ".join(classes) + " |", "|---" * (len(classes) + 2) + "|"]
    for directory, counts in [*summary["by_dir"].items(), ("**all**", summary["total"])]:
        cells = [str(counts.get(kind, 0)) for kind in classes]
        lines.append(f"| {directory} | {counts.get('lightning_passing', 0)} | " + " | ".join(cells) + " |")
    total = summary["total"]
    share = total.get("passed", 0) / max(1, total.get("lightning_passing", 0))
    lines += ["", f"Passing ported: {total.get('passed', 0)} of {total.get('lightning_passing', 0)} ({share:.1%})", ""]
    missing = Counter(
        entry["reason"] for entries in rows.values() for entry in entries.values() if entry.get("class") == "import"
    )
    if missing:
        lines += ["## Stopped at an import", "", "| name | tests |", "|---|---|"]
        lines += [f"| `{name}` | {count} |" for name, count in missing.most_common()]
    for kind in ("public", "difference", "internals"):
        failing = [
            (name, entry["reason"])
            for entries in rows.values()
            for name, entry in entries.items()
            if entry.get("class") == kind
        ]
        if failing:
            lines += ["", f"## {kind} ({len(failing)})", ""]
            lines += [f"- `{name}`: {reason}" for name, reason in sorted(failing)]
    return "\n".join(lines) + "\n"


# ---- main ---------------------------------------------------------------------------------------------------
def test_files(tests: Path, dirs: list[str], files: list[str]) -> list[str]:
    if files:
        return [f.removeprefix("tests/") for f in files]
    found = []
    for directory in dirs:
        found += sorted(p.relative_to(tests.parent).as_posix() for p in (tests / directory).rglob("test_*.py"))
    if dirs == DIRS:
        found += [(tests / name).relative_to(tests.parent).as_posix() for name in TOP_FILES if (tests / name).is_file()]
    return found


def run_side(root: Path, files: list[str], out: Path, jobs: int, timeout: float, ported: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)

    def one(test_file: str) -> tuple[str, dict[str, Outcome]]:
        xml = out / (test_file.replace("/", "__") + ".xml")
        started = time.monotonic()
        ended = run_file(root, test_file, xml, timeout, ported)
        results = outcomes(xml, test_file)
        if ended == "timeout":
            results.setdefault(f"{test_file}::<collection>", Outcome("error", f"timed out after {timeout:.0f} s"))
        side = "ported" if ported else "lightning"
        print(
            f"  {side:9s} {test_file}: {Counter(o.status for o in results.values())} "
            f"({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        return test_file, results

    with ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(one, files))


def write_results(out: Path, rows: dict) -> None:
    summary = summarize(rows)
    (out / "summary.json").write_text(json.dumps({"summary": summary, "tests": rows}, indent=1))
    (out / "report.md").write_text(report(rows, summary))
    print(report(rows, summary).split("## ")[0])
    print(f"lightning_tests: {out / 'report.md'}; {len(DIFFERENCES)} documented differences known")


def reclassify(checkout: Path, ref: str | None, out: Path) -> None:
    """The last run in ``out`` (its Lightning cache and ported junit files) classed again with today's rules, so a
    change to the classes or to ``DIFFERENCES`` shows without running the tests again."""
    known = json.loads((out / "lightning.json").read_text())
    lightning = {f: {n: Outcome(**o) for n, o in r.items()} for f, r in known.items()}
    xml = out / "xml" / "ported"
    ported = {f: outcomes(xml / (f.replace("/", "__") + ".xml"), f) for f in lightning}
    with tempfile.TemporaryDirectory(prefix="lightning_tests_") as work:
        tests = lightning_tests(checkout, ref, Path(work))
        write_results(out, compare(lightning, ported, tests.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lightning", type=Path, help="a checkout of Lightning's repository")
    parser.add_argument("--ref", help="a tag or commit of it (default: the installed Lightning's tag)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "lightning_tests")
    parser.add_argument("--dirs", nargs="+", default=DIRS, help="directories of tests_pytorch")
    parser.add_argument("--files", nargs="*", default=[], help="test files (tests_pytorch/...) instead of --dirs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per file and side")
    parser.add_argument("--reuse", action="store_true", help="keep the Lightning side's results from --out")
    parser.add_argument("--prepare", type=Path, help="only write the two trees into this folder, to run by hand")
    parser.add_argument("--guide", action="store_true", help="rewrite the migration guide's parts from --out's run")
    parser.add_argument(
        "--reclassify", action="store_true", help="class --out's last run again (its junit files) with today's rules"
    )
    args = parser.parse_args()
    if args.guide:
        from benchmarks.lightning_guide import write_guide

        write_guide(args.out)
        return
    if args.lightning is None:
        parser.error("--lightning PATH is required (a checkout of Lightning's repository), unless --guide")

    if args.reclassify:
        reclassify(args.lightning, args.ref, args.out)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.prepare or Path(tempfile.mkdtemp(prefix="lightning_tests_"))
    for side in ("lightning", "ported"):
        (work / side).mkdir(parents=True)
    tests = lightning_tests(args.lightning, args.ref, work / "lightning")
    for name in ("pytest.ini",):
        (work / "lightning" / name).write_text(PYTEST_INI)
        (work / "ported" / name).write_text(PYTEST_INI)
    port_tree(tests, work / "ported")
    files = test_files(tests, args.dirs, args.files)
    if args.prepare:
        print(
            f"lightning_tests: ported tests in {work / 'ported'}; run one file with\n  cd {work / 'ported'} && "
            f"PYTHONPATH=.:{REPO} {sys.executable} -m pytest tests_pytorch/<dir>/<file>.py"
        )
        return
    print(f"lightning_tests: {len(files)} files; work folder {work}", flush=True)

    cache = args.out / "lightning.json"
    known = json.loads(cache.read_text()) if args.reuse and cache.exists() else {}
    todo = [f for f in files if f not in known]
    lightning = {f: {n: Outcome(**o) for n, o in r.items()} for f, r in known.items() if f in files}
    lightning.update(run_side(work / "lightning", todo, args.out / "xml" / "lightning", args.jobs, args.timeout, False))
    known.update({f: {n: o.__dict__ for n, o in r.items()} for f, r in lightning.items()})
    cache.write_text(json.dumps(known))
    ported = run_side(work / "ported", files, args.out / "xml" / "ported", args.jobs, args.timeout, True)

    write_results(args.out, compare(lightning, ported, work / "ported"))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
