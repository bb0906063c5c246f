"""Encryption: data at rest under customer-managed keys; KMS keys kept in good order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from policies.aws import is_aws_managed_key, parse_arn, region_of
from policies.catalogue import resource_rule
from policies.documents import Statement, allows, any_principal
from policies.model import ResourceView
from policies.settings import Settings
from policies.values import as_list, dig, is_unknown, known


@dataclass(frozen=True)
class KeyRef:
    """Where a resource names its KMS key.

    Args:
        path: the property path, for messages (``blockDeviceMappings[0].ebs.kmsKeyId``).
        top: the top-level property, whose property dependencies say where the key
            came from.
        value: the key id, ARN or alias given (None when missing).
    """

    path: str
    top: str
    value: Any


#: ElastiCache (Redis OSS) replication groups: the feature store's online store.
REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
#: Types whose one key reference is one top-level property.
_KEY_PROPERTY = {
    "aws:ebs/volume:Volume": "kmsKeyId",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "kmsKeyId",
    "aws:efs/fileSystem:FileSystem": "kmsKeyId",
    "aws:cloudwatch/logGroup:LogGroup": "kmsKeyId",
    "aws:ebs/snapshotCopy:SnapshotCopy": "kmsKeyId",
    "aws:ec2/amiCopy:AmiCopy": "kmsKeyId",
    "aws:cloudtrail/trail:Trail": "kmsKeyId",
    # Without a key, Secrets Manager encrypts with the AWS-managed aws/secretsmanager.
    "aws:secretsmanager/secret:Secret": "kmsKeyId",
    "aws:backup/vault:Vault": "kmsKeyArn",
    # The feature store's online store (its other rules: policies/rules/features.py).
    REPLICATION_GROUP: "kmsKeyId",
}


def key_refs(resource: ResourceView) -> list[KeyRef]:
    """Every KMS key reference of the resource types this pack knows to encrypt data."""
    props, kind = resource.props, resource.type
    simple = _KEY_PROPERTY
    if kind in simple:
        return [KeyRef(simple[kind], simple[kind], props.get(simple[kind]))]
    refs: list[KeyRef] = []
    if kind == "aws:ec2/launchTemplate:LaunchTemplate":
        for i, mapping in enumerate(as_list(props.get("blockDeviceMappings"))):
            value = dig(mapping, "ebs", "kmsKeyId")
            refs.append(
                KeyRef(f"blockDeviceMappings[{i}].ebs.kmsKeyId", "blockDeviceMappings", value)
            )
    elif (
        kind
        == "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ):
        for i, rule in enumerate(as_list(props.get("rules"))):
            value = dig(rule, "applyServerSideEncryptionByDefault", "kmsMasterKeyId")
            path = f"rules[{i}].applyServerSideEncryptionByDefault.kmsMasterKeyId"
            refs.append(KeyRef(path, "rules", value))
    elif kind == "aws:eks/cluster:Cluster":
        value = dig(props, "encryptionConfig", "provider", "keyArn")
        refs.append(KeyRef("encryptionConfig.provider.keyArn", "encryptionConfig", value))
    elif kind == "aws:ecr/repository:Repository":
        for i, config in enumerate(as_list(props.get("encryptionConfigurations"))):
            value = dig(config, "kmsKey")
            refs.append(
                KeyRef(f"encryptionConfigurations[{i}].kmsKey", "encryptionConfigurations", value)
            )
    elif kind == "aws:ec2/instance:Instance":
        refs.append(
            KeyRef(
                "rootBlockDevice.kmsKeyId",
                "rootBlockDevice",
                dig(props, "rootBlockDevice", "kmsKeyId"),
            )
        )
        for i, device in enumerate(as_list(props.get("ebsBlockDevices"))):
            refs.append(
                KeyRef(f"ebsBlockDevices[{i}].kmsKeyId", "ebsBlockDevices", dig(device, "kmsKeyId"))
            )
    elif kind in RDS_STORAGE_TYPES:
        refs.append(KeyRef("kmsKeyId", "kmsKeyId", props.get("kmsKeyId")))
        # Performance Insights and the managed master secret hold data too (query
        # text, the password): each falls back to an AWS-managed key unless given one.
        if props.get("performanceInsightsEnabled") is True:
            value = props.get("performanceInsightsKmsKeyId")
            refs.append(KeyRef("performanceInsightsKmsKeyId", "performanceInsightsKmsKeyId", value))
        if props.get("manageMasterUserPassword") is True:
            value = props.get("masterUserSecretKmsKeyId")
            refs.append(KeyRef("masterUserSecretKmsKeyId", "masterUserSecretKmsKeyId", value))
    elif kind == "aws:s3/bucketReplicationConfig:BucketReplicationConfig":
        for i, rule in enumerate(as_list(props.get("rules"))):
            value = dig(rule, "destination", "encryptionConfiguration", "replicaKmsKeyId")
            if value is not None:
                path = f"rules[{i}].destination.encryptionConfiguration.replicaKmsKeyId"
                refs.append(KeyRef(path, "rules", value))
    return refs


#: RDS resources that store data: DB instances and Aurora clusters.
RDS_STORAGE_TYPES = ("aws:rds/instance:Instance", "aws:rds/cluster:Cluster")

#: Types with a switch for encryption at rest: the property, and what is left
#: unencrypted without it ("" where the property says it all).
AT_REST_SWITCHES: dict[str, tuple[str, str]] = {
    "aws:ebs/volume:Volume": ("encrypted", ""),
    "aws:efs/fileSystem:FileSystem": ("encrypted", ""),
    "aws:ebs/snapshotCopy:SnapshotCopy": ("encrypted", ""),
    "aws:ec2/amiCopy:AmiCopy": ("encrypted", ""),
    **dict.fromkeys(
        RDS_STORAGE_TYPES, ("storageEncrypted", "the database and its snapshots are unencrypted")
    ),
    REPLICATION_GROUP: ("atRestEncryptionEnabled", "cached data and snapshots are unencrypted"),
}


def _truthy(value: Any, path: str) -> bool:
    """Booleans, and the "true" strings some inputs (launch template EBS) take."""
    value = known(value, path)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _key_problem(ref: KeyRef, resource: ResourceView, settings: Settings) -> str | None:
    if ref.value in (None, ""):
        return f"`{ref.path}` is not set: the data is not under a customer-managed key"
    if is_unknown(ref.value):
        # Computed from another resource; `uae-kms-key-from-stack` checks where it comes from.
        return None
    value = str(ref.value)
    if is_aws_managed_key(value):
        return f"`{ref.path}` is the AWS-managed key {value}, not a customer-managed key"
    arn = parse_arn(value)
    if arn is not None and arn.region:
        region = known(region_of(resource), "region")
        if arn.region not in settings.allowed_regions or (region and arn.region != region):
            return f"`{ref.path}` is a key in {arn.region}, not in the resource's region {region}"
    return None


@resource_rule("aws-encryption-customer-managed-key")
def customer_managed_key(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props, kind = resource.props, resource.type
    if kind == "aws:eks/nodeGroup:NodeGroup":
        if props.get("launchTemplate") in (None, {}):
            yield (
                "the node group has no launch template, so its node disks cannot be given a "
                "customer-managed key"
            )
        return
    if kind in AT_REST_SWITCHES:
        switch, why = AT_REST_SWITCHES[kind]
        if not _truthy(props.get(switch), switch):
            yield f"`{switch}` is not true" + (f": {why}" if why else "")
    if kind == "aws:fsx/lustreFileSystem:LustreFileSystem":
        deployment = known(props.get("deploymentType"), "deploymentType")
        if isinstance(deployment, str) and deployment.startswith("SCRATCH"):
            yield (
                f"deployment type {deployment} cannot use a customer-managed key; use "
                "PERSISTENT_2 with `kmsKeyId`"
            )
            return
    if kind == "aws:ec2/launchTemplate:LaunchTemplate":
        mappings = as_list(props.get("blockDeviceMappings"))
        if not mappings:
            yield (
                "no `blockDeviceMappings`: the root volume falls back to the AMI's default, "
                "without a customer-managed key"
            )
        for i, mapping in enumerate(mappings):
            ebs = dig(mapping, "ebs")
            if ebs is not None and not _truthy(
                dig(ebs, "encrypted"), f"blockDeviceMappings[{i}].ebs.encrypted"
            ):
                yield f"`blockDeviceMappings[{i}].ebs.encrypted` is not true"
    if (
        kind
        == "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    ):
        rules = as_list(props.get("rules"))
        if not rules:
            yield "no encryption rule is set"
        for i, rule in enumerate(rules):
            path = f"rules[{i}].applyServerSideEncryptionByDefault.sseAlgorithm"
            algorithm = known(dig(rule, "applyServerSideEncryptionByDefault", "sseAlgorithm"), path)
            if algorithm not in ("aws:kms", "aws:kms:dsse"):
                yield f"`{path}` is {algorithm!r}, not aws:kms (a customer-managed key)"
    if kind == "aws:eks/cluster:Cluster":
        resources = known(dig(props, "encryptionConfig", "resources"), "encryptionConfig.resources")
        if "secrets" not in as_list(resources):
            yield "`encryptionConfig.resources` does not include secrets"
    if kind == "aws:ecr/repository:Repository":
        configs = as_list(props.get("encryptionConfigurations"))
        if not configs:
            yield "no `encryptionConfigurations`: images are encrypted with an AWS-owned key"
        for i, config in enumerate(configs):
            path = f"encryptionConfigurations[{i}].encryptionType"
            encryption = known(dig(config, "encryptionType"), path)
            if encryption not in ("KMS", "KMS_DSSE"):
                yield f"`{path}` is {encryption!r}, not KMS"
    if kind == "aws:ec2/instance:Instance" and not _truthy(
        dig(props, "rootBlockDevice", "encrypted"), "rootBlockDevice.encrypted"
    ):
        yield "`rootBlockDevice.encrypted` is not true"
    for ref in key_refs(resource):
        problem = _key_problem(ref, resource, settings)
        if problem:
            yield problem


KEY_TYPE = "aws:kms/key:Key"


def _symmetric(resource: ResourceView) -> bool:
    spec = resource.props.get("customerMasterKeySpec")
    usage = resource.props.get("keyUsage")
    return spec in (None, "", "SYMMETRIC_DEFAULT") and usage in (None, "", "ENCRYPT_DECRYPT")


def _in_custom_key_store(resource: ResourceView) -> bool:
    """A key in a custom key store (an unknown id counts: it is set, to a store made in
    the same run). KMS does not rotate such keys automatically."""
    return resource.props.get("customKeyStoreId") not in (None, "")


def rotatable_key(resource: ResourceView) -> bool:
    """Symmetric KMS keys outside a custom key store: the keys KMS rotates itself."""
    return resource.type == KEY_TYPE and _symmetric(resource) and not _in_custom_key_store(resource)


@resource_rule("aws-kms-key-rotation")
def kms_key_rotation(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if known(resource.props.get("enableKeyRotation"), "enableKeyRotation") is not True:
        yield "`enableKeyRotation` is not true"


@resource_rule("aws-kms-deletion-window")
def kms_deletion_window(resource: ResourceView, settings: Settings) -> Iterator[str]:
    days = known(resource.props.get("deletionWindowInDays"), "deletionWindowInDays")
    if days is None:
        yield "`deletionWindowInDays` is not set"
    elif not isinstance(days, int | float) or days < settings.min_key_deletion_window_days:
        yield f"`deletionWindowInDays` is {days}, below {settings.min_key_deletion_window_days}"


@resource_rule("aws-kms-policy-no-wildcard-principal")
def kms_policy_no_wildcard(resource: ResourceView, settings: Settings) -> Iterator[str]:
    def problem(index: int, statement: Statement) -> str:
        return f"statement {statement.get('Sid') or f'#{index}'} allows the wildcard principal `*`"

    return allows(resource.props.get("policy"), "policy", any_principal, problem)
