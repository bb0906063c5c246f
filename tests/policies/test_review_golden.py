"""The review's report on two committed plans is the one recorded before the rules were
refactored and the review made faster: every rule, count, finding, message, exemption
and evidence row, in order.

``fixtures/review-golden/plan.json`` is the test plans of the Spark, Kubeflow Pipelines
and serving rules in one plan, broken in distinct objects (27 mandatory violations in 16
rules, an advisory one, one value unknown during preview, annotation exemptions);
``fixtures/real-preview.json`` is a real ``pulumi preview --json`` with unknowns and
secrets. A change that is meant to change a report rewrites the expected file with
`expected_report` below and says why in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.review.__main__ import main

FIXTURES = Path(__file__).parent / "fixtures"
CASES = {
    "violations": (FIXTURES / "review-golden" / "plan.json", "plan.report.json"),
    "real-preview": (FIXTURES / "real-preview.json", "real-preview.report.json"),
}


def expected_report(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` without what changes from run to run (the time, the plan's path)."""
    return {k: v for k, v in report.items() if k not in ("generatedAt", "plan")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_report_is_the_recorded_one(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan, expected = CASES[case]
    main(["--plan", str(plan), "--out", str(tmp_path)])
    capsys.readouterr()
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    recorded = json.loads((FIXTURES / "review-golden" / expected).read_text(encoding="utf-8"))
    got = expected_report(report)
    # Compared part by part first, so that a failure names the part that changed.
    for key in recorded:
        assert got.get(key) == recorded[key], key
    assert got == recorded
