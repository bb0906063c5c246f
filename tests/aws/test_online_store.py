"""The feature store's online store on ElastiCache, under the recording mocks: private,
reachable from the cluster only, encrypted at rest with the stack's key and in transit
(TLS required), an AUTH token kept secret, in-region snapshots kept, protected."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pytest

from modules.aws.online_store.component import OnlineStore, OnlineStoreArgs
from modules.aws.online_store.spec import (
    OnlineStoreSpec,
    auth_token_problem,
    connection_string,
)
from modules.aws.private_data_store import DataStorePlacement
from modules.validation import InvalidArgsError
from tests.conftest import RunUnderMocks

KEY = "arn:aws:kms:me-central-1:123456789012:key/00000000-0000-4000-8000-000000000001"
TOKEN = "n0t-a-real-token-but-long-enough"
GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"


def program(spec: OnlineStoreSpec) -> None:
    provider = aws.Provider("aws-me-central-1", region="me-central-1")
    OnlineStore(
        "features-online",
        OnlineStoreArgs(
            name_prefix="gpu-test",
            spec=spec,
            placement=DataStorePlacement(
                vpc_id="vpc-1",
                subnet_ids=["subnet-private-a", "subnet-private-b"],
                client_security_group_id="sg-cluster",
            ),
            storage_key_arn=KEY,
            auth_token=pulumi.Output.secret(TOKEN),
        ),
        pulumi.ResourceOptions(provider=provider),
    )


def of_type(registrations: dict[str, Any], type_token: str) -> list[Any]:
    return [r for r in registrations.values() if r.type == type_token]


def test_the_replication_group_is_encrypted_authenticated_and_recoverable(
    run_under_mocks: RunUnderMocks,
) -> None:
    registrations = run_under_mocks(lambda: program(OnlineStoreSpec()))
    (group,) = of_type(registrations, GROUP)
    inputs = group.inputs
    assert group.protect
    assert inputs["atRestEncryptionEnabled"] is True and inputs["kmsKeyId"] == KEY
    assert inputs["transitEncryptionEnabled"] is True
    assert inputs["transitEncryptionMode"] == "required"
    # The token reaches the engine as a secret, never as plain text in the state.
    # (the recording runtime shows a secret as "[secret]").
    assert inputs["authToken"] == "[secret]"
    assert inputs["snapshotRetentionLimit"] == 7
    assert inputs["finalSnapshotIdentifier"] == "gpu-test-features-final"
    assert "snapshotArns" not in inputs and "snapshotName" not in inputs
    assert inputs["numCacheClusters"] == 2
    assert inputs["automaticFailoverEnabled"] is True and inputs["multiAzEnabled"] is True
    assert (inputs["engine"], inputs["engineVersion"]) == ("redis", "7.1")


def test_it_is_private_and_admits_only_the_cluster(run_under_mocks: RunUnderMocks) -> None:
    registrations = run_under_mocks(lambda: program(OnlineStoreSpec()))
    (subnets,) = of_type(registrations, "aws:elasticache/subnetGroup:SubnetGroup")
    assert subnets.inputs["subnetIds"] == ["subnet-private-a", "subnet-private-b"]
    (group,) = of_type(registrations, GROUP)
    (security_group,) = of_type(registrations, "aws:ec2/securityGroup:SecurityGroup")
    assert group.property_dependencies["securityGroupIds"] == [security_group.urn]
    assert group.property_dependencies["subnetGroupName"] == [subnets.urn]
    (rule,) = of_type(registrations, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert rule.inputs["referencedSecurityGroupId"] == "sg-cluster"
    assert (rule.inputs["fromPort"], rule.inputs["toPort"]) == (6379, 6379)
    assert "cidrIpv4" not in rule.inputs and "cidrIpv6" not in rule.inputs
    (parameters,) = of_type(registrations, "aws:elasticache/parameterGroup:ParameterGroup")
    assert parameters.inputs["parameters"] == [{"name": "maxmemory-policy", "value": "noeviction"}]


def test_no_replica_means_no_failover(run_under_mocks: RunUnderMocks) -> None:
    registrations = run_under_mocks(lambda: program(OnlineStoreSpec(replicas=0)))
    (group,) = of_type(registrations, GROUP)
    assert group.inputs["numCacheClusters"] == 1
    assert group.inputs["automaticFailoverEnabled"] is False


def test_the_spec_reports_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as caught:
        OnlineStoreSpec(node_type="m5.large", replicas=9, snapshot_retention_days=0)
    assert {p.field for p in caught.value.problems} == {
        "node_type",
        "replicas",
        "snapshot_retention_days",
    }


@pytest.mark.parametrize(
    ("token", "fragment"),
    [
        ("short", "use 16 to 128"),
        ("x" * 129, "use 16 to 128"),
        ("has/a/slash/in/it/long", "'/'"),
        ("has a space in it long", "' '"),
        ('quote"and@at-long-enough', "'\"@'"),
        ("comma,splits-feast-connection", "','"),
    ],
)
def test_auth_token_rules(token: str, fragment: str) -> None:
    problem = auth_token_problem(token)
    assert problem is not None and fragment in problem


def test_a_good_token_and_the_connection_string() -> None:
    assert auth_token_problem(TOKEN) is None
    assert connection_string("master.x.cache.amazonaws.com") == (
        "master.x.cache.amazonaws.com:6379,ssl=true,password=${REDIS_AUTH_TOKEN}"
    )
