"""The failure catalogue as tests: each case is a real job that must end, by itself, as declared.

Cases that fail today carry ``known`` (how they fail) and run as ``xfail(strict=True)``: the suite
stays green, and a fix in the core turns them into XPASS failures until ``known`` is removed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.cases import CASES
from tests.faults.harness import NOT_JUDGED, Case, Outcome, run_case


def _param(case: Case) -> object:
    marks = [pytest.mark.slow]
    if case.known:
        # raises=AssertionError: a harness problem (pytest.fail) still fails the run.
        marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=case.known))
    return pytest.param(case, id=case.name, marks=marks)


def _report(outcome: Outcome) -> str:
    tail = "\n".join(outcome.output.splitlines()[-40:])
    return (
        f"{outcome.name}: expected {outcome.expected}, got {outcome.got} in {outcome.seconds:.1f}s "
        f"({outcome.detail})\nmessage: {outcome.message}\n--- output tail ---\n{tail}"
    )


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_the_job_ends_as_the_catalogue_says(case: Case, tmp_path: Path) -> None:
    outcome = run_case(case, tmp_path / case.name)
    if outcome.got == "SKIP":
        pytest.skip(outcome.detail)
    if outcome.got in NOT_JUDGED:
        pytest.fail(_report(outcome))
    assert outcome.got == case.expect, _report(outcome)
