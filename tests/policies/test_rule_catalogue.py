"""Every rule keeps the metadata recorded before the rules' metadata moved into a
catalogue, and the pack declares each rule with exactly that metadata.

``fixtures/rule-metadata.json`` was written from the rule decorators' code, before the
catalogue existed: per rule (in pack order) its kind, description, severity,
enforcement, remediation, controls (full text), config keys, annotation exceptions,
what it applies to, and the `pulumi_policy` policy the pack builds from it. What a rule
applies to is its type tokens where it names types, else the resources it picks out of
a corpus: the two golden review plans and the test builder's plans (with an RDS
database, a read replica and an online store, which the golden plans lack). A change
meant to change a rule's metadata rewrites the file (``python -m
tests.policies.test_rule_catalogue``) and says why in its commit.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import EnforcementLevel, Policy, ResourceValidationPolicy, Severity

from policies import catalogue as catalogue_module
from policies import controls
from policies.catalogue import (
    CatalogueError,
    Entry,
    check_complete,
    load_catalogue,
    resource_rule,
    stack_rule,
)
from policies.model import ResourceView, Rule, StackView, TypesIn
from policies.pack import to_policy
from policies.review.plan import parse_plan, resource_args, stack_resources
from policies.rules import ALL_RULES
from policies.settings import Settings

FIXTURES = Path(__file__).parent / "fixtures"
SNAPSHOT = FIXTURES / "rule-metadata.json"

Plan = dict[str, Any]


def _golden(name: str) -> Callable[[], Plan]:
    return lambda: json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def _compliant() -> Plan:
    from tests.policies.builder import compliant_plan  # noqa: PLC0415

    return compliant_plan()


def _database() -> Plan:
    from tests.policies.test_database_rules import plan_with_database  # noqa: PLC0415

    return plan_with_database()


def _replica() -> Plan:
    from tests.policies.test_database_rules import (  # noqa: PLC0415
        plan_with_database,
        set_props,
    )

    plan = plan_with_database()
    set_props(replicateSourceDb="arn:aws:rds:me-central-1:123456789012:db:primary")(plan)
    return plan


def _stores() -> Plan:
    from tests.policies.test_features_rules import plan_with_stores  # noqa: PLC0415

    return plan_with_stores()


#: The plans whose resources show what a rule with a predicate applies to.
CORPUS: dict[str, Callable[[], Plan]] = {
    "golden": _golden("review-golden/plan.json"),
    "real-preview": _golden("real-preview.json"),
    "compliant": _compliant,
    "database": _database,
    "database-replica": _replica,
    "online-store": _stores,
}


@functools.cache
def _views(case: str) -> tuple[list[ResourceView], list[ResourceView]]:
    """(resource rules' views, stack rules' views) of the corpus plan ``case``."""
    plan = parse_plan(copy.deepcopy(CORPUS[case]()), Path(f"{case}.json"))
    resource_views = [
        ResourceView.from_args(resource_args(plan, resource, None))
        for resource in plan.analyzable()
    ]
    return resource_views, list(StackView.of(stack_resources(plan)).resources)


def applies_to(rule: Rule) -> dict[str, Any]:
    """The types ``rule`` names, or the resources it applies to in each corpus plan."""
    if isinstance(rule.applies_to, TypesIn):
        return {"types": sorted(rule.applies_to.types)}
    chosen: dict[str, list[str]] = {}
    for case in CORPUS:
        resource_views, stack_views = _views(case)
        views = resource_views if rule.kind == "resource" else stack_views
        # A URN without its stack and project (the same in a whole plan).
        chosen[case] = [view.urn.split("::", 2)[-1] for view in views if rule.applies_to(view)]
    return {"resources": chosen}


def policy_metadata(policy: Policy) -> dict[str, Any]:
    """What the pack declares of one policy to the engine."""
    framework = policy.framework
    schema = policy.config_schema
    return {
        "class": "resource" if isinstance(policy, ResourceValidationPolicy) else "stack",
        "name": policy.name,
        "description": policy.description,
        "enforcementLevel": policy.enforcement_level.value if policy.enforcement_level else None,
        "severity": policy.severity.value if policy.severity else None,
        "remediationSteps": policy.remediation_steps,
        "tags": policy.tags,
        "framework": None
        if framework is None
        else [framework.name, framework.version, framework.reference],
        # The keys: each key's schema is `policies.settings.CONFIG_SCHEMAS`' entry.
        "configSchema": None if schema is None else [list(schema.properties), schema.required],
        "displayName": policy.display_name,
        "url": policy.url,
    }


def rule_metadata(rule: Rule) -> dict[str, Any]:
    """Everything a rule carries besides its check, as JSON."""
    return {
        "id": rule.id,
        "kind": rule.kind,
        "description": rule.description,
        "severity": rule.severity.value,
        "enforcement": rule.enforcement.value,
        "remediation": rule.remediation,
        "controls": list(rule.controls),
        "configKeys": list(rule.config_keys),
        "annotationExceptions": rule.annotation_exceptions,
        "appliesTo": applies_to(rule),
        "policy": policy_metadata(to_policy(rule)),
    }


def snapshot() -> list[dict[str, Any]]:
    return [rule_metadata(rule) for rule in ALL_RULES]


def test_every_rule_keeps_the_metadata_recorded_before_the_catalogue() -> None:
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    got = snapshot()
    assert [r["id"] for r in got] == [r["id"] for r in recorded]
    # Rule by rule and field by field first, so that a failure names what changed.
    for now, before in zip(got, recorded, strict=True):
        for key in before:
            assert now.get(key) == before[key], (before["id"], key)
    assert got == recorded


def test_the_compliance_pages_table_says_what_the_catalogue_says() -> None:
    """docs/compliance.md's row of each rule: its description (a link to a runbook
    aside), severity, enforcement and controls (without their wording)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "compliance.md").read_text()
    row = re.compile(r"^\| `([a-z0-9-]+)` \| (.+) \| (\w+) \| (\w+) \| (.+) \|$", re.MULTILINE)
    table = {m[1]: m.groups()[1:] for m in row.finditer(page)}
    for rule in ALL_RULES:
        description, severity, enforcement, mapped = table[rule.id]
        assert re.sub(r" \(\[[^]]*\]\([^)]*\)\)", "", description) == rule.description
        assert (severity, enforcement) == (rule.severity.value, rule.enforcement.value), rule.id
        assert mapped == "; ".join(c.split(" (", 1)[0] for c in rule.controls), rule.id


