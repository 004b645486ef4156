"""Runs each tests/lightning_style script under Lightning and under steadytrain and compares what it reports.

    PYTHONPATH=. python tests/lightning_parity.py [--world 1|2] [--shuffle on|off] [names...]

prints one row per script: ``match``, or the values that differ. The Lightning run executes the
script's Lightning original (its ``# lightning:`` import lines put back, see tests/test_lightning_style.py);
tests/lightning_parity_site/sitecustomize.py records, in both runs and without a change to the
script, the lines it prints, every ``fit``/``validate``/``test``/``predict`` result with the Trainer's
and ModelCheckpoint's values (and their types), and the files written with each ``metrics.csv``.
Numbers must agree within ``RTOL`` (relative); a printed number within its last printed digit.
Both runs are fp32 on the CPU with each framework's default logger set to its CSVLogger (a script marked
``# parity: native default logger`` keeps TensorBoard, and its event files' scalars are compared).
With ``--shuffle off`` the Lightning run's DDP training sampler is held to the script's order too:
Lightning shuffles a DDP training loader even with ``shuffle=False``, steadytrain keeps the order (a
documented difference); and Lightning's DDP is kept from seeding every rank again at a stage's start,
which steadytrain never does (another). The comparison is about the rest. A Tuner's internal fits are not compared.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.helpers import REPO_ROOT, clean_env, run_python
from tests.test_lightning_style import SCRIPTS, lightning_original, script_args, script_names

RTOL = 1e-6
# A script with this line runs with each framework's own default logger (TensorBoard where installed);
# the others with CSVLogger on both sides, so their metrics.csv rows are compared.
NATIVE_LOGGER = "# parity: native default logger"
SITE = REPO_ROOT / "tests" / "lightning_parity_site"
# Differences kept on purpose, each in docs/migration/from-lightning.md: file names only one side writes.
DOCUMENTED_FILES = {
    # ModelCheckpoint(save_last=True) by default; profiler="simple" also writes its report to <log_dir>
    "steadytrain": re.compile(r"(.*/)?checkpoints/last\.ckpt$|<log_dir>/\w+-profiler(-\d+)?\.txt$"),
    "lightning": re.compile(r"$^"),
}
# Printed text that is a timing or a machine detail, not a computed value.
VOLATILE = re.compile(r"FIT Profiler Report|seconds|\bs\b")
# metrics.csv columns that hold a reading of the machine (CPU and memory use), not a computed value.
MACHINE_READING = re.compile(r"DeviceStatsMonitor\.")
# torch's gloo can abort a process at interpreter exit (pytorch/pytorch#190489). The Lightning run
# destroys its group at exit to avoid it (sitecustomize.py); should the reference still abort after
# its script ended, it runs once more. steadytrain's own run is never retried.
GLOO_EXIT_ABORT = "terminate called without an active exception"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def run(name: str, framework: str, world: int, shuffle: str, root: Path) -> dict[str, Any]:
    """One run of script ``name``; what it reported (see sitecustomize.py)."""
    cwd = root / f"{framework}-{name}-{world}"
    cwd.mkdir()
    script = SCRIPTS / f"{name}.py"
    if framework == "lightning":
        source = root / "lightning_src"
        source.mkdir(exist_ok=True)
        script = source / f"{name}.py"
        script.write_text(lightning_original((SCRIPTS / f"{name}.py").read_text()))
    args = script_args(name, world)
    out = root / f"{framework}-{name}-{world}.json"
    logger = "native" if NATIVE_LOGGER in (SCRIPTS / f"{name}.py").read_text() else "csv"
    env = clean_env(
        PARITY_FRAMEWORK=framework,
        PARITY_OUT=str(out),
        PARITY_SCRIPT=str(script),
        PARITY_SHUFFLE=shuffle,
        PARITY_DEFAULT_LOGGER=logger,
    )
    env["PYTHONPATH"] = f"{SITE}:{env['PYTHONPATH']}"
    done = run_python([str(script), *args], env=env, cwd=cwd, timeout=300)
    if framework == "lightning" and done.returncode != 0 and GLOO_EXIT_ABORT in done.output:
        shutil.rmtree(cwd)  # once more from a clean folder, see GLOO_EXIT_ABORT
        cwd.mkdir()
        done = run_python([str(script), *args], env=env, cwd=cwd, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{name} under {framework} failed:\n{done.output[-3000:]}")
    reported: dict[str, Any] = json.loads(out.read_text())
    return normalized(reported)


def normalized(reported: dict[str, Any]) -> dict[str, Any]:
    """Each side's run folders (``lightning_logs/version_0``, ``runs/default/version_0``) as ``<log_dir>``, the
    next one a script's calls use as ``<log_dir_1>``, and so on."""
    log_dirs = [c["trainer"]["log_dir"]["value"] for c in reported["calls"]]
    names = {d: "<log_dir>" for d in log_dirs[:1]}
    for log_dir in log_dirs:
        names.setdefault(log_dir, f"<log_dir_{len(names)}>")
    text = json.dumps(reported)
    for log_dir in sorted(set(names) - {".", None}, key=len, reverse=True):
        text = text.replace(json.dumps(log_dir)[1:-1], names[log_dir])
    normal: dict[str, Any] = json.loads(text)
    for table in (t for t in normal.get("files", {}).values() if isinstance(t, dict) and "header" in t):
        readings = [i for i, name in enumerate(table["header"]) if MACHINE_READING.match(name)]
        for row in table["rows"]:
            for i in readings:
                row[i] = None if row[i] is None else "<reading>"  # where it was logged counts, not the value
    return normal


