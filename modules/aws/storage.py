"""Datasets, checkpoints and images: the S3 data bucket (with its access-log bucket),
optional FSx for Lustre linked to it, and the ECR repository for training images.
Everything is encrypted with the stack's in-region CMKs and protected from deletion."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from .backup_spec import lustre_backups_supported
from .iam import Document, document, json_document

#: The file system's deployment type: persistent, replicated within its zone.
LUSTRE_DEPLOYMENT_TYPE = "PERSISTENT_2"
#: FSx's own daily backups, kept this long where FSx can take them at all.
LUSTRE_BACKUP_RETENTION_DAYS = 7
# Lustre traffic: 988 for the servers, 1018-1023 for the clients' replies.
LUSTRE_PORTS = ((988, 988), (1018, 1023))


def deny_insecure_transport(bucket_arn: str) -> dict[str, Any]:
    """Statement refusing every request that does not use TLS."""
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def data_bucket_policy(bucket_arn: str, key_arn: str) -> Document:
    """TLS only, and objects may be written only with SSE-KMS under the stack's key.

    Uploads that name no encryption get the bucket default (the same key); uploads
    that name another key or another kind of encryption are refused. (The ``*``
    principals here are in Deny statements: they restrict everyone, grant nothing.)
    """
    return document(
        deny_insecure_transport(bucket_arn),
        {
            "Sid": "DenyOtherEncryption",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "s3:PutObject",
            "Resource": f"{bucket_arn}/*",
            "Condition": {
                "StringNotEqualsIfExists": {"s3:x-amz-server-side-encryption": "aws:kms"}
            },
        },
        {
            "Sid": "DenyOtherKeys",
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Action": "s3:PutObject",
            "Resource": f"{bucket_arn}/*",
            "Condition": {
                "StringNotEqualsIfExists": {
                    "s3:x-amz-server-side-encryption-aws-kms-key-id": key_arn
                }
            },
        },
    )


def log_bucket_policy(log_bucket_arn: str, source_bucket_arn: str, account_id: str) -> Document:
    """TLS only, and S3 server access logs from the data bucket of this account."""
    return document(
        deny_insecure_transport(log_bucket_arn),
        {
            "Sid": "S3ServerAccessLogs",
            "Effect": "Allow",
            "Principal": {"Service": "logging.s3.amazonaws.com"},
            "Action": "s3:PutObject",
            "Resource": f"{log_bucket_arn}/*",
            "Condition": {
                "ArnLike": {"aws:SourceArn": source_bucket_arn},
                "StringEquals": {"aws:SourceAccount": account_id},
            },
        },
    )


@dataclass(frozen=True)
class DataStoreArgs:
    """Args of `DataStore`.

    Args:
        bucket_prefix: stem of the bucket names (``<stem>-data-<account>``,
            ``<stem>-logs-<account>``).
        account_id: the account (bucket names are global; the account keeps them unique).
        storage_key_arn: CMK for the data bucket.
        logs_key_arn: CMK for the access-log bucket.
        noncurrent_version_retention_days: how long old object versions are kept.
        access_log_retention_days: how long access logs are kept.
    """

    bucket_prefix: str
    account_id: str
    storage_key_arn: pulumi.Input[str]
    logs_key_arn: pulumi.Input[str]
    noncurrent_version_retention_days: int
    access_log_retention_days: int


class DataStore(AwsComponent[DataStoreArgs]):
    """The datasets-and-checkpoints bucket and its server-access-log bucket."""

    bucket: aws.s3.Bucket
    log_bucket: aws.s3.Bucket

    def declare(self, name: str, args: DataStoreArgs) -> Outputs:
        self.log_bucket = self._bucket(
            f"{name}-logs", f"{args.bucket_prefix}-logs-{args.account_id}", args.logs_key_arn
        )
        self.bucket = self._bucket(
            name, f"{args.bucket_prefix}-data-{args.account_id}", args.storage_key_arn
        )
        child = pulumi.ResourceOptions(parent=self)
        aws.s3.BucketPolicy(
            f"{name}-logs",
            bucket=self.log_bucket.id,
            policy=json_document(
                lambda log_arn, data_arn: log_bucket_policy(log_arn, data_arn, args.account_id),
                self.log_bucket.arn,
                self.bucket.arn,
            ),
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-logs",
            bucket=self.log_bucket.id,
            rules=[
                {
                    "id": "expire-access-logs",
                    "status": "Enabled",
                    "filter": {"prefix": ""},
                    "expiration": {"days": args.access_log_retention_days},
                    "noncurrent_version_expiration": {"noncurrent_days": 7},
                }
            ],
            opts=child,
        )
        aws.s3.BucketPolicy(
            name,
            bucket=self.bucket.id,
            policy=json_document(data_bucket_policy, self.bucket.arn, args.storage_key_arn),
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            name,
            bucket=self.bucket.id,
            rules=[
                {
                    # Every checkpoint overwrite leaves a version behind; keep them long
                    # enough to roll back, not forever.
                    "id": "expire-old-versions",
                    "status": "Enabled",
                    "filter": {"prefix": ""},
                    "noncurrent_version_expiration": {
                        "noncurrent_days": args.noncurrent_version_retention_days
                    },
                    "abort_incomplete_multipart_upload": {"days_after_initiation": 7},
                }
            ],
            opts=child,
        )
        aws.s3.BucketLogging(
            name,
            bucket=self.bucket.id,
            target_bucket=self.log_bucket.id,
            target_prefix="data-bucket/",
            opts=child,
        )
        return {"bucket": self.bucket.bucket, "log_bucket": self.log_bucket.bucket}

    def _bucket(self, name: str, bucket_name: str, key_arn: pulumi.Input[str]) -> aws.s3.Bucket:
        """A private, versioned bucket with SSE-KMS default encryption under ``key_arn``."""
        bucket = aws.s3.Bucket(
            name,
            bucket=bucket_name,
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        child = pulumi.ResourceOptions(parent=self)
        aws.s3.BucketOwnershipControls(
            name, bucket=bucket.id, rule={"object_ownership": "BucketOwnerEnforced"}, opts=child
        )
        aws.s3.BucketPublicAccessBlock(
            name,
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            name,
            bucket=bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {
                        "sse_algorithm": "aws:kms",
                        "kms_master_key_id": key_arn,
                    },
                    "bucket_key_enabled": True,
                }
            ],
            opts=child,
        )
        aws.s3.BucketVersioning(
            name, bucket=bucket.id, versioning_configuration={"status": "Enabled"}, opts=child
        )
        return bucket


@dataclass(frozen=True)
class SharedFileSystemArgs:
    """Args of `SharedFileSystem`.

    Args:
        vpc_id: the VPC.
        vpc_cidr: clients' address range (Lustre ports are opened to it only).
        subnet_id: the subnet the file system lives in (the GPU pool's zone).
        storage_key_arn: CMK for the file system.
        storage_capacity_gib: capacity (1200 or a multiple of 2400).
        throughput_mib_per_tib: PERSISTENT_2 throughput per TiB.
        bucket_name: the data bucket linked by the data repository association.
        file_system_path: where the bucket appears in the file system.
    """

    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    subnet_id: pulumi.Input[str]
    storage_key_arn: pulumi.Input[str]
    storage_capacity_gib: int
    throughput_mib_per_tib: int
    bucket_name: pulumi.Input[str]
    file_system_path: str


class SharedFileSystem(AwsComponent[SharedFileSystemArgs]):
    """FSx for Lustre (PERSISTENT_2, CMK-encrypted) linked to the data bucket."""

    file_system: aws.fsx.LustreFileSystem

    def declare(self, name: str, args: SharedFileSystemArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)
        group = aws.ec2.SecurityGroup(
            name, vpc_id=args.vpc_id, description="Lustre clients inside the VPC", opts=child
        )
        for low, high in LUSTRE_PORTS:
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-lustre-{low}",
                security_group_id=group.id,
                cidr_ipv4=args.vpc_cidr,
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
                description="Lustre from the VPC",
                opts=child,
            )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-lustre-replies",
            security_group_id=group.id,
            cidr_ipv4=args.vpc_cidr,
            ip_protocol="tcp",
            from_port=1018,
            to_port=1023,
            description="Lustre server-to-client traffic inside the VPC",
            opts=child,
        )
        # The file system is linked to the data bucket (the association below), and FSx
        # backs up no file system linked to S3 (`lustre_backups_supported`): automatic
        # backups are off rather than a setting FSx cannot honour. What the linked path
        # holds is exported to the bucket, which AWS Backup protects (docs/recovery.md).
        backups = lustre_backups_supported(LUSTRE_DEPLOYMENT_TYPE, linked_to_s3=True)
        self.file_system = aws.fsx.LustreFileSystem(
            name,
            deployment_type=LUSTRE_DEPLOYMENT_TYPE,
            storage_type="SSD",
            storage_capacity=args.storage_capacity_gib,
            per_unit_storage_throughput=args.throughput_mib_per_tib,
            subnet_ids=args.subnet_id,
            security_group_ids=[group.id],
            kms_key_id=args.storage_key_arn,
            data_compression_type="LZ4",
            file_system_type_version="2.15",
            automatic_backup_retention_days=LUSTRE_BACKUP_RETENTION_DAYS if backups else 0,
            copy_tags_to_backups=backups,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        aws.fsx.DataRepositoryAssociation(
            name,
            file_system_id=self.file_system.id,
            file_system_path=args.file_system_path,
            data_repository_path=pulumi.Output.concat("s3://", args.bucket_name),
            batch_import_meta_data_on_create=True,
            s3={
                "auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
                "auto_export_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
            },
            opts=child,
        )
        return {
            "file_system_id": self.file_system.id,
            "dns_name": self.file_system.dns_name,
            "mount_name": self.file_system.mount_name,
        }


def untagged_image_expiry(days: int) -> str:
    """ECR lifecycle policy expiring untagged images after ``days``."""
    return json.dumps(
        {
            "rules": [
                {
                    "rulePriority": 1,
                    "description": f"expire untagged images after {days} days",
                    "selection": {
                        "tagStatus": "untagged",
                        "countType": "sinceImagePushed",
                        "countUnit": "days",
                        "countNumber": days,
                    },
                    "action": {"type": "expire"},
                }
            ]
        },
        sort_keys=True,
    )


@dataclass(frozen=True)
class ImageRegistryArgs:
    """Args of `ImageRegistry`.

    Args:
        repository_name: ECR repository name.
        storage_key_arn: CMK encrypting the images.
    """

    repository_name: str
    storage_key_arn: pulumi.Input[str]


class ImageRegistry(AwsComponent[ImageRegistryArgs]):
    """The in-region ECR repository for training images: immutable tags, scan on push, KMS."""

    repository: aws.ecr.Repository

    def declare(self, name: str, args: ImageRegistryArgs) -> Outputs:
        self.repository = aws.ecr.Repository(
            name,
            name=args.repository_name,
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            encryption_configurations=[{"encryption_type": "KMS", "kms_key": args.storage_key_arn}],
            force_delete=False,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        aws.ecr.LifecyclePolicy(
            name,
            repository=self.repository.name,
            policy=untagged_image_expiry(14),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return {"repository_url": self.repository.repository_url}