# -- the catalogue is checked when the pack loads ------------------------------------

ENTRY = """\
uae-example:
  description: An example rule.
  severity: high
  enforcement: mandatory
  remediation: Fix it.
  controls: [PDPL_22_TRANSFER, ISO_8_24]
  applies_to: {types: ["aws:s3/bucket:Bucket"]}
  config_keys: [allowedRegions]
"""


def load_text(tmp_path: Path, text: str) -> dict[str, Entry]:
    path = tmp_path / "catalogue.yaml"
    path.write_text(text, encoding="utf-8")
    return load_catalogue(path)


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(CatalogueError) as caught:
        load_text(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_entry_becomes_the_rules_metadata(tmp_path: Path) -> None:
    entry = load_text(tmp_path, ENTRY)["uae-example"]
    assert entry.severity == Severity.HIGH
    assert entry.enforcement == EnforcementLevel.MANDATORY
    assert entry.controls == (controls.PDPL_22_TRANSFER, controls.ISO_8_24)
    assert entry.applies_to == TypesIn(frozenset({"aws:s3/bucket:Bucket"}))
    assert entry.config_keys == ("allowedRegions",)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("ISO_8_24]", "ISO_9_99]"), "uae-example.controls[1]: got 'ISO_9_99'; not a name of"),
        (("controls: [PDPL_22_TRANSFER, ISO_8_24]", "controls: []"), "uae-example.controls"),
        (("[PDPL_22_TRANSFER, ISO_8_24]", "[{ISO: 8}]"), "uae-example.controls[0]: got {'ISO': 8}"),
        (("ISO_8_24]", "PDPL_22_TRANSFER]"), "uae-example.controls: got ['PDPL_22_TRANSFER']"),
        (("severity: high", "severity: urgent"), "uae-example.severity: got 'urgent'; one of"),
        (
            ("enforcement: mandatory", "enforcement: disabled"),
            "uae-example.enforcement: got 'disabled'; one of 'mandatory', 'advisory'",
        ),
        (("  remediation: Fix it.\n", ""), "uae-example.remediation: got None"),
        (("remediation:", "remedy:"), "the fields are"),
        (
            ("[allowedRegions]", "[allowedRegion]"),
            "uae-example.config_keys[0]: got 'allowedRegion'",
        ),
        (("{types: [", "{kinds: ["), "uae-example.applies_to: got {'kinds'"),
        (('"aws:s3/bucket:Bucket"', "bucket"), "uae-example.applies_to.types"),
        (("description: An example rule.", "description: ''"), "uae-example.description"),
    ],
)
def test_a_wrong_entry_is_refused_in_one_line(
    tmp_path: Path, change: tuple[str, str], problem: str
) -> None:
    assert change[0] in ENTRY
    message = refusal(tmp_path, ENTRY.replace(*change))
    assert message.startswith(f"{tmp_path.name}/catalogue.yaml: "), message
    assert problem in message


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    message = refusal(
        tmp_path, ENTRY.replace("severity: high", "severity: urgent").replace("ISO_8_24", "X")
    )
    assert "severity" in message and "controls[1]" in message


