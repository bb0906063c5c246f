"""The fleet rules on a compliant plan with a MultiKueue worker, on broken twins and on
twins with the property left out: exactly the expected rule fails."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from policies.rules import RULES_BY_ID
from tests.policies.builder import compliant_plan
from tests.policies.conftest import failing_rules
from tests.policies.twins import twin_tests

Plan = dict[str, Any]
CLUSTER = "kubernetes:kueue.x-k8s.io/v1beta2:MultiKueueCluster"
SECRET = "kubernetes:core/v1:Secret"
SITE = {
    "fleet.gpuplatform.ae/site-kind": "aws-eks",
    "fleet.gpuplatform.ae/region": "me-central-1",
    "fleet.gpuplatform.ae/country": "AE",
    "fleet.gpuplatform.ae/site": "aws-me-central-1",
    "fleet.gpuplatform.ae/stack": "uae-prod",
}


def _step(plan: Plan, kind: str, name: str, inputs: dict[str, Any]) -> None:
    provider = next(
        s["newState"]["provider"]
        for s in plan["steps"]
        if s["newState"]["type"] == "kubernetes:core/v1:Namespace"
    )
    urn = f"urn:pulumi:test::uae-gpu-platform::{kind}::{name}"
    state = {"urn": urn, "type": kind, "custom": True, "provider": provider, "inputs": inputs}
    plan["steps"].append({"op": "create", "urn": urn, "provider": provider, "newState": state})


def fleet_plan() -> Plan:
    """The policy fixtures' compliant plan plus a manager's worker objects."""
    plan = compliant_plan()
    _step(
        plan,
        SECRET,
        "worker-secret",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "multikueue-uae-prod", "namespace": "kueue-system"},
            "type": "Opaque",
            "stringData": {"kubeconfig": "[secret]"},
        },
    )
    _step(
        plan,
        CLUSTER,
        "worker-uae-prod",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueCluster",
            "metadata": {"name": "worker-uae-prod", "annotations": dict(SITE)},
            "spec": {
                "clusterSource": {
                    "kubeConfig": {"locationType": "Secret", "location": "multikueue-uae-prod"}
                }
            },
        },
    )
    return plan


def _inputs(plan: Plan, kind: str) -> dict[str, Any]:
    return next(s["newState"]["inputs"] for s in plan["steps"] if s["newState"]["type"] == kind)  # type: ignore[no-any-return]


def annotate(**values: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        annotations = _inputs(plan, CLUSTER)["metadata"]["annotations"]
        for key, value in values.items():
            full = f"fleet.gpuplatform.ae/{key.replace('_', '-')}"
            if value is None:
                annotations.pop(full)
            else:
                annotations[full] = value

    return mutate


def kubeconfig_source(**source: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, CLUSTER)["spec"]["clusterSource"]["kubeConfig"] = dict(source)

    return mutate


def secret_data(value: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, SECRET)["stringData"] = value

    return mutate


RESIDENCY = "uae-fleet-worker-residency"
CREDENTIALS = "uae-fleet-worker-credentials"
PLAIN = secret_data({"kubeconfig": "apiVersion: v1\nusers: []"})
FROM_PATH = kubeconfig_source(locationType="Path", location="/etc/kubeconfig")
OTHER_SECRET = kubeconfig_source(locationType="Secret", location="other")
CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("worker in a foreign region", annotate(region="eu-west-1"), RESIDENCY, "eu-west-1"),
    ("worker site abroad", annotate(site_kind="on-premises", country="DE"), RESIDENCY, "'DE'"),
    ("worker site undeclared", annotate(site_kind=None, country=None), RESIDENCY, "declare"),
    ("kubeconfig in plain text", PLAIN, CREDENTIALS, "plain text"),
    ("kubeconfig key missing", secret_data({}), CREDENTIALS, "has no kubeconfig key"),
    ("kubeconfig from a path", FROM_PATH, CREDENTIALS, "Path"),
    ("kubeconfig secret missing", OTHER_SECRET, CREDENTIALS, "not registered"),
]
#: Rule ids these cases cover (tests/policies/test_rules.py counts them as covered).
COVERED_RULE_IDS = frozenset(c[2] for c in CASES)


def test_the_compliant_fleet_twin_passes() -> None:
    plan = fleet_plan()
    assert failing_rules(plan) == set()
    assert failing_rules(compliant_plan()) == set()


def test_a_decrypted_kubeconfig_from_the_worker_stack_passes() -> None:
    """Inside `pulumi preview` policies see secret values decrypted: the kubeconfig's
    origin, a StackReference to the worker stack, is what makes it compliant."""
    plan = copy.deepcopy(fleet_plan())
    PLAIN(plan)
    step = next(s for s in plan["steps"] if s["newState"]["type"] == SECRET)
    reference = "urn:pulumi:test::uae-gpu-platform::pulumi:pulumi:StackReference::fleet-uae-prod"
    state = {
        "urn": reference,
        "type": "pulumi:pulumi:StackReference",
        "custom": True,
        "inputs": {"name": "organization/uae-gpu-platform/uae-prod"},
    }
    plan["steps"].insert(0, {"op": "read", "urn": reference, "newState": state})
    step["newState"]["propertyDependencies"] = {"stringData": [reference]}
    assert failing_rules(plan) == set()


_, test_the_broken_fleet_fails_exactly_the_rule = twin_tests(
    lambda: copy.deepcopy(fleet_plan()), CASES
)


def test_the_fleet_rules_are_mandatory_with_remediation_and_controls() -> None:
    for rule_id in COVERED_RULE_IDS:
        rule = RULES_BY_ID[rule_id]
        assert rule.enforcement.value == "mandatory"
        assert "fleet" in rule.remediation or "Secret" in rule.remediation
        assert any("PDPL" in c for c in rule.controls)
        assert any("ISO/IEC 27001:2022 A.5.15" in c for c in rule.controls)
