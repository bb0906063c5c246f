"""The pack's entry, started the way the Pulumi CLI starts a Python policy pack
(``python -m pulumi.policy <engine> <pack dir>`` in the pack's directory), answers the
engine's gRPC calls with exactly the findings the offline review reports."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import proto

from policies.review.plan import Plan, parse_plan
from policies.rules import ALL_RULES
from tests.policies.builder import compliant_plan, find_step
from tests.policies.conftest import review

PACK_DIR = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module")
def analyzer() -> Iterator[Any]:
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", str(PACK_DIR)],
        cwd=PACK_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            process.kill()
            _, err = process.communicate(timeout=10)
            pytest.fail(f"the pack did not start: {line!r} {err}")
        channel = grpc.insecure_channel(f"127.0.0.1:{int(line)}")
        yield proto.AnalyzerStub(channel)
        channel.close()
    finally:
        process.kill()
        process.wait(timeout=10)


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    json_format.ParseDict(value, message)
    return message


def provider_of(plan: Plan, urn: str | None) -> proto.AnalyzerProviderResource | None:
    if urn is None:
        return None
    provider = plan.index[urn]
    return proto.AnalyzerProviderResource(
        type=provider.type, properties=struct(provider.inputs), urn=provider.urn, name=provider.name
    )


def engine_findings(analyzer: Any, plan: Plan) -> set[tuple[str, str, str, int]]:
    """(policy, urn, message, enforcement) of every diagnostic, as the engine gets them."""
    found: set[tuple[str, str, str, int]] = set()
    for resource in plan.analyzable():
        request = proto.AnalyzeRequest(
            type=resource.type,
            properties=struct(resource.inputs),
            urn=resource.urn,
            name=resource.name,
            options=proto.AnalyzerResourceOptions(
                protect=resource.protect, parent=resource.parent or ""
            ),
        )
        provider = provider_of(plan, resource.provider)
        if provider is not None:
            request.provider.CopyFrom(provider)
        for diag in analyzer.Analyze(request).diagnostics:
            found.add(
                (
                    diag.policyName,
                    resource.urn,
                    diag.message.split("\n", 1)[-1],
                    diag.enforcementLevel,
                )
            )
    resources = []
    for resource in plan.resources:
        item = proto.AnalyzerResource(
            type=resource.type,
            properties=struct(resource.state),
            urn=resource.urn,
            name=resource.name,
            parent=resource.parent or "",
            dependencies=list(resource.dependencies),
        )
        provider = provider_of(plan, resource.provider)
        if provider is not None:
            item.provider.CopyFrom(provider)
        for key, urns in resource.property_dependencies.items():
            item.propertyDependencies[key].urns.extend(urns)
        resources.append(item)
    for diag in analyzer.AnalyzeStack(proto.AnalyzeStackRequest(resources=resources)).diagnostics:
        found.add(
            (diag.policyName, diag.urn, diag.message.split("\n", 1)[-1], diag.enforcementLevel)
        )
    return found


def test_the_pack_declares_every_rule_with_its_metadata(analyzer: Any) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "uae-sovereign-gpu-platform"
    policies = {p.name: p for p in info.policies}
    assert set(policies) == {rule.id for rule in ALL_RULES}
    region = policies["uae-aws-region-allowlist"]
    assert region.enforcementLevel == proto.MANDATORY
    assert "me-central-1" in json_format.MessageToJson(region.configSchema)
    assert region.remediation_steps
    assert policies["k8s-read-only-root-filesystem"].enforcementLevel == proto.ADVISORY
    # Every policy carries its rule's metadata (the rule catalogue's entry) to the engine.
    severities = proto.analyzer_pb2.PolicySeverity
    for rule in ALL_RULES:
        policy = policies[rule.id]
        assert policy.description == rule.description, rule.id
        assert policy.remediation_steps == rule.remediation, rule.id
        assert list(policy.tags) == list(rule.controls), rule.id
        assert policy.framework.reference == "; ".join(rule.controls), rule.id
        assert severities.Name(policy.severity) == f"POLICY_SEVERITY_{rule.severity.name}"
        level = proto.MANDATORY if rule.enforcement.value == "mandatory" else proto.ADVISORY
        assert policy.enforcementLevel == level, rule.id
        schema = json_format.MessageToDict(policy.configSchema.properties)
        assert set(schema) == {*rule.config_keys, "exemptions"}, rule.id


def test_the_engine_and_the_review_report_the_same_findings(analyzer: Any) -> None:
    document = compliant_plan()
    find_step(document, "aws:ebs/volume:Volume", "scratch")["inputs"]["encrypted"] = False
    find_step(document, "aws:kms/key:Key", "storage-key")["inputs"]["multiRegion"] = True
    find_step(document, "aws:ec2/securityGroup:SecurityGroup", "nodes")["inputs"]["region"] = (
        "eu-west-1"
    )
    containers = find_step(document, "kubernetes:batch/v1:Job", "train")["inputs"]["spec"][
        "template"
    ]["spec"]
    containers["containers"][0]["securityContext"]["privileged"] = True
    del find_step(document, "aws:s3/bucketPolicy:BucketPolicy", "data")["inputs"]["policy"]
    plan = parse_plan(document, Path("plan.json"))
    levels = {"mandatory": proto.MANDATORY, "advisory": proto.ADVISORY}
    expected = {
        (f.rule_id, f.urn or "", f.message, levels[f.enforcement.value])
        for f in review(document).findings
        if not f.unknown
    }
    assert len(expected) == 5
    assert engine_findings(analyzer, plan) == expected


def test_unknown_values_give_the_same_advisories(analyzer: Any) -> None:
    document = json.loads((Path(__file__).parent / "fixtures" / "real-preview.json").read_text())
    plan = parse_plan(document, Path("real-preview.json"))
    engine = engine_findings(analyzer, plan)
    assert all(level == proto.ADVISORY for _, _, _, level in engine)
    engine_rules = {policy for policy, _, message, _ in engine if "during preview" in message}
    review_rules = {f.rule_id for f in review(document).findings if f.unknown}
    assert engine_rules == review_rules == {"aws-s3-bucket-tls-only"}


def test_an_unreadable_policy_document_is_the_same_violation_in_the_engine(analyzer: Any) -> None:
    document = compliant_plan()
    find_step(document, "aws:iam/rolePolicy:RolePolicy", "training-team-a-data")["inputs"][
        "policy"
    ] = "{not json"
    plan = parse_plan(document, Path("plan.json"))
    expected = {
        (f.rule_id, f.urn or "", f.message, proto.MANDATORY)
        for f in review(document).findings
        if not f.unknown
    }
    assert {rule for rule, _, _, _ in expected} == {
        "aws-iam-no-admin-wildcard",
        "aws-iam-training-role-scoped",
    }
    assert engine_findings(analyzer, plan) == expected


def configure(analyzer: Any, entries: dict[str, tuple[int, dict[str, Any]]]) -> None:
    """Send the engine's Configure call: per policy, its enforcement level and properties."""
    request = proto.ConfigureAnalyzerRequest()
    for name, (level, properties) in entries.items():
        request.policyConfig[name].enforcementLevel = level
        request.policyConfig[name].properties.CopyFrom(struct(properties))
    analyzer.Configure(request)