def differences(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Where ``ours`` and ``theirs`` differ, as ``path: ours != theirs`` lines."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = [f"{where}/{k}: only in {'ours' if k in ours else 'lightning'}" for k in sorted(ours.keys() ^ theirs)]
        for key in sorted(ours.keys() & theirs.keys()):
            found += differences(ours[key], theirs[key], f"{where}/{key}")
        return found
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(ours, str) and isinstance(theirs, str) and where.startswith("/printed"):
        return [] if same_printed(ours, theirs) else [f"{where}: {ours!r} != {theirs!r}"]
    if _number(ours) and _number(theirs) and math.isclose(ours, theirs, rel_tol=RTOL, abs_tol=1e-12):
        return []
    return [] if ours == theirs else [f"{where}: {_short(ours)} != {_short(theirs)}"]


PID = re.compile(r"pid=\d+")


def same_printed(ours: str, theirs: str) -> bool:
    """Same text, and each number within its last printed digit (``:.4f`` rounds two close values apart);
    process ids are each run's own."""
    ours, theirs = PID.sub("pid=#", ours), PID.sub("pid=#", theirs)
    if VOLATILE.search(ours):
        return NUMBER.sub("#", ours) == NUMBER.sub("#", theirs)
    a, b = NUMBER.findall(ours), NUMBER.findall(theirs)
    if NUMBER.sub("#", ours) != NUMBER.sub("#", theirs) or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        digits = len(x.partition(".")[2]) if "e" not in x else 0
        if not math.isclose(float(x), float(y), rel_tol=RTOL, abs_tol=1.01 * 10.0**-digits if digits else 0):
            return False
    return True


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The differences, leaving out the documented ones (docs/migration/from-lightning.md): steadytrain's
    ``last.ckpt`` (``save_last=True``), its profiler report file and its default folder
    (``default_root_dir="runs"``)."""
    for side, reported in (("steadytrain", ours), ("lightning", theirs)):
        reported["files"] = {k: v for k, v in reported["files"].items() if not DOCUMENTED_FILES[side].match(k)}
        for call in reported["calls"]:
            folders = call["trainer"]
            if folders["log_dir"]["value"] == folders["default_root_dir"].pop("value"):  # no logger
                folders["log_dir"]["value"] = "<default_root_dir>"
            if side == "steadytrain" and "checkpoint" in call:
                last = call["checkpoint"]["last_model_path"]
                last["value"] = "" if DOCUMENTED_FILES[side].match(last["value"]) else last["value"]
    return differences(ours, theirs)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def parity(name: str, world: int, shuffle: str) -> list[str]:
    """The differences between the two runs of script ``name``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        return compare(run(name, "steadytrain", world, shuffle, root), run(name, "lightning", world, shuffle, root))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=script_names())
    parser.add_argument("--world", type=int, default=1, choices=[1, 2])
    parser.add_argument("--shuffle", default="on", choices=["on", "off"])
    parser.add_argument("--show", type=int, default=6, help="differences shown per script")
    args = parser.parse_args()
    matched = 0
    print(f"{'script':<28} world={args.world} shuffle={args.shuffle}")
    for name in args.names:
        try:
            found = parity(name, args.world, args.shuffle)
        except RuntimeError as error:
            found = [str(error)]
        matched += not found
        print(f"{name:<28} {'match' if not found else f'{len(found)} differences'}", flush=True)
        for line in found[: args.show]:
            print(f"    {line}", flush=True)
    print(f"{matched} of {len(args.names)} scripts match Lightning")


if __name__ == "__main__":
    main()
