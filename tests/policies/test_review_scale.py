"""Reviews of large plans: a bounded terminal summary, complete report files, and the
benchmark's plan generator (`policies.review.bench`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy.proxy import unknown_checking_proxy

from policies.aws import sdk_taggable, sdk_taggable_by_import
from policies.model import ResourceView
from policies.review import jsonstream
from policies.review.__main__ import main
from policies.review.bench import copies, generate
from policies.review.evaluate import review_plan
from policies.review.jsontext import write_json
from policies.review.plan import load_plan, parse_plan, resource_args, stack_resources
from policies.values import (
    SECRET_SIG,
    SPECIAL_SIG_KEY,
    SharedValues,
    decode_plan_value,
    plain,
)
from tests.conftest import shipped_plan
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


# -- what makes a large review fast and small: each must not change what it reads ------

GOLDEN_PLAN = HERE / "fixtures" / "review-golden" / "plan.json"


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20], ids=["tiny-chunks", "small-chunks", "1MiB"])
@pytest.mark.parametrize("name", ["real-preview.json", "review-golden/plan.json"])
def test_a_plan_read_a_step_at_a_time_is_the_plan_read_whole(
    name: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny chunks cut every value, number and string somewhere.
    monkeypatch.setattr(jsonstream, "CHUNK", chunk)
    path = HERE / "fixtures" / name
    streamed = load_plan(path)
    whole = parse_plan(json.loads(path.read_text()), path)
    assert streamed == whole


def test_a_plan_the_stream_cannot_read_is_read_whole(tmp_path: Path) -> None:
    # Members repeated (the last wins, as json.loads has it), in any order.
    text = '{"steps": [], "config": 1, ' + json.dumps(compliant_plan())[1:]
    path = tmp_path / "plan.json"
    path.write_text(text)
    assert load_plan(path) == parse_plan(json.loads(text), path)
    assert load_plan(path).resources


def test_shared_values_are_equal_to_the_decoded_ones() -> None:
    document = json.loads(GOLDEN_PLAN.read_text())
    document["steps"].append(copy.deepcopy(document["steps"][-1]))
    state = document["steps"][-1]["newState"]["inputs"]
    state["numbers"] = [1, 1.0, True, -0.0, 0.0, None, "1", {"a": 1}, {"a": True}, {"a": 1.0}]
    state["secret"] = {SPECIAL_SIG_KEY: SECRET_SIG, "value": {"x": [1, "y"]}}
    state["hidden"] = {SPECIAL_SIG_KEY: SECRET_SIG}
    shared = SharedValues()
    for step in document["steps"]:
        inputs = step["newState"].get("inputs") or {}
        expected = decode_plan_value(inputs)
        got = shared.decode(copy.deepcopy(inputs))
        assert got == expected
        # And alike for Python's equality is not alike for JSON: 1, 1.0 and True stay
        # apart, and -0.0 keeps its sign.
        assert json.dumps(got) == json.dumps(expected)


def test_the_review_changes_none_of_the_plans_values(tmp_path: Path) -> None:
    """Values equal in two resources are one object (`SharedValues`): a rule that
    changed one would change the other."""
    plan = load_plan(GOLDEN_PLAN)
    before = copy.deepcopy([(r.inputs, r.state) for r in plan.resources])
    review_plan(plan)
    assert [(r.inputs, r.state) for r in plan.resources] == before


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": [], "b": {}, "c": [{}], "d": [[]]},
        [1, -2, 2.5, -0.0, 1e300, float("nan"), float("inf"), float("-inf"), True, False, None],
        ["é", "\n", '"', "\\", "\u2028", "😀"],
        {7: "int", 2.5: "float", True: "bool", False: "bool", None: "none"},
        (1, (2, 3)),
    ],
)
def test_json_is_written_as_json_dumps_writes_it(value: Any, tmp_path: Path) -> None:
    write_json(tmp_path / "out.json", value)
    assert (tmp_path / "out.json").read_text() == json.dumps(value, indent=2) + "\n"


def test_a_report_is_written_as_json_dumps_writes_it(tmp_path: Path) -> None:
    main(["--plan", str(GOLDEN_PLAN), "--out", str(tmp_path)])
    for name in ("report.json", "report.sarif"):
        text = (tmp_path / name).read_text()
        assert text == json.dumps(json.loads(text), indent=2) + "\n"


def test_taggable_types_read_from_the_sdks_source_are_those_of_its_classes() -> None:
    """`sdk_taggable` reads the generated source instead of importing the SDK's module;
    over every AWS type of a shipped plan it says what the class itself says."""
    _, plan = shipped_plan("uae-prod")
    types = {s["newState"]["type"] for s in plan["steps"]}
    aws = sorted(t for t in types if t.startswith("aws:"))
    assert len(aws) > 30
    assert [t for t in aws if sdk_taggable(t) != sdk_taggable_by_import(t)] == []


def test_stack_resources_and_their_views_are_those_the_engine_would_send() -> None:
    """The stack's resources resolve their parent and dependencies when first read,
    and the review builds their views from the plan's URNs: both as the objects say."""
    plan = load_plan(GOLDEN_PLAN)
    resources = stack_resources(plan)
    urns = {r.urn for r in resources}
    for resource, planned in zip(resources, plan.resources, strict=True):
        view = ResourceView.from_policy_resource(resource)
        assert view == ResourceView._of_policy_resource(resource, planned.state, None)
        assert resource.parent is None or resource.parent.urn == planned.parent
        assert resource.parent is not None or planned.parent not in urns
        assert [d.urn for d in resource.dependencies] == [
            u for u in planned.dependencies if u in urns
        ]
        assert {k: [d.urn for d in v] for k, v in resource.property_dependencies.items()} == {
            k: [u for u in v if u in urns] for k, v in planned.property_dependencies.items()
        }