def default_levels() -> dict[str, tuple[int, dict[str, Any]]]:
    levels = {"mandatory": proto.MANDATORY, "advisory": proto.ADVISORY}
    return {rule.id: (levels[rule.enforcement.value], {}) for rule in ALL_RULES}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"uae-aws-region-allowlist": (proto.DISABLED, {})}, "uae-aws-region-allowlist"),
        ({"uae-kms-no-multi-region": (proto.ADVISORY, {})}, "uae-kms-no-multi-region"),
        (
            {"uae-aws-region-allowlist": (proto.MANDATORY, {"allowedRegions": ["eu-west-1"]})},
            "allowedRegions",
        ),
        (
            {"uae-k8s-site-declaration": (proto.MANDATORY, {"allowedCountries": ["BH"]})},
            "allowedCountries",
        ),
    ],
)
def test_the_engine_refuses_pack_config_that_weakens_residency(
    analyzer: Any, change: dict[str, tuple[int, dict[str, Any]]], expected: str
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        configure(analyzer, {**default_levels(), **change})
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in refused.value.details()
    assert "pack config" in refused.value.details()


def test_the_engine_accepts_pack_config_that_keeps_residency(analyzer: Any) -> None:
    configure(
        analyzer,
        {
            **default_levels(),
            "k8s-read-only-root-filesystem": (proto.DISABLED, {}),
            "uae-aws-region-allowlist": (proto.MANDATORY, {"allowedRegions": ["me-central-1"]}),
        },
    )
    configure(analyzer, default_levels())  # back to the defaults for the other tests
