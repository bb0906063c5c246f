"""The database rules (and RDS under the CMK rule) on a compliant plan with an RDS
instance, broken one property at a time, and on broken twins of a shipped plan."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import pytest

from stacks.offline_plan import build_plan
from tests.policies.builder import PlanBuilder, compliant_plan, find_step, key_arn
from tests.policies.conftest import failing_rules, review
from tests.policies.twins import twin_tests

Plan = dict[str, Any]
RDS = "aws:rds/instance:Instance"
CMK_RULE = "aws-encryption-customer-managed-key"


def rds_inputs() -> dict[str, Any]:
    """An RDS instance as `modules.aws.database` declares it."""
    return {
        "engine": "postgres",
        "engineVersion": "17",
        "instanceClass": "db.t4g.medium",
        "allocatedStorage": 20,
        "storageEncrypted": True,
        "kmsKeyId": key_arn("1"),
        "manageMasterUserPassword": True,
        "masterUserSecretKmsKeyId": key_arn("1"),
        "iamDatabaseAuthenticationEnabled": True,
        "publiclyAccessible": False,
        "dbSubnetGroupName": "gpu-test-mlflow",
        "vpcSecurityGroupIds": ["sg-0123456789abcdef0"],
        "backupRetentionPeriod": 7,
        "deletionProtection": True,
        "skipFinalSnapshot": False,
        "finalSnapshotIdentifier": "mlflow-final",
        "performanceInsightsEnabled": True,
        "performanceInsightsKmsKeyId": key_arn("1"),
        "username": "mlflow",
    }


def plan_with_database() -> Plan:
    """The pack's compliant plan plus an RDS instance under the plan's key."""
    plan = compliant_plan()
    provider = next(
        s["newState"]["urn"]
        for s in plan["steps"]
        if s["newState"]["type"] == "pulumi:providers:aws"
    )
    key = find_step(plan, "aws:kms/key:Key", "storage-key")["urn"]
    builder = PlanBuilder()
    builder.add(
        RDS,
        "tracking-db",
        rds_inputs(),
        provider=f"{provider}::id",
        deps={
            "kmsKeyId": [key],
            "masterUserSecretKmsKeyId": [key],
            "performanceInsightsKmsKeyId": [key],
        },
    )
    plan["steps"].extend(builder.steps)
    return plan


def database(plan: Plan) -> dict[str, Any]:
    return find_step(plan, RDS, "tracking-db")["inputs"]  # type: ignore[no-any-return]


def set_props(**values: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        database(plan).update(values)

    return mutate


def drop(*keys: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        for key in keys:
            del database(plan)[key]

    return mutate


CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("public", set_props(publiclyAccessible=True), "aws-rds-not-public", "public address"),
    (
        "default-subnets",
        drop("dbSubnetGroupName"),
        "aws-data-store-private",
        "`dbSubnetGroupName` is not set",
    ),
    (
        "default-security-group",
        set_props(vpcSecurityGroupIds=[]),
        "aws-data-store-private",
        "`vpcSecurityGroupIds` is empty",
    ),
    (
        "static-password",
        set_props(password="hunter2-hunter2"),
        "aws-rds-managed-credentials",
        "`password` is set",
    ),
    (
        "unmanaged-credentials",
        set_props(manageMasterUserPassword=False, iamDatabaseAuthenticationEnabled=False),
        "aws-rds-managed-credentials",
        "nothing manages",
    ),
    (
        "credentials-missing",
        drop(
            "manageMasterUserPassword",
            "masterUserSecretKmsKeyId",
            "iamDatabaseAuthenticationEnabled",
        ),
        "aws-rds-managed-credentials",
        "nothing manages",
    ),
    ("no-backups", set_props(backupRetentionPeriod=0), "aws-rds-recoverable", "backups are off"),
    (
        "backups-missing",
        drop("backupRetentionPeriod"),
        "aws-rds-recoverable",
        "`backupRetentionPeriod` is not set",
    ),
    (
        "deletable",
        set_props(deletionProtection=False),
        "aws-rds-recoverable",
        "`deletionProtection`",
    ),
    (
        "deletion-protection-missing",
        drop("deletionProtection"),
        "aws-rds-recoverable",
        "`deletionProtection`",
    ),
    (
        "no-final-snapshot",
        set_props(skipFinalSnapshot=True),
        "aws-rds-recoverable",
        "leaves no snapshot",
    ),
    (
        "final-snapshot-name-missing",
        drop("finalSnapshotIdentifier"),
        "aws-rds-recoverable",
        "`finalSnapshotIdentifier`",
    ),
    ("unencrypted", set_props(storageEncrypted=False), CMK_RULE, "`storageEncrypted`"),
    ("encryption-missing", drop("storageEncrypted"), CMK_RULE, "`storageEncrypted`"),
    ("no-key", drop("kmsKeyId"), CMK_RULE, "`kmsKeyId` is not set"),
    (
        "aws-managed-key",
        set_props(kmsKeyId="arn:aws:kms:me-central-1:123456789012:alias/aws/rds"),
        CMK_RULE,
        "AWS-managed key",
    ),
    (
        "insights-without-key",
        drop("performanceInsightsKmsKeyId"),
        CMK_RULE,
        "`performanceInsightsKmsKeyId` is not set",
    ),
    (
        "managed-secret-without-key",
        drop("masterUserSecretKmsKeyId"),
        CMK_RULE,
        "`masterUserSecretKmsKeyId` is not set",
    ),
]


test_the_plan_with_a_database_passes_every_rule, test_the_broken_database_fails_exactly_the_rule = (
    twin_tests(plan_with_database, CASES)
)


def test_public_access_left_out_is_the_providers_private_default() -> None:
    plan = plan_with_database()
    drop("publiclyAccessible")(plan)
    assert failing_rules(plan) == set()


def test_a_read_replica_takes_credentials_and_backups_from_its_source() -> None:
    plan = plan_with_database()
    drop("manageMasterUserPassword", "masterUserSecretKmsKeyId", "backupRetentionPeriod")(plan)
    set_props(replicateSourceDb="arn:aws:rds:me-central-1:123456789012:db:primary")(plan)
    assert failing_rules(plan) == set()


# -- broken twins of a shipped plan ---------------------------------------------------


@functools.cache
def _prod() -> Plan:
    return build_plan("uae-prod")


def shipped_database(plan: Plan) -> dict[str, Any]:
    (state,) = [s["newState"] for s in plan["steps"] if s["newState"]["type"] == RDS]
    return state["inputs"]  # type: ignore[no-any-return]


def _public(plan: Plan) -> None:
    shipped_database(plan)["publiclyAccessible"] = True


def _unencrypted(plan: Plan) -> None:
    inputs = shipped_database(plan)
    inputs["storageEncrypted"] = False
    del inputs["kmsKeyId"]


def _static_password(plan: Plan) -> None:
    inputs = shipped_database(plan)
    inputs["manageMasterUserPassword"] = False
    inputs["iamDatabaseAuthenticationEnabled"] = False
    del inputs["masterUserSecretKmsKeyId"]


@pytest.mark.parametrize(
    ("mutate", "rule_id"),
    [
        (_public, "aws-rds-not-public"),
        (_unencrypted, CMK_RULE),
        (_static_password, "aws-rds-managed-credentials"),
    ],
    ids=["public", "unencrypted", "unmanaged-credentials"],
)
def test_a_broken_twin_of_the_shipped_database_is_caught(
    mutate: Callable[[Plan], None], rule_id: str
) -> None:
    before = failing_rules(_prod())
    assert rule_id not in before
    plan = copy.deepcopy(_prod())
    mutate(plan)
    assert failing_rules(plan) - before == {rule_id}
    assert not review(plan).passed
