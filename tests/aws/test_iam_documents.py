"""Every IAM document the stacks create is valid for AWS (moto's IAM validator) and
least-privilege: no ``*`` action on ``*`` resources, no wildcard principals."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from moto import mock_aws

from modules.aws import iam
from modules.aws.kms import KEY_PURPOSES, key_policy
from modules.aws.storage import data_bucket_policy
from tests.conftest import shipped_plan

AWS_STACKS = ("uae-prod", "uae-dev", "smb-cpu")


def _documents(stack: str, type_token: str, field: str) -> dict[str, dict[str, Any]]:
    """URN -> the JSON document in ``field`` of each resource of ``type_token``."""
    registrations, _ = shipped_plan(stack)
    return {
        reg.urn: json.loads(reg.inputs[field])
        for reg in registrations.values()
        if reg.type == type_token
    }


def identity_documents(stack: str) -> dict[str, dict[str, Any]]:
    return _documents(stack, "aws:iam/rolePolicy:RolePolicy", "policy")


def trust_documents(stack: str) -> dict[str, dict[str, Any]]:
    return _documents(stack, "aws:iam/role:Role", "assumeRolePolicy")


def statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    found = document["Statement"]
    return found if isinstance(found, list) else [found]


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_identity_policies_are_accepted_by_iam(stack: str) -> None:
    documents = identity_documents(stack)
    assert documents
    with mock_aws():
        client = boto3.client("iam", region_name="us-east-1")
        for index, (urn, document) in enumerate(sorted(documents.items())):
            client.create_policy(PolicyName=f"p{index}", PolicyDocument=json.dumps(document)), urn


def test_moto_rejects_a_malformed_document() -> None:
    """The check above can fail: a misspelled element is refused."""
    broken = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Actions": "s3:GetObject", "Resource": "*"}],
    }
    with mock_aws(), pytest.raises(client_error()):
        boto3.client("iam", region_name="us-east-1").create_policy(
            PolicyName="x", PolicyDocument=json.dumps(broken)
        )


def client_error() -> type[Exception]:
    from botocore.exceptions import ClientError  # noqa: PLC0415

    return ClientError


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_no_wildcard_action_on_wildcard_resource(stack: str) -> None:
    for urn, document in identity_documents(stack).items():
        for statement in statements(document):
            if statement["Effect"] != "Allow":
                continue
            actions = as_list(statement["Action"])
            assert not any(a in ("*", "*:*") or a.endswith(":*") for a in actions), urn
            if as_list(statement["Resource"]) == ["*"]:
                # Only read-only discovery, or writes fenced by a condition.
                writes = [
                    a
                    for a in actions
                    if not a.split(":")[1].startswith(("Describe", "Get", "List"))
                ]
                assert not writes or "Condition" in statement, (urn, writes)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_trust_policies_name_one_service_and_only_assume(stack: str) -> None:
    for urn, document in trust_documents(stack).items():
        for statement in statements(document):
            assert statement["Effect"] == "Allow"
            principal = statement["Principal"]
            assert principal != "*" and set(principal) == {"Service"}, urn
            assert as_list(principal["Service"])[0].endswith(".amazonaws.com")
            assert set(as_list(statement["Action"])) <= {"sts:AssumeRole", "sts:TagSession"}, urn


def test_team_role_is_limited_to_its_prefix_and_the_storage_key() -> None:
    document = iam.training_data_access(
        "arn:aws:s3:::data",
        "teams/research/",
        "arn:aws:kms:me-central-1:123456789012:key/k",
        "me-central-1",
    )
    by_sid = {s["Sid"]: s for s in statements(document)}
    assert by_sid["ListOwnPrefix"]["Condition"] == {
        "StringLike": {"s3:prefix": ["teams/research/", "teams/research/*"]}
    }
    assert by_sid["ReadWriteOwnPrefix"]["Resource"] == "arn:aws:s3:::data/teams/research/*"
    assert by_sid["UseStorageKeyThroughS3"]["Condition"] == {
        "StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}
    }
    with mock_aws():
        boto3.client("iam", region_name="us-east-1").create_policy(
            PolicyName="team", PolicyDocument=json.dumps(document)
        )


@pytest.mark.parametrize("purpose", KEY_PURPOSES)
def test_key_policies_have_no_wildcard_principal(purpose: str) -> None:
    document = key_policy(purpose, "123456789012", "me-central-1")  # type: ignore[arg-type]
    for statement in statements(document):
        principal = statement["Principal"]
        assert principal != "*"
        assert "*" not in as_list(principal.get("AWS", [])), statement["Sid"]
    with mock_aws():
        boto3.client("kms", region_name="me-central-1").create_key(Policy=json.dumps(document))


def test_data_bucket_policy_refuses_plain_http_and_other_keys() -> None:
    key = "arn:aws:kms:me-central-1:123456789012:key/k"
    document = data_bucket_policy("arn:aws:s3:::data", key)
    sids = {s["Sid"]: s for s in statements(document)}
    assert sids["DenyInsecureTransport"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert sids["DenyOtherKeys"]["Condition"] == {
        "StringNotEqualsIfExists": {"s3:x-amz-server-side-encryption-aws-kms-key-id": key}
    }
    assert all(s["Effect"] == "Deny" for s in statements(document))
    with mock_aws():
        s3 = boto3.client("s3", region_name="me-central-1")
        s3.create_bucket(
            Bucket="data", CreateBucketConfiguration={"LocationConstraint": "me-central-1"}
        )
        s3.put_bucket_policy(Bucket="data", Policy=json.dumps(document))


def test_flow_log_role_lists_groups_on_star_and_writes_only_its_group() -> None:
    """``logs:DescribeLogGroups`` is authorised against ``*`` (issue 23's finding): it
    sits alone in a statement on ``*``; the writes stay on the flow-log group."""
    (document,) = [
        json.loads(reg.inputs["policy"])
        for reg in shipped_plan("uae-prod")[0].values()
        if reg.type == "aws:iam/rolePolicy:RolePolicy" and reg.name == "network-flow-logs-deliver"
    ]
    by_sid = {s["Sid"]: s for s in statements(document)}
    assert set(by_sid) == {"WriteOwnLogGroup", "ListLogGroups"}
    assert by_sid["ListLogGroups"]["Action"] == "logs:DescribeLogGroups"
    assert by_sid["ListLogGroups"]["Resource"] == "*"
    write = by_sid["WriteOwnLogGroup"]
    assert "logs:DescribeLogGroups" not in write["Action"]
    group = (
        "arn:aws:logs:me-central-1:123456789012:log-group:/gpuplatform/gpu-uae-prod/vpc-flow-logs"
    )
    assert write["Resource"] == [group, f"{group}:*"]
    with mock_aws():
        boto3.client("iam", region_name="us-east-1").create_policy(
            PolicyName="flow-logs", PolicyDocument=json.dumps(document)
        )
