"""The feature store's stores: the online store (ElastiCache for Redis OSS on AWS, a
Redis-protocol server from a Helm chart on premises) kept private, encrypted,
authenticated and recoverable inside the region.

Checked by the platform-wide rules, from their tables: encryption at rest under a
customer-managed key in the region (`aws-encryption-customer-managed-key`,
`policies.rules.encryption`), the subnet group and security groups
(`aws-data-store-private`, `policies.rules.exposure`), the key's origin
(`uae-kms-key-from-stack`) and the region (`uae-aws-region-allowlist`). Here: TLS in
transit, authentication, snapshots, and the on-premises chart's settings. The offline
store is Parquet in the stack's data bucket and the registry a database on the tracking
server's RDS instance: both are covered by the bucket and RDS rules already.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.aws import parse_arn, region_of
from policies.catalogue import resource_rule
from policies.model import ResourceView
from policies.rules.checks import retention_problem
from policies.settings import Settings
from policies.values import as_list, dig, is_unknown, known

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
#: Charts of Redis-protocol servers an online store may run from on premises.
REDIS_CHARTS = ("valkey", "redis")


def _true(props: dict[str, Any], key: str) -> bool:
    return known(props.get(key), key) is True


@resource_rule("aws-elasticache-tls")
def elasticache_tls(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    if not _true(props, "transitEncryptionEnabled"):
        yield "`transitEncryptionEnabled` is not true: clients talk to Redis in clear text"
    elif known(props.get("transitEncryptionMode"), "transitEncryptionMode") == "preferred":
        yield "`transitEncryptionMode` is preferred: clients may still connect without TLS"


@resource_rule("aws-elasticache-auth")
def elasticache_auth(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    token = props.get("authToken")
    groups = as_list(known(props.get("userGroupIds"), "userGroupIds"))
    if token in (None, "") and not groups:
        yield "neither `authToken` nor `userGroupIds` is set: any client in the VPC may connect"


@resource_rule("aws-elasticache-recoverable")
def elasticache_recoverable(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    problem = retention_problem(
        props, "snapshotRetentionLimit", ": ElastiCache keeps no snapshots", "snapshots are off"
    )
    if problem:
        yield problem
    if props.get("finalSnapshotIdentifier") in (None, ""):
        yield "`finalSnapshotIdentifier` is not set: deleting the group leaves no snapshot"
    region = known(region_of(resource), "region")
    for index, arn_text in enumerate(as_list(props.get("snapshotArns"))):
        if is_unknown(arn_text):
            continue
        arn = parse_arn(str(arn_text))
        if arn is not None and region and arn.region and arn.region != region:
            yield f"`snapshotArns[{index}]` is in {arn.region}, not the group's region {region}"


def redis_release(resource: ResourceView) -> bool:
    """Helm releases of a Redis chart (the online store on premises)."""
    if resource.type != HELM_RELEASE:
        return False
    chart = known(resource.props.get("chart"), "chart")
    return isinstance(chart, str) and chart.rsplit("/", 1)[-1] in REDIS_CHARTS


@resource_rule("k8s-online-store-protected")
def online_store_protected(resource: ResourceView, settings: Settings) -> Iterator[str]:
    values = resource.props.get("values") or {}
    checks = (
        ("auth.enabled", "any pod that reaches it may read and write features"),
        ("tls.enabled", "features cross the cluster network in clear text"),
        ("dataStorage.enabled", "a restart loses every feature until the next materialisation"),
    )
    for path, why in checks:
        if known(dig(values, *path.split(".")), f"values.{path}") is not True:
            yield f"`values.{path}` is not true: {why}"
