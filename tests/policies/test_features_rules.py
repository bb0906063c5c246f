"""The feature-store rules: a compliant plan with an ElastiCache online store (as
`modules.aws.online_store` declares it) and an on-premises Redis-protocol release (as
`modules.k8s.features` declares it) passes every rule; each store broken one property at
a time, or with the property left out, fails exactly its rule (the failing, passing and
missing twins)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from stacks.offline_plan import build_plan
from tests.policies.builder import ECR, PlanBuilder, compliant_plan, find_step, key_arn
from tests.policies.conftest import failing_rules
from tests.policies.twins import breaking_caught, twin_tests

Plan = dict[str, Any]
GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
RELEASE = "kubernetes:helm.sh/v3:Release"


def group_inputs() -> dict[str, Any]:
    return {
        "replicationGroupId": "gpu-test-features",
        "description": "Feast online store",
        "engine": "redis",
        "engineVersion": "7.1",
        "nodeType": "cache.t4g.small",
        "numCacheClusters": 2,
        "automaticFailoverEnabled": True,
        "multiAzEnabled": True,
        "subnetGroupName": "gpu-test-features",
        "securityGroupIds": ["sg-0123456789abcdef0"],
        "atRestEncryptionEnabled": True,
        "kmsKeyId": key_arn("1"),
        "transitEncryptionEnabled": True,
        "transitEncryptionMode": "required",
        "authToken": {
            "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
            "value": "a-token-of-sixteen-or-more",
        },
        "snapshotRetentionLimit": 7,
        "snapshotWindow": "23:00-00:00",
        "finalSnapshotIdentifier": "gpu-test-features-final",
    }


def release_inputs() -> dict[str, Any]:
    return {
        "chart": "valkey",
        "version": "0.11.0",
        "namespace": "feast",
        "repositoryOpts": {"repo": "https://valkey.io/valkey-helm/"},
        "values": {
            "image": {"registry": ECR, "repository": "valkey/valkey", "tag": "9.1.1"},
            "auth": {"enabled": True, "usersExistingSecret": "feast-online-store-users"},
            "tls": {"enabled": True, "existingSecret": "feast-online-store-tls"},
            "dataStorage": {"enabled": True, "requestedSize": "20Gi"},
        },
    }


def plan_with_stores() -> Plan:
    plan = compliant_plan()
    steps = [s["newState"] for s in plan["steps"]]
    aws = next(s["urn"] for s in steps if s["type"] == "pulumi:providers:aws")
    k8s = next(s["urn"] for s in steps if s["type"] == "pulumi:providers:kubernetes")
    key = find_step(plan, "aws:kms/key:Key", "storage-key")["urn"]
    builder = PlanBuilder()
    builder.add(GROUP, "features-online", group_inputs(), provider=f"{aws}::id",
                deps={"kmsKeyId": [key]})  # fmt: skip
    builder.add(RELEASE, "feast-online-store", release_inputs(), provider=f"{k8s}::id")
    plan["steps"].extend(builder.steps)
    return plan


def group(plan: Plan) -> dict[str, Any]:
    return find_step(plan, GROUP, "features-online")["inputs"]  # type: ignore[no-any-return]


def values(plan: Plan) -> dict[str, Any]:
    return find_step(plan, RELEASE, "feast-online-store")["inputs"]["values"]  # type: ignore[no-any-return]


def set_group(**changes: Any) -> Callable[[Plan], None]:
    return lambda plan: group(plan).update(changes)


def drop_group(*keys: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        for key in keys:
            del group(plan)[key]

    return mutate


def set_value(section: str, key: str, value: Any) -> Callable[[Plan], None]:
    return lambda plan: values(plan)[section].update({key: value})


def drop_value(section: str) -> Callable[[Plan], None]:
    return lambda plan: values(plan).pop(section)


#: At rest and its key: the platform-wide CMK rule (ElastiCache is in its table); the
#: subnet and security groups: the platform-wide data-store rule (likewise).
AT_REST, PRIVATE = "aws-encryption-customer-managed-key", "aws-data-store-private"
TLS, AUTH = "aws-elasticache-tls", "aws-elasticache-auth"
RECOVERABLE, ONPREM = "aws-elasticache-recoverable", "k8s-online-store-protected"

AWS_MANAGED_KEY = "arn:aws:kms:me-central-1:123456789012:alias/aws/elasticache"

CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("at-rest-off", set_group(atRestEncryptionEnabled=False), AT_REST,
     "`atRestEncryptionEnabled` is not true: cached data"),
    ("at-rest-missing", drop_group("atRestEncryptionEnabled"), AT_REST,
     "`atRestEncryptionEnabled` is not true"),
    ("no-key", drop_group("kmsKeyId"), AT_REST, "`kmsKeyId` is not set"),
    ("aws-managed-key", set_group(kmsKeyId=AWS_MANAGED_KEY), AT_REST, "AWS-managed key"),
    ("key-abroad", set_group(kmsKeyId=key_arn("1", "eu-west-1")), AT_REST, "eu-west-1"),
    ("transit-off", set_group(transitEncryptionEnabled=False), TLS, "clear text"),
    ("transit-missing", drop_group("transitEncryptionEnabled", "transitEncryptionMode"), TLS,
     "clear text"),
    ("transit-preferred", set_group(transitEncryptionMode="preferred"), TLS, "preferred"),
    ("no-auth", drop_group("authToken"), AUTH, "any client in the VPC"),
    ("empty-auth", set_group(authToken=""), AUTH, "any client in the VPC"),
    ("default-subnets", drop_group("subnetGroupName"), PRIVATE, "default VPC"),
    ("default-security-group", set_group(securityGroupIds=[]), PRIVATE, "default security group"),
    ("security-groups-missing", drop_group("securityGroupIds"), PRIVATE, "default security group"),
    ("classic-groups", set_group(securityGroupNames=["default"]), PRIVATE, "EC2-Classic"),
    ("no-snapshots", set_group(snapshotRetentionLimit=0), RECOVERABLE, "snapshots are off"),
    ("snapshots-missing", drop_group("snapshotRetentionLimit"), RECOVERABLE, "keeps no snapshots"),
    ("no-final-snapshot", drop_group("finalSnapshotIdentifier"), RECOVERABLE, "leaves no snapshot"),
    ("seeded-abroad", set_group(snapshotArns=["arn:aws:s3:eu-west-1:123456789012:bucket/s.rdb"]),
     RECOVERABLE, "eu-west-1"),
    ("onprem-auth-off", set_value("auth", "enabled", False), ONPREM, "`values.auth.enabled`"),
    ("onprem-auth-missing", drop_value("auth"), ONPREM, "`values.auth.enabled`"),
    ("onprem-tls-off", set_value("tls", "enabled", False), ONPREM, "`values.tls.enabled`"),
    ("onprem-tls-missing", drop_value("tls"), ONPREM, "`values.tls.enabled`"),
    ("onprem-no-persistence", set_value("dataStorage", "enabled", False), ONPREM,
     "`values.dataStorage.enabled`"),
    ("onprem-persistence-missing", drop_value("dataStorage"), ONPREM,
     "`values.dataStorage.enabled`"),
]  # fmt: skip


test_the_plan_with_both_stores_passes_every_rule, test_the_broken_store_fails_exactly_the_rule = (
    twin_tests(plan_with_stores, CASES)
)


def test_rbac_users_instead_of_a_token_pass() -> None:
    plan = plan_with_stores()
    drop_group("authToken")(plan)
    set_group(userGroupIds=["feast-users"])(plan)
    assert failing_rules(plan) == set()


def test_a_snapshot_in_the_region_may_seed_the_group() -> None:
    plan = plan_with_stores()
    set_group(snapshotArns=["arn:aws:s3:me-central-1:123456789012:bucket/s.rdb"])(plan)
    assert failing_rules(plan) == set()


def test_other_charts_are_not_online_stores() -> None:
    plan = plan_with_stores()
    find_step(plan, RELEASE, "feast-online-store")["inputs"]["chart"] = "not-a-cache"
    drop_value("auth")(plan)
    assert ONPREM not in failing_rules(plan)


def test_an_oci_reference_to_the_chart_is_recognised() -> None:
    plan = plan_with_stores()
    find_step(plan, RELEASE, "feast-online-store")["inputs"]["chart"] = (
        "oci://example/charts/valkey"
    )
    drop_value("tls")(plan)
    assert failing_rules(plan) == {ONPREM}


# -- broken twins of the shipped plans ----------------------------------------------------


@functools.cache
def _shipped(stack: str) -> Plan:
    return build_plan(stack)


def _shipped_group(plan: Plan) -> dict[str, Any]:
    (state,) = [s["newState"] for s in plan["steps"] if s["newState"]["type"] == GROUP]
    return state["inputs"]  # type: ignore[no-any-return]


def _shipped_valkey(plan: Plan) -> dict[str, Any]:
    (state,) = [
        s["newState"]
        for s in plan["steps"]
        if s["newState"]["type"] == RELEASE and s["newState"]["inputs"].get("chart") == "valkey"
    ]
    return state["inputs"]["values"]  # type: ignore[no-any-return]


def _clear_text(plan: Plan) -> None:
    _shipped_group(plan)["transitEncryptionEnabled"] = False


def _unencrypted_at_rest(plan: Plan) -> None:
    _shipped_group(plan)["atRestEncryptionEnabled"] = False


def _unauthenticated(plan: Plan) -> None:
    del _shipped_group(plan)["authToken"]


def _default_network(plan: Plan) -> None:
    del _shipped_group(plan)["subnetGroupName"]


def _no_snapshots(plan: Plan) -> None:
    _shipped_group(plan)["snapshotRetentionLimit"] = 0


def _valkey_open(plan: Plan) -> None:
    _shipped_valkey(plan)["auth"]["enabled"] = False


@pytest.mark.parametrize(
    ("stack", "mutate", "rule_id"),
    [
        ("smb-cpu", _clear_text, TLS),
        ("smb-cpu", _unencrypted_at_rest, AT_REST),
        ("smb-cpu", _unauthenticated, AUTH),
        ("smb-cpu", _default_network, PRIVATE),
        ("smb-cpu", _no_snapshots, RECOVERABLE),
        ("onprem-ib", _valkey_open, ONPREM),
    ],
    ids=["transit-off", "at-rest-off", "no-auth", "default-subnets", "no-snapshots", "valkey-open"],
)
def test_a_broken_twin_of_a_shipped_store_is_caught(
    stack: str, mutate: Callable[[Plan], None], rule_id: str
) -> None:
    breaking_caught(_shipped(stack), mutate, rule_id)
