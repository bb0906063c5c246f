"""Reviews of large plans: a bounded terminal summary, complete report files, and the
benchmark's plan generator (`policies.review.bench`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy.proxy import unknown_checking_proxy

from policies.model import ResourceView
from policies.review.__main__ import main
from policies.review.bench import copies, generate
from policies.review.plan import parse_plan, resource_args
from policies.values import plain
from tests.policies.builder import compliant_plan, find_step

HERE = Path(__file__).parent


def many_violations(copies_wanted: int) -> dict[str, Any]:
    """The compliant plan copied ``copies_wanted`` times, each copy with four violations
    of four mandatory rules (two set here, two by the generator)."""
    base = compliant_plan()
    find_step(base, "aws:ebs/volume:Volume", "scratch")["inputs"]["encrypted"] = False
    job = find_step(base, "kubernetes:batch/v1:Job", "train")
    job["inputs"]["spec"]["template"]["spec"]["hostNetwork"] = True
    shared = sum(1 for s in base["steps"] if s["newState"]["type"].startswith("pulumi:"))
    size = shared + copies_wanted * (len(base["steps"]) - shared)
    steps = list(copies(base, size, violation_every=1))
    return {"config": base["config"], "steps": steps}


def test_the_generator_copies_with_unique_urns_and_rewired_parents(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text(json.dumps(compliant_plan()))
    plan = json.loads(generate(base, 200, tmp_path / "plan.json", violation_every=3).read_text())
    states = [s["newState"] for s in plan["steps"]]
    urns = [s["urn"] for s in states]
    assert len(states) == 200 and len(set(urns)) == 200
    # References inside a copy point at that copy's resources.
    for state in states:
        for urns_of_prop in state.get("propertyDependencies", {}).values():
            assert set(urns_of_prop) <= set(urns)
    privileged = [
        s
        for s in states
        if s["type"] == "kubernetes:batch/v1:Job"
        and s["inputs"]["spec"]["template"]["spec"]["containers"][0]
        .get("securityContext", {})
        .get("privileged")
    ]
    assert len(privileged) == 200 // 23 // 3  # one copy in three, of 8 full copies


def test_the_terminal_summary_is_bounded_and_the_reports_list_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "big.json"
    plan.write_text(json.dumps(many_violations(40)))
    out = tmp_path / "out"
    assert main(["--plan", str(plan), "--out", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) < 60, "\n".join(lines)
    assert lines[0].startswith("big: FAIL: 160 mandatory")
    assert "    k8s-no-privileged: 40" in lines
    assert "      ... and 37 more" in lines
    assert any(str(out / "report.md") in line for line in lines)
    report = json.loads((out / "report.json").read_text())
    violations = [f for f in report["findings"] if f["kind"] == "violation"]
    mandatory = [f for f in violations if f["enforcement"] == "mandatory"]
    assert len(mandatory) == 160
    assert {f["ruleId"] for f in mandatory} == {
        "aws-encryption-customer-managed-key",
        "k8s-no-host-namespaces",
        "k8s-no-privileged",
        "uae-kms-no-multi-region",
    }
    markdown = (out / "report.md").read_text()
    assert markdown.count("\n### ") == len(violations)
    sarif = json.loads((out / "report.sarif").read_text())
    assert len([r for r in sarif["runs"][0]["results"] if r["level"] == "error"]) == 160


@pytest.mark.parametrize("source", ["compliant", "real-preview"])
def test_the_decoded_plan_is_what_rules_would_unwrap_from_the_engines_proxies(
    source: str,
) -> None:
    """The review hands rules the decoded plan values instead of unwrapping a proxy of
    them (`plain`), which is only right while the two are equal."""
    document = (
        compliant_plan()
        if source == "compliant"
        else json.loads((HERE / "fixtures" / "real-preview.json").read_text())
    )
    plan = parse_plan(document, Path("p.json"))
    for resource in plan.resources:
        assert plain(unknown_checking_proxy(resource.inputs)) == resource.inputs
        assert plain(unknown_checking_proxy(resource.state)) == resource.state
    # And the arguments the rules get are those of the engine path.
    for resource in plan.analyzable():
        args = resource_args(plan, resource, None)
        assert ResourceView.from_args(args).props == plain(args.props)
