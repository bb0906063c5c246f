"""Databases: RDS kept private, its credentials managed, its data recoverable.

Encryption of RDS storage, Performance Insights and the managed master secret is
`aws-encryption-customer-managed-key`'s (with `uae-kms-key-from-stack`); the region is
`uae-aws-region-allowlist`'s. These rules cover what is particular to databases.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.catalogue import resource_rule
from policies.model import ResourceView
from policies.rules.checks import retention_problem
from policies.settings import Settings
from policies.values import known

RDS_INSTANCE = "aws:rds/instance:Instance"
RDS_CLUSTER = "aws:rds/cluster:Cluster"


def _is_replica(resource: ResourceView) -> bool:
    """A read replica takes its credentials and backups from its source."""
    return resource.props.get("replicateSourceDb") not in (None, "")


def primary_database(resource: ResourceView) -> bool:
    """RDS instances and Aurora clusters that are not read replicas."""
    return resource.type in (RDS_INSTANCE, RDS_CLUSTER) and not _is_replica(resource)


@resource_rule("aws-rds-not-public")
def rds_not_public(resource: ResourceView, settings: Settings) -> Iterator[str]:
    # Absent means false: the provider's default for an instance in a DB subnet group.
    if known(resource.props.get("publiclyAccessible"), "publiclyAccessible") is True:
        yield "`publiclyAccessible` is true: the database gets a public address"


@resource_rule("aws-rds-managed-credentials")
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


@resource_rule("aws-rds-recoverable")
def rds_recoverable(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    problem = retention_problem(props, "backupRetentionPeriod", "", "automated backups are off")
    if problem:
        yield problem
    if known(props.get("deletionProtection"), "deletionProtection") is not True:
        yield "`deletionProtection` is not true"
    if known(props.get("skipFinalSnapshot"), "skipFinalSnapshot") is True:
        yield "`skipFinalSnapshot` is true: deleting the database leaves no snapshot"
    elif props.get("finalSnapshotIdentifier") in (None, ""):
        yield "`finalSnapshotIdentifier` is not set: AWS refuses the final snapshot without it"
