"""The policy documents the bootstrap writes: pure functions of names and roles, so tests
can read and evaluate them without an account."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modules.residency import UAE_AWS_REGIONS

from .names import Names

Document = dict[str, Any]

# The global-service exemptions of AWS's "Deny access to AWS based on the requested AWS
# Region" example SCP (AWS Organizations user guide, general examples; the same list is
# in aws-samples/service-control-policy-examples, Region-controls/
# Deny-access-to-AWS-based-on-the-requested-AWS-region.json). Their endpoints live in
# us-east-1 (or another single region), so denying them by region would deny them
# everywhere. One deliberate change: AWS's list exempts `kms:*`; here it is left out so a
# key cannot be created abroad either (keys are where residency is decided), at the
# cost of global services that need a us-east-1 key (none of this platform's do).
GLOBAL_SERVICE_EXEMPTIONS: tuple[str, ...] = (
    "a4b:*",
    "acm:*",
    "aws-marketplace-management:*",
    "aws-marketplace:*",
    "aws-portal:*",
    "budgets:*",
    "ce:*",
    "chime:*",
    "cloudfront:*",
    "config:*",
    "cur:*",
    "directconnect:*",
    "ec2:DescribeRegions",
    "ec2:DescribeTransitGateways",
    "ec2:DescribeVpnGateways",
    "fms:*",
    "globalaccelerator:*",
    "health:*",
    "iam:*",
    "importexport:*",
    "mobileanalytics:*",
    "networkmanager:*",
    "organizations:*",
    "pricing:*",
    "route53:*",
    "route53domains:*",
    "route53-recovery-cluster:*",
    "route53-recovery-control-config:*",
    "route53-recovery-readiness:*",
    "s3:GetAccountPublic*",
    "s3:ListAllMyBuckets",
    "s3:ListMultiRegionAccessPoints",
    "s3:PutAccountPublic*",
    "shield:*",
    "sts:*",
    "support:*",
    "trustedadvisor:*",
    "waf-regional:*",
    "waf:*",
    "wafv2:*",
    "wellarchitected:*",
)


def region_guardrail(allowed: Sequence[str] = UAE_AWS_REGIONS) -> Document:
    """The SCP: deny every action requested outside ``allowed`` except global services."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyOutsideUaeRegions",
                "Effect": "Deny",
                "NotAction": list(GLOBAL_SERVICE_EXEMPTIONS),
                "Resource": "*",
                "Condition": {"StringNotEquals": {"aws:RequestedRegion": list(allowed)}},
            }
        ],
    }


def _deny_insecure_transport(bucket: str) -> Document:
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:*",
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def state_bucket_policy(names: Names) -> Document:
    """TLS only, and every upload encrypted with SSE-KMS (the bucket's CMK by default)."""
    bucket = names.state_bucket
    return {
        "Version": "2012-10-17",
        "Statement": [
            _deny_insecure_transport(bucket),
            {
                "Sid": "DenyUnencryptedUploads",
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                # An upload that names another algorithm is refused; one that names none
                # gets the bucket's default (SSE-KMS with the CMK).
                "Condition": {
                    "StringNotEqualsIfExists": {"s3:x-amz-server-side-encryption": "aws:kms"}
                },
            },
        ],
    }


def trail_bucket_policy(names: Names) -> Document:
    """CloudTrail delivers only this account's trail; S3 delivers the state bucket's
    access logs; TLS only."""
    bucket = f"arn:aws:s3:::{names.trail_bucket}"
    from_trail = {"StringEquals": {"aws:SourceArn": names.trail_arn}}
    return {
        "Version": "2012-10-17",
        "Statement": [
            _deny_insecure_transport(names.trail_bucket),
            *(
                _service_allow(sid, "cloudtrail.amazonaws.com", action, resource, from_trail)
                for sid, action, resource in (
                    ("CloudTrailAclCheck", "s3:GetBucketAcl", bucket),
                    ("CloudTrailWrite", "s3:PutObject", f"{bucket}/AWSLogs/{names.account}/*"),
                )
            ),
            _service_allow(
                "StateBucketAccessLogs",
                "logging.s3.amazonaws.com",
                "s3:PutObject",
                f"{bucket}/state-access/*",
                {
                    "ArnLike": {"aws:SourceArn": f"arn:aws:s3:::{names.state_bucket}"},
                    "StringEquals": {"aws:SourceAccount": names.account},
                },
            ),
        ],
    }


def _service_allow(
    sid: str, service: str, action: str, resource: str, condition: Document
) -> Document:
    """An AWS service may do ``action`` on ``resource``, under ``condition`` (whose
    resources it acts for: a confused-deputy guard)."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": action,
        "Resource": resource,
        "Condition": condition,
    }


def _root(names: Names) -> str:
    return f"arn:aws:iam::{names.account}:root"


def key_policy(
    names: Names, admin_roles: Sequence[str], ci_roles: Sequence[str], services: Document | None
) -> Document:
    """A key policy limited to the account root, the named admin roles (manage) and CI
    roles (use), plus the service statement a trail key needs."""
    statements: list[Document] = [
        {
            "Sid": "AccountRoot",
            "Effect": "Allow",
            "Principal": {"AWS": _root(names)},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    if admin_roles:
        statements.append(
            {
                "Sid": "KeyAdministrators",
                "Effect": "Allow",
                "Principal": {"AWS": sorted(admin_roles)},
                "Action": [
                    "kms:Describe*",
                    "kms:Get*",
                    "kms:List*",
                    "kms:Enable*",
                    "kms:Disable*",
                    "kms:Put*",
                    "kms:Update*",
                    "kms:Revoke*",
                    "kms:TagResource",
                    "kms:UntagResource",
                    "kms:ScheduleKeyDeletion",
                    "kms:CancelKeyDeletion",
                ],
                "Resource": "*",
            }
        )
    users = sorted({*admin_roles, *ci_roles})
    if users:
        statements.append(
            {
                "Sid": "KeyUsers",
                "Effect": "Allow",
                "Principal": {"AWS": users},
                "Action": ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey*", "kms:DescribeKey"],
                "Resource": "*",
            }
        )
    if services:
        statements.append(services)
    return {"Version": "2012-10-17", "Statement": statements}


def trail_key_services(names: Names) -> Document:
    """CloudTrail encrypts this account's trail's log files; CloudWatch Logs the group."""
    return {
        "Sid": "TrailAndLogsEncrypt",
        "Effect": "Allow",
        "Principal": {
            "Service": ["cloudtrail.amazonaws.com", f"logs.{names.region}.amazonaws.com"]
        },
        "Action": ["kms:GenerateDataKey*", "kms:Decrypt", "kms:Encrypt", "kms:DescribeKey"],
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:SourceAccount": names.account}},
    }


def trail_logs_trust() -> Document:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "cloudtrail.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }


def trail_logs_permissions(names: Names) -> Document:
    group = f"arn:aws:logs:{names.region}:{names.account}:log-group:{names.log_group}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": f"{group}:log-stream:*",
            }
        ],
    }