def test_a_rule_id_written_twice_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, ENTRY + ENTRY)
    assert "'uae-example' is written twice" in message


def test_a_catalogue_that_is_not_yaml_is_refused(tmp_path: Path) -> None:
    assert "cannot be read" in refusal(tmp_path, "uae-example: [unclosed\n")


def test_a_rule_function_without_an_entry_is_refused() -> None:
    def no_entry(resource: ResourceView, settings: Settings) -> Iterator[str]:
        yield "never"

    with pytest.raises(CatalogueError, match=r"no entry for rule 'uae-nowhere' \(the rule of "):
        resource_rule("uae-nowhere")(no_entry)


def test_an_entry_without_a_rule_function_is_refused() -> None:
    check_complete(ALL_RULES)  # the shipped catalogue: one function per entry
    with pytest.raises(
        CatalogueError, match=f"no rule function for the entries {ALL_RULES[-1].id}"
    ):
        check_complete(ALL_RULES[:-1])
    with pytest.raises(CatalogueError, match="more than one rule function"):
        check_complete((*ALL_RULES, ALL_RULES[0]))


def test_a_predicate_that_does_not_exist_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = ENTRY.replace('{types: ["aws:s3/bucket:Bucket"]}', "{predicate: policies.k8s.no_such}")
    monkeypatch.setattr(catalogue_module, "catalogue", lambda: load_text(tmp_path, text))

    def check(stack: StackView, settings: Settings) -> Iterator[tuple[str | None, str]]:
        yield None, "never"

    with pytest.raises(CatalogueError, match=r"no function policies\.k8s\.no_such"):
        stack_rule("uae-example")(check)


def test_the_pack_says_in_one_line_that_its_catalogue_is_broken(tmp_path: Path) -> None:
    """The pack started as the Pulumi CLI starts it, from a copy whose catalogue gives a
    rule an unknown severity: one line on stderr, a failed exit, no traceback."""
    repo = Path(__file__).resolve().parents[2]
    pack = tmp_path / "policies"
    shutil.copytree(repo / "policies", pack, ignore=shutil.ignore_patterns("__pycache__"))
    text = (pack / "catalogue.yaml").read_text(encoding="utf-8")
    (pack / "catalogue.yaml").write_text(
        text.replace("severity: critical", "severity: urgent", 1), encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pulumi.policy", "127.0.0.1:1", str(pack)],
        cwd=pack,
        env={**os.environ, "PYTHONPATH": str(repo)},  # `modules`, from the repository
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "policy pack: policies/catalogue.yaml: uae-aws-region-allowlist.severity: got 'urgent'; "
        "one of 'low', 'medium', 'high', 'critical'"
    ]


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1) + "\n", encoding="utf-8")
