"""Run the failure catalogue (tests/faults/cases.py) and print how each job ended.

One case at a time, each a real job with a deadline; no pytest needed. Prints a table (case,
expected, got, seconds, the first line of the final message), then the count per class and the
cases whose class differs from the expected one (``known`` marks those already reported).

    python benchmarks/faults.py                      # every case
    python benchmarks/faults.py --only signal- ckpt-hostile-pickle   # names starting with these
    python benchmarks/faults.py --list               # the case names
    python benchmarks/faults.py --keep               # keep each case's folder (script, output, files)

Exit status 1 when a case not marked ``known`` got another class than expected, or a known one
got its expected class (the mark can go).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.cases import CASES
from tests.faults.harness import CLASSES, NOT_JUDGED, Case, Outcome, run_case

_WIDTH = 96  # characters of the message shown


def _selected(only: list[str] | None) -> list[Case]:
    if not only:
        return CASES
    chosen = [case for case in CASES if any(case.name.startswith(prefix) for prefix in only)]
    if not chosen:
        raise SystemExit(f"no case name starts with {only}; see --list")
    return chosen


def _row(outcome: Outcome, known: bool) -> str:
    flag = " " if outcome.passed else ("k" if known else "!")
    message = outcome.message.replace("\n", " ")
    if len(message) > _WIDTH:
        message = message[: _WIDTH - 3] + "..."
    return f"{flag} {outcome.name:<44} {outcome.expected:<9} {outcome.got:<9} {outcome.seconds:6.1f}  {message}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="PREFIX", help="run the cases whose names start with these")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--keep", action="store_true", help="keep the work folders")
    args = parser.parse_args()
    cases = _selected(args.only)
    if args.list:
        for case in cases:
            print(f"{case.name:<44} {case.expect:<6} {'known: ' + case.known if case.known else ''}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="steadytrain-faults-"))
    print(f"  {'case':<44} {'expected':<9} {'got':<9} {'seconds':>6}  first line of the message", flush=True)
    outcomes: list[tuple[Case, Outcome]] = []
    for case in cases:
        outcome = run_case(case, root / case.name)
        (root / case.name / "output.txt").write_text(outcome.output)
        outcomes.append((case, outcome))
        print(_row(outcome, bool(case.known)), flush=True)
    counts = collections.Counter(outcome.got for _, outcome in outcomes)
    order = [c for c in (*CLASSES, *NOT_JUDGED) if counts[c]]
    print("\nper class: " + ", ".join(f"{name} {counts[name]}" for name in order) + f" (of {len(outcomes)})")
    unexpected = [o for c, o in outcomes if o.got != "SKIP" and o.passed == bool(c.known)]
    for case, outcome in outcomes:
        if not outcome.passed:
            mark = "known" if case.known else "NEW"
            print(f"\n[{mark}] {outcome.name}: expected {outcome.expected}, got {outcome.got} ({outcome.detail})")
            print(f"    {outcome.message}")
    if unexpected:
        print("\nnot as catalogued: " + ", ".join(o.name for o in unexpected))
    if args.keep:
        print(f"\nfolders kept under {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
