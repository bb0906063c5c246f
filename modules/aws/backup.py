"""AWS Backup for the stack's data: one vault in the stack's region under the stack's
key, locked in compliance mode, a daily plan, and what it protects.

What each selection covers (docs/recovery.md):

* the tracking database (RDS) and the data bucket (S3, versioned: AWS Backup needs
  versioning for S3), by ARN;
* the teams' checkpoint volumes where they are EBS (stacks without FSx), by the tags the
  EBS CSI driver puts on every volume it provisions for a claim
  (``kubernetes.io/created-for/pvc/namespace`` and ``.../pvc/name``; the EKS add-on runs
  the provisioner with ``--extra-create-metadata``): one selection per team namespace.

FSx for Lustre linked to the bucket cannot be backed up at all (`lustre_backups_supported`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from . import iam
from .backup_spec import BackupSpec
from .iam import Document, document

#: AWS managed policies of a backup role and of a restore role (AWS Backup Developer
#: Guide, "Managed policies for AWS Backup"); the S3 ones are separate from the others.
BACKUP_MANAGED_POLICIES = (
    "service-role/AWSBackupServiceRolePolicyForBackup",
    "AWSBackupServiceRolePolicyForS3Backup",
)
RESTORE_MANAGED_POLICIES = (
    "service-role/AWSBackupServiceRolePolicyForRestores",
    "AWSBackupServiceRolePolicyForS3Restore",
)
#: Tags the EBS CSI driver's provisioner sets on a volume it creates for a claim.
PVC_NAMESPACE_TAG = "kubernetes.io/created-for/pvc/namespace"
PVC_NAME_TAG = "kubernetes.io/created-for/pvc/name"


def vault_key_access(key_arn: str) -> Document:
    """What AWS Backup needs of the vault's key: encrypt recovery points with it, and
    grant its use to the services it backs up (grants for AWS resources only)."""
    return document(
        {
            "Sid": "UseVaultKey",
            "Effect": "Allow",
            "Action": list(iam.KEY_USE_ACTIONS),
            "Resource": key_arn,
        },
        {
            "Sid": "GrantVaultKeyToAwsResources",
            "Effect": "Allow",
            "Action": "kms:CreateGrant",
            "Resource": key_arn,
            "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        },
    )


@dataclass(frozen=True)
class BackupTarget:
    """One selection of the plan: resources by ARN, narrowed by tag conditions.

    Args:
        name: the selection's name (letters, digits, ``-_.``; at most 50).
        resources: ARNs (or ARN patterns such as ``arn:aws:ec2:<region>:<account>:volume/*``).
        tags_equal: tag key -> value every selected resource must carry.
    """

    name: str
    resources: Sequence[pulumi.Input[str]]
    tags_equal: Mapping[str, str] = field(default_factory=dict)


def checkpoint_volume_targets(
    namespaces: Sequence[str], claim_name: str, region: str, account_id: str
) -> list[BackupTarget]:
    """One selection per team namespace: the EBS volumes provisioned for its
    checkpoint claim (conditions of one selection are ANDed, so each namespace needs
    its own selection)."""
    return [
        BackupTarget(
            name=f"checkpoints-{namespace}"[:50],
            resources=[f"arn:aws:ec2:{region}:{account_id}:volume/*"],
            tags_equal={PVC_NAMESPACE_TAG: namespace, PVC_NAME_TAG: claim_name},
        )
        for namespace in namespaces
    ]


@dataclass(frozen=True)
class StackBackupsArgs:
    """Args of `StackBackups`.

    Args:
        name_prefix: stem of the AWS names (``<prefix>`` vault, ``<prefix>-daily`` plan).
        account_id: the account (the roles' trust is limited to it).
        spec: retention, schedule and vault lock (`BackupSpec`).
        key_arn: the stack's key the vault encrypts recovery points with.
        targets: what the plan selects (`BackupTarget`).
    """

    name_prefix: str
    account_id: str
    spec: BackupSpec
    key_arn: pulumi.Input[str]
    targets: Sequence[BackupTarget]


class StackBackups(AwsComponent[StackBackupsArgs]):
    """The locked vault, the daily plan, its selections and the backup/restore roles."""

    vault: aws.backup.Vault
    plan: aws.backup.Plan
    backup_role: aws.iam.Role
    restore_role: aws.iam.Role

    def declare(self, name: str, args: StackBackupsArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        # Recovery points are data: the vault is never deleted by the program, and AWS
        # refuses to delete a vault that holds any.
        self.vault = aws.backup.Vault(
            name,
            name=args.name_prefix,
            kms_key_arn=args.key_arn,
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        # Compliance mode: after `changeable_for_days` nobody (root, AWS) can shorten
        # retention, delete recovery points early or remove the lock.
        aws.backup.VaultLockConfiguration(
            name,
            backup_vault_name=self.vault.name,
            changeable_for_days=spec.vault_lock.changeable_for_days,
            min_retention_days=spec.vault_lock.min_retention_days,
            max_retention_days=spec.vault_lock.max_retention_days,
            opts=child,
        )
        trust = json.dumps(iam.service_trust("backup.amazonaws.com", args.account_id))
        key_policy = iam.json_document(vault_key_access, args.key_arn)
        self.backup_role = backup_role = iam.role(
            f"{name}-backup",
            trust,
            self,
            description="AWS Backup: back up the stack's database, bucket and volumes",
            managed_policies=BACKUP_MANAGED_POLICIES,
            inline_policies={"vault-key": key_policy},
        )
        # Restores get their own role (docs/recovery.md uses it): the backup role never
        # writes into the stack's resources.
        self.restore_role = iam.role(
            f"{name}-restore",
            trust,
            self,
            description="AWS Backup: restore recovery points of the stack's vault",
            managed_policies=RESTORE_MANAGED_POLICIES,
            inline_policies={"vault-key": key_policy},
        )
        self.plan = aws.backup.Plan(
            name,
            name=f"{args.name_prefix}-daily",
            rules=[
                {
                    "rule_name": "daily",
                    "target_vault_name": self.vault.name,
                    "schedule": spec.schedule,
                    "start_window": spec.start_window_minutes,
                    "completion_window": spec.completion_window_minutes,
                    "lifecycle": {"delete_after": spec.retention_days},
                    # Copies stay in this vault: no copy action (the policy pack refuses
                    # any to a vault outside the allowed regions).
                }
            ],
            opts=child,
        )
        for target in args.targets:
            aws.backup.Selection(
                f"{name}-{target.name}",
                name=target.name,
                plan_id=self.plan.id,
                iam_role_arn=backup_role.arn,
                resources=list(target.resources),
                conditions=(
                    [
                        {
                            "string_equals": [
                                {"key": f"aws:ResourceTag/{key}", "value": value}
                                for key, value in sorted(target.tags_equal.items())
                            ]
                        }
                    ]
                    if target.tags_equal
                    else None
                ),
                opts=child,
            )
        return {
            "vault": self.vault.name,
            "plan_id": self.plan.id,
            "backup_role_arn": self.backup_role.arn,
            "restore_role_arn": self.restore_role.arn,
        }
