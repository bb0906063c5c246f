"""IAM policy documents (pure) and the role helper every component uses.

Documents are built by pure functions over plain strings so the tests can feed each
one to moto's IAM (which rejects malformed documents) and read the least-privilege
scoping directly. Components apply them over Outputs with `json_document`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

Document = dict[str, Any]


def document(*statements: Mapping[str, Any]) -> Document:
    """An IAM policy document with the given statements."""
    return {"Version": "2012-10-17", "Statement": [dict(s) for s in statements]}


def service_trust(service: str, account_id: str | None = None) -> Document:
    """Trust policy letting one AWS service principal assume a role.

    Args:
        service: the service principal, e.g. ``eks.amazonaws.com``.
        account_id: when given, only on behalf of this account (confused-deputy guard).
    """
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if account_id:
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": account_id}}
    return document(statement)


def pod_identity_trust() -> Document:
    """Trust policy for EKS Pod Identity (the agent assumes the role and tags the session)."""
    return document(
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    )


#: Every use of a CMK for data (not its administration).
KEY_USE_ACTIONS = (
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:DescribeKey",
)


def list_prefixes(
    bucket_arn: str, prefixes: Sequence[str], sid: str = "ListOwnPrefixes"
) -> Document:
    """A statement: list the bucket's keys below ``prefixes`` only."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": bucket_arn,
        "Condition": {"StringLike": {"s3:prefix": [p for x in prefixes for p in (x, f"{x}*")]}},
    }


def storage_key_through_s3(
    storage_key_arn: str, region: str, *, write: bool, sid: str = "UseStorageKeyThroughS3"
) -> Document:
    """A statement: the bucket's key, only through S3 in ``region``, to decrypt what is
    read and (``write``) to make the data keys of what is written."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"] if write else "kms:Decrypt",
        "Resource": storage_key_arn,
        "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
    }


def training_data_access(
    bucket_arn: str, prefix: str, storage_key_arn: str, region: str
) -> Document:
    """Read/write of one prefix of the data bucket, and the storage key only through S3.

    Args:
        bucket_arn: ARN of the datasets-and-checkpoints bucket.
        prefix: the key prefix the role may use, e.g. ``teams/research/``.
        storage_key_arn: ARN of the CMK the bucket is encrypted with.
        region: the stack's region (the key may only be used via S3 in this region).
    """
    return document(
        list_prefixes(bucket_arn, [prefix], sid="ListOwnPrefix"),
        {
            "Sid": "ReadWriteOwnPrefix",
            "Effect": "Allow",
            "Action": [
                "s3:GetObject",
                "s3:PutObject",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ],
            "Resource": f"{bucket_arn}/{prefix}*",
        },
        storage_key_through_s3(storage_key_arn, region, write=True),
    )


def cluster_autoscaler_access(cluster_name: str) -> Document:
    """What Cluster Autoscaler needs: describe everything, scale only this cluster's groups."""
    return document(
        {
            "Sid": "Discover",
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations",
                "autoscaling:DescribeScalingActivities",
                "autoscaling:DescribeTags",
                "ec2:DescribeImages",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions",
                "ec2:GetInstanceTypesFromInstanceRequirements",
                "eks:DescribeNodegroup",
            ],
            "Resource": "*",
        },
        {
            "Sid": "ScaleOwnGroups",
            "Effect": "Allow",
            "Action": [
                "autoscaling:SetDesiredCapacity",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
            ],
            "Resource": "*",
            "Condition": {
                "StringEquals": {
                    f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"
                }
            },
        },
    )


def key_grant_access(key_arn: str) -> Document:
    """Use of one CMK for attached resources (EBS CSI encrypting volumes with it)."""
    return document(
        {
            "Sid": "GrantForAttachedResources",
            "Effect": "Allow",
            "Action": ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"],
            "Resource": key_arn,
            "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        },
        {
            "Sid": "EncryptVolumes",
            "Effect": "Allow",
            "Action": list(KEY_USE_ACTIONS),
            "Resource": key_arn,
        },
    )


def flow_log_delivery(log_group_arn: str) -> Document:
    """VPC Flow Logs writing to one log group.

    ``logs:DescribeLogGroups`` lists the account's groups: it is authorised against
    ``*``, not against one group's ARN, so a statement scoped to the group does not
    grant it. It gets ``*`` in a statement of its own (read-only, nothing else in it);
    everything that writes stays on the one group.
    """
    return document(
        {
            "Sid": "WriteOwnLogGroup",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": [log_group_arn, f"{log_group_arn}:*"],
        },
        {
            "Sid": "ListLogGroups",
            "Effect": "Allow",
            "Action": "logs:DescribeLogGroups",
            "Resource": "*",
        },
    )


def json_document(build: Callable[..., Document], *args: pulumi.Input[str]) -> pulumi.Output[str]:
    """``build(*resolved_args)`` serialised once every Output argument is known."""
    return pulumi.Output.all(*args).apply(lambda values: json.dumps(build(*values), sort_keys=True))


def managed_policy_arn(name: str) -> str:
    """ARN of an AWS-managed policy (the platform runs in the ``aws`` partition only)."""
    return f"arn:aws:iam::aws:policy/{name}"


def role(
    name: str,
    trust: pulumi.Input[str],
    parent: pulumi.Resource,
    *,
    description: str,
    managed_policies: Sequence[str] = (),
    inline_policies: Mapping[str, pulumi.Input[str]] | None = None,
) -> aws.iam.Role:
    """An IAM role with its managed-policy attachments and inline policies as children.

    Args:
        name: resource-name stem (also the child resources' prefix).
        trust: the assume-role policy document (JSON).
        parent: the component that owns the role; the role inherits its provider.
        description: what the role is for (shown in IAM).
        managed_policies: names of AWS-managed policies to attach.
        inline_policies: inline policy name -> document (JSON).
    """
    created = aws.iam.Role(
        name,
        assume_role_policy=trust,
        description=description,
        max_session_duration=3600,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    for policy in managed_policies:
        aws.iam.RolePolicyAttachment(
            f"{name}-{policy}",
            role=created.name,
            policy_arn=managed_policy_arn(policy),
            opts=pulumi.ResourceOptions(parent=created),
        )
    for policy_name, policy_document in (inline_policies or {}).items():
        aws.iam.RolePolicy(
            f"{name}-{policy_name}",
            role=created.name,
            policy=policy_document,
            opts=pulumi.ResourceOptions(parent=created),
        )
    return created
