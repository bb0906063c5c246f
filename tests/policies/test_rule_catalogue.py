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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulumi_policy import Policy, ResourceValidationPolicy

from policies.model import ResourceView, Rule, StackView, TypesIn
from policies.pack import to_policy
from policies.review.evaluate import resource_args, stack_resources
from policies.review.plan import parse_plan
from policies.rules import ALL_RULES

FIXTURES = Path(__file__).parent / "fixtures"
SNAPSHOT = FIXTURES / "rule-metadata.json"

Plan = dict[str, Any]


def _golden(name: str) -> Callable[[], Plan]:
    return lambda: json.loads((FIXTURES / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


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


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1) + "\n", encoding="utf-8")
