"""The default-deny rule (every namespace the stack creates denies all traffic by default)
and Secrets Manager secrets under the stack's key, each beside its compliant twin, with
properties left out and values unknown during preview."""

from __future__ import annotations

import copy
from typing import Any

from tests.policies.builder import compliant_plan, default_deny, find_step, key_arn
from tests.policies.conftest import failing_rules, messages, review

RULE = "k8s-namespace-default-deny"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
SECRET = "aws:secretsmanager/secret:Secret"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
Plan = dict[str, Any]
#: The rules this module gives failing cases (test_rules checks every rule has one).
COVERED_RULE_IDS = frozenset({RULE})


def _policy(plan: Plan) -> dict[str, Any]:
    spec: dict[str, Any] = find_step(plan, POLICY, "team-a-default-deny-all")["inputs"]
    return spec


def _without_policy(plan: Plan) -> None:
    plan["steps"] = [s for s in plan["steps"] if s["newState"]["type"] != POLICY]


def _add_namespace(plan: Plan, name: str, deny: bool) -> None:
    namespace = find_step(plan, NAMESPACE, "team-a")
    for kind, resource, body in (
        (NAMESPACE, name, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        *([(POLICY, f"{name}-default-deny-all", default_deny(name))] if deny else []),
    ):
        state = copy.deepcopy(namespace)
        state.update(type=kind, urn=f"urn:pulumi:test::uae-gpu-platform::{kind}::{resource}")
        state["inputs"] = body
        plan["steps"].append({"op": "create", "urn": state["urn"], "newState": state})


def test_the_compliant_twin_passes_and_the_rule_looks_at_every_namespace() -> None:
    plan = compliant_plan()
    _add_namespace(plan, "monitoring", deny=True)
    result = review(plan)
    assert result.violations == []
    (evaluated,) = [r.evaluated for r in result.results if r.rule.id == RULE]
    assert evaluated >= 1


def test_a_namespace_without_a_default_deny_policy_fails() -> None:
    bad = compliant_plan()
    _without_policy(bad)
    assert failing_rules(bad) == {RULE}
    (message,) = messages(bad, RULE)
    assert "namespace team-a has no default-deny NetworkPolicy" in message


def test_only_the_namespace_left_open_fails() -> None:
    plan = compliant_plan()
    _add_namespace(plan, "monitoring", deny=False)
    (message,) = messages(plan, RULE)
    assert "monitoring" in message and "team-a" not in message


def test_a_policy_without_policy_types_denies_only_ingress() -> None:
    """Kubernetes reads a policy with no ``policyTypes`` and no egress rules as ingress
    only: egress stays open."""
    bad = compliant_plan()
    del _policy(bad)["spec"]["policyTypes"]
    assert failing_rules(bad) == {RULE}


def test_a_policy_that_allows_something_is_not_a_default_deny() -> None:
    bad = compliant_plan()
    _policy(bad)["spec"]["egress"] = [{}]  # an empty rule allows all egress
    assert failing_rules(bad) == {RULE}
    narrower = compliant_plan()
    _policy(narrower)["spec"]["podSelector"] = {"matchLabels": {"app": "trainer"}}
    assert failing_rules(narrower) == {RULE}


def test_a_default_deny_in_another_namespace_does_not_count() -> None:
    bad = compliant_plan()
    _policy(bad)["metadata"]["namespace"] = "team-b"
    assert failing_rules(bad) == {RULE}


def test_a_namespace_without_a_name_is_reported() -> None:
    bad = compliant_plan()
    del find_step(bad, NAMESPACE, "team-a")["inputs"]["metadata"]["name"]
    assert any("sets no metadata.name" in m for m in messages(bad, RULE))


def test_an_unknown_namespace_name_cannot_be_checked_during_preview() -> None:
    plan = compliant_plan()
    find_step(plan, NAMESPACE, "team-a")["inputs"]["metadata"]["name"] = UNKNOWN
    result = review(plan)
    assert result.violations == []
    assert [f.rule_id for f in result.findings if f.unknown] == [RULE]


# -- Secrets Manager: the team's MLflow credentials under the stack's key --------------


def _with_secret(plan: Plan, **inputs: Any) -> Plan:
    key = find_step(plan, "aws:kms/key:Key", "storage-key")
    state = copy.deepcopy(key)
    urn = f"urn:pulumi:test::uae-gpu-platform::{SECRET}::team-a-mlflow"
    state.update(type=SECRET, urn=urn, outputs={})
    state["inputs"] = {"name": "gpu-test/mlflow/team-a", **inputs}
    deps = {"kmsKeyId": [key["urn"]]} if "kmsKeyId" in inputs else {}
    state.update(
        propertyDependencies=deps, dependencies=sorted({u for v in deps.values() for u in v})
    )
    plan["steps"].append({"op": "create", "urn": urn, "newState": state})
    return plan


def test_a_secret_under_the_stacks_key_passes_and_one_without_fails() -> None:
    good = _with_secret(compliant_plan(), kmsKeyId=key_arn("1"))
    assert failing_rules(good) == set()
    missing = _with_secret(compliant_plan())
    assert failing_rules(missing) == {"aws-encryption-customer-managed-key"}
    assert any("kmsKeyId" in m for m in messages(missing, "aws-encryption-customer-managed-key"))
    aws_managed = _with_secret(compliant_plan(), kmsKeyId="alias/aws/secretsmanager")
    assert "aws-encryption-customer-managed-key" in failing_rules(aws_managed)
    assert any(
        "AWS-managed" in m for m in messages(aws_managed, "aws-encryption-customer-managed-key")
    )
