"""The pack over the offline plans of the shipped stacks (`stacks.offline_plan`).

Every shipped stack must pass every mandatory rule; deliberately broken copies of a
real plan must each be caught by the one rule that covers the breakage.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import Any

import pytest

from stacks.offline_plan import available_stacks, build_plan
from tests.policies.builder import secure_pod
from tests.policies.conftest import failing_rules, review

Plan = dict[str, Any]
MUTATED_STACK = "uae-prod"


@functools.cache
def plan_of(stack: str) -> Plan:
    return build_plan(stack)


def fresh(stack: str = MUTATED_STACK) -> Plan:
    return copy.deepcopy(plan_of(stack))


def test_the_expected_stacks_are_shipped() -> None:
    assert {"uae-prod", "uae-dev", "smb-cpu"} <= set(available_stacks())


@pytest.mark.parametrize("stack", available_stacks())
def test_every_shipped_stack_passes_every_mandatory_rule(stack: str) -> None:
    result = review(plan_of(stack))
    assert [(f.rule_id, f.urn, f.message) for f in result.mandatory_violations] == []
    # Offline plans know every value, so every rule could run.
    assert [f.message for f in result.findings if f.unknown] == []


def states(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [s["newState"] for s in plan["steps"] if s["newState"]["type"] == kind]


def aws_provider_ref(plan: Plan) -> str:
    state = states(plan, "aws:s3/bucket:Bucket")[0]
    return str(state["provider"])


def add_step(
    plan: Plan, kind: str, name: str, inputs: dict[str, Any], provider: str
) -> dict[str, Any]:
    stack_urn = plan["steps"][0]["newState"]["urn"]
    prefix = stack_urn.split("::")[0] + "::" + stack_urn.split("::")[1]
    state = {
        "urn": f"{prefix}::{kind}::{name}",
        "type": kind,
        "custom": True,
        "inputs": inputs,
        "provider": provider,
    }
    plan["steps"].append(
        {"op": "create", "urn": state["urn"], "provider": provider, "newState": state}
    )
    return state


def workload_pod(plan: Plan) -> dict[str, Any]:
    """The pod spec of a workload of the plan with no exception annotations; where the
    plan has none yet, a compliant Job (with its cluster provider and site) is added."""
    for step in plan["steps"]:
        inputs = step["newState"].get("inputs", {})
        spec = inputs.get("spec", {}) if isinstance(inputs, dict) else {}
        template = spec.get("template", {}) if isinstance(spec, dict) else {}
        annotations = (
            inputs.get("metadata", {}).get("annotations", {}) if isinstance(inputs, dict) else {}
        )
        if (
            isinstance(template, dict)
            and "containers" in template.get("spec", {})
            and not any(key.startswith("policy-exception.") for key in annotations)
        ):
            return template["spec"]  # type: ignore[no-any-return]
    provider_urn = add_step(
        plan, "pulumi:providers:kubernetes", "test-cluster", {"kubeconfig": "[secret]"}, ""
    )["urn"]
    provider = f"{provider_urn}::id"
    site = {
        "site": "aws-me-central-1",
        "country": "AE",
        "kind": "aws-eks",
        "region": "me-central-1",
    }
    add_step(
        plan,
        "kubernetes:core/v1:ConfigMap",
        "test-site",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "gpuplatform-site", "namespace": "kube-system"},
            "data": site,
        },
        provider,
    )
    job = add_step(
        plan,
        "kubernetes:batch/v1:Job",
        "test-train",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "t", "namespace": "team-a"},
            "spec": {"template": {"spec": secure_pod()}},
        },
        provider,
    )
    return job["inputs"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_the_workload_used_by_the_mutations_is_compliant() -> None:
    plan = fresh()
    workload_pod(plan)
    assert failing_rules(plan) == failing_rules(plan_of(MUTATED_STACK))


def foreign_region(plan: Plan) -> None:
    states(plan, "aws:ec2/securityGroup:SecurityGroup")[0]["inputs"]["region"] = "eu-west-1"


def replication_to_eu_west_1(plan: Plan) -> None:
    bucket = states(plan, "aws:s3/bucket:Bucket")[0]
    add_step(
        plan,
        "aws:s3/bucketReplicationConfig:BucketReplicationConfig",
        "data-replication",
        {
            "bucket": bucket["inputs"].get("bucket", "data"),
            "role": "arn:aws:iam::123456789012:role/replication",
            "rules": [
                {
                    "id": "all",
                    "status": "Enabled",
                    "destination": {"bucket": "arn:aws:s3:::uae-data-replica-eu-west-1"},
                }
            ],
        },
        aws_provider_ref(plan),
    )


def multi_region_key(plan: Plan) -> None:
    states(plan, "aws:kms/key:Key")[0]["inputs"]["multiRegion"] = True


def public_endpoint(plan: Plan) -> None:
    cluster = states(plan, "aws:eks/cluster:Cluster")[0]
    cluster["inputs"]["vpcConfig"]["endpointPublicAccess"] = True
    cluster["inputs"]["vpcConfig"].pop("publicAccessCidrs", None)


def unencrypted_volume(plan: Plan) -> None:
    add_step(
        plan,
        "aws:ebs/volume:Volume",
        "scratch",
        {"availabilityZone": "me-central-1a", "size": 100, "type": "gp3", "encrypted": False},
        aws_provider_ref(plan),
    )


def privileged_pod(plan: Plan) -> None:
    workload_pod(plan)["containers"][0].setdefault("securityContext", {})["privileged"] = True


def public_registry_image(plan: Plan) -> None:
    container = workload_pod(plan)["containers"][0]
    container["image"] = "docker.io/library/python:3.11-slim"


def bucket_wide_training_role(plan: Plan) -> None:
    (access,) = [
        state
        for state in states(plan, "aws:iam/rolePolicy:RolePolicy")
        if state["urn"].endswith("::training-llm-research-access")
    ]
    document = json.loads(access["inputs"]["policy"])
    for statement in document["Statement"]:
        if statement.get("Sid") == "ReadWriteOwnPrefix":
            statement["Resource"] = statement["Resource"].split("/")[0] + "/*"
    access["inputs"]["policy"] = json.dumps(document)


MUTATIONS: list[tuple[Callable[[Plan], None], str]] = [
    (foreign_region, "uae-aws-region-allowlist"),
    (replication_to_eu_west_1, "uae-s3-replication-in-region"),
    (multi_region_key, "uae-kms-no-multi-region"),
    (public_endpoint, "aws-eks-endpoint-private"),
    (unencrypted_volume, "aws-encryption-customer-managed-key"),
    (privileged_pod, "k8s-no-privileged"),
    (public_registry_image, "uae-container-image-registry"),
    (bucket_wide_training_role, "aws-iam-training-role-scoped"),
]


@pytest.mark.parametrize(("mutate", "rule_id"), MUTATIONS, ids=[m[0].__name__ for m in MUTATIONS])
def test_a_mutated_real_plan_is_caught_by_the_right_rule_only(
    mutate: Callable[[Plan], None], rule_id: str
) -> None:
    plan = fresh()
    mutate(plan)
    # Advisories the shipped plan already has (chart images) stay; only the rule that
    # covers the breakage is added.
    before = failing_rules(plan_of(MUTATED_STACK))
    assert rule_id not in before
    assert failing_rules(plan) - before == {rule_id}
    assert not review(plan).passed
