"""Customer-managed KMS keys, created in the stack's region, one per purpose."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from .iam import Document, document

KeyPurpose = Literal["secrets", "storage", "logs"]
KEY_PURPOSES: tuple[KeyPurpose, ...] = ("secrets", "storage", "logs")

_KEY_USE = [
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:DescribeKey",
]


def key_policy(purpose: KeyPurpose, account_id: str, region: str) -> Document:
    """The key policy of one platform key. No statement has a ``*`` principal.

    The account root statement is AWS's default: it lets IAM policies in this account
    grant use of the key (so roles get exactly what their own policies allow) and keeps
    the key manageable. Service statements are added only where a service uses the key
    on its own behalf.

    Args:
        purpose: ``secrets`` (EKS envelope encryption), ``storage`` (S3, EBS, FSx,
            ECR) or ``logs`` (CloudWatch log groups).
        account_id: the account that owns the key.
        region: the stack's region.
    """
    statements: list[dict[str, Any]] = [
        {
            "Sid": "AccountAdministersKeyThroughIam",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{account_id}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if purpose == "logs":
        statements.append(
            {
                "Sid": "CloudWatchLogsInThisRegionAndAccount",
                "Effect": "Allow",
                "Principal": {"Service": f"logs.{region}.amazonaws.com"},
                "Action": _KEY_USE,
                "Resource": "*",
                "Condition": {
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:aws:logs:{region}:{account_id}:log-group:*"
                        )
                    }
                },
            }
        )
        # S3 server access logs are delivered by the logging service, which encrypts
        # them with the log bucket's default key.
        statements.append(
            {
                "Sid": "S3ServerAccessLogDelivery",
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": ["kms:Encrypt", "kms:GenerateDataKey*"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
            }
        )
    if purpose == "storage":
        # Managed node groups launch instances through the Auto Scaling service-linked
        # role; it must be able to use the key for the encrypted root volumes.
        autoscaling = (
            f"arn:aws:iam::{account_id}:role/aws-service-role/"
            "autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
        )
        statements += [
            {
                "Sid": "AutoScalingEncryptsNodeVolumes",
                "Effect": "Allow",
                "Principal": {"AWS": autoscaling},
                "Action": _KEY_USE,
                "Resource": "*",
            },
            {
                "Sid": "AutoScalingGrantsForAttachedVolumes",
                "Effect": "Allow",
                "Principal": {"AWS": autoscaling},
                "Action": "kms:CreateGrant",
                "Resource": "*",
                "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
            },
        ]
    return document(*statements)


@dataclass(frozen=True)
class RegionalKeysArgs:
    """Args of `RegionalKeys`.

    Args:
        name_prefix: prefix of the key aliases (``alias/<prefix>-<purpose>``).
        account_id: the AWS account the keys belong to.
        region: the stack's region (the provider pins the keys there).
        deletion_window_days: waiting period before a scheduled deletion (7-30, default 30).
        custom_key_store_id: create every key in this KMS custom key store (key custody
            ``hsm``); None keeps them in AWS KMS's own HSMs.
        xks_key_ids: for an external key store, the external key manager's key id
            bound to each purpose's key.
    """

    name_prefix: str
    account_id: str
    region: str
    deletion_window_days: int = 30
    custom_key_store_id: pulumi.Input[str] | None = None
    xks_key_ids: Mapping[KeyPurpose, str] = field(default_factory=dict)


class RegionalKeys(AwsComponent[RegionalKeysArgs]):
    """One single-region, protected CMK per purpose, with an alias each: rotating in AWS
    KMS, or held in a custom key store (where KMS cannot rotate them automatically)."""

    keys: dict[KeyPurpose, aws.kms.Key]

    def declare(self, name: str, args: RegionalKeysArgs) -> Outputs:
        self.keys = {}
        in_store = args.custom_key_store_id is not None
        for purpose in KEY_PURPOSES:
            custody = "custom key store" if in_store else "customer-managed"
            key = aws.kms.Key(
                f"{name}-{purpose}",
                description=f"{args.name_prefix}: {purpose} ({custody}, {args.region} only)",
                # Keys in a custom key store are symmetric encryption keys that KMS does
                # not rotate automatically (docs/compliance.md, "Key custody").
                enable_key_rotation=not in_store,
                custom_key_store_id=args.custom_key_store_id,
                xks_key_id=args.xks_key_ids.get(purpose),
                customer_master_key_spec="SYMMETRIC_DEFAULT" if in_store else None,
                key_usage="ENCRYPT_DECRYPT" if in_store else None,
                multi_region=False,
                deletion_window_in_days=args.deletion_window_days,
                policy=json.dumps(
                    key_policy(purpose, args.account_id, args.region), sort_keys=True
                ),
                # Losing a key loses the data it encrypts: never delete it by accident.
                opts=pulumi.ResourceOptions(parent=self, protect=True),
            )
            aws.kms.Alias(
                f"{name}-{purpose}",
                name=f"alias/{args.name_prefix}-{purpose}",
                target_key_id=key.key_id,
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.keys[purpose] = key
        return {p: k.arn for p, k in self.keys.items()}

    def arn(self, purpose: KeyPurpose) -> pulumi.Output[str]:
        """The ARN of the key for ``purpose``."""
        return self.keys[purpose].arn
