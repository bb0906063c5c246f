"""Databases: RDS kept private, its credentials managed, its data recoverable.

Encryption of RDS storage, Performance Insights and the managed master secret is
`aws-encryption-customer-managed-key`'s (with `uae-kms-key-from-stack`); the region is
`uae-aws-region-allowlist`'s. These rules cover what is particular to databases.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import Severity

from policies import controls
from policies.model import ResourceView, resource_rule, types_in
from policies.settings import Settings
from policies.values import known

RDS_INSTANCE = "aws:rds/instance:Instance"
RDS_CLUSTER = "aws:rds/cluster:Cluster"
RDS_CLUSTER_INSTANCE = "aws:rds/clusterInstance:ClusterInstance"


def _is_replica(resource: ResourceView) -> bool:
    """A read replica takes its credentials and backups from its source."""
    return resource.props.get("replicateSourceDb") not in (None, "")


@resource_rule(
    id="aws-rds-not-public",
    description="RDS instances are not publicly accessible (no public IP, no public DNS).",
    severity=Severity.CRITICAL,
    remediation=(
        "Set `publiclyAccessible: false` and place the instance in a DB subnet group of "
        "private subnets; reach it from the cluster through a security group rule."
    ),
    controls=(controls.ISO_8_20, controls.ISO_8_22, controls.ISO_8_3, controls.PDPL_20_SECURITY),
    applies_to=types_in(RDS_INSTANCE, RDS_CLUSTER_INSTANCE),
)
def rds_not_public(resource: ResourceView, settings: Settings) -> Iterator[str]:
    # Absent means false: the provider's default for an instance in a DB subnet group.
    if known(resource.props.get("publiclyAccessible"), "publiclyAccessible") is True:
        yield "`publiclyAccessible` is true: the database gets a public address"


@resource_rule(
    id="aws-rds-managed-credentials",
    description=(
        "RDS master passwords are not chosen by the program: Secrets Manager generates and "
        "rotates them, or IAM database authentication is on and no password is set."
    ),
    severity=Severity.HIGH,
    remediation=(
        "Set `manageMasterUserPassword: true` with `masterUserSecretKmsKeyId` (a key of the "
        "stack) and drop `password`, or use `iamDatabaseAuthenticationEnabled: true`."
    ),
    controls=(controls.ISO_5_15, controls.ISO_5_18, controls.ISO_8_2, controls.PDPL_20_SECURITY),
    applies_to=lambda r: r.type in (RDS_INSTANCE, RDS_CLUSTER) and not _is_replica(r),
)
def rds_managed_credentials(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    managed = known(props.get("manageMasterUserPassword"), "manageMasterUserPassword") is True
    iam_auth = (
        known(props.get("iamDatabaseAuthenticationEnabled"), "iamDatabaseAuthenticationEnabled")
        is True
    )
    if props.get("password") not in (None, ""):
        yield "`password` is set: the master password is chosen by the program, never rotated"
    elif not (managed or iam_auth):
        yield (
            "neither `manageMasterUserPassword` nor `iamDatabaseAuthenticationEnabled` is true: "
            "nothing manages or rotates the master credentials"
        )


@resource_rule(
    id="aws-rds-recoverable",
    description=(
        "RDS databases keep automated backups, refuse deletion, and leave a final snapshot "
        "if deleted anyway."
    ),
    severity=Severity.MEDIUM,
    remediation=(
        "Set `backupRetentionPeriod` to 1 or more days (7 or more for production), "
        "`deletionProtection: true` and `skipFinalSnapshot: false` with a "
        "`finalSnapshotIdentifier`; protect the resource in Pulumi too."
    ),
    controls=(controls.ISO_8_13, controls.ISO_8_9),
    applies_to=lambda r: r.type in (RDS_INSTANCE, RDS_CLUSTER) and not _is_replica(r),
)
def rds_recoverable(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    retention = known(props.get("backupRetentionPeriod"), "backupRetentionPeriod")
    if retention is None:
        yield "`backupRetentionPeriod` is not set"
    elif not isinstance(retention, int | float) or retention < 1:
        yield f"`backupRetentionPeriod` is {retention}: automated backups are off"
    if known(props.get("deletionProtection"), "deletionProtection") is not True:
        yield "`deletionProtection` is not true"
    if known(props.get("skipFinalSnapshot"), "skipFinalSnapshot") is True:
        yield "`skipFinalSnapshot` is true: deleting the database leaves no snapshot"
    elif props.get("finalSnapshotIdentifier") in (None, ""):
        yield "`finalSnapshotIdentifier` is not set: AWS refuses the final snapshot without it"
