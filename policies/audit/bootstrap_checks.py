"""The audit's checks of what ``make bootstrap`` set up: the state bucket, the account
trail and (where one is expected) the organisation's region guardrail, each where it
belongs and with the settings that keep state and audit records in the UAE.

The names default to the bootstrap's (derived from the account id and the first allowed
region); ``--state-bucket`` and ``--trail`` name others.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from modules.residency import UAE_AWS_REGIONS
from policies.audit.scan import Audit, bucket_configuration, bucket_region

FIX = "run `make bootstrap` (it corrects what differs) and audit again"


def _owned_buckets(audit: Audit, region: str) -> set[str]:
    s3 = audit.client("s3", region)
    return {
        b["Name"]
        for page in s3.get_paginator("list_buckets").paginate()
        for b in page.get("Buckets", [])
    }


def _denies_insecure_transport(policy: dict[str, Any]) -> bool:
    for statement in policy.get("Statement", []):
        condition = statement.get("Condition", {}).get("Bool", {})
        if (
            statement.get("Effect") == "Deny"
            and str(condition.get("aws:SecureTransport", "")).lower() == "false"
        ):
            return True
    return False


def check_state_bucket(audit: Audit, bucket: str) -> None:
    """The state bucket: in an allowed region, versioned, SSE-KMS with an in-region
    customer-managed key, public access blocked, TLS only, access logged, old versions
    expiring."""
    home = audit.allowed[0]
    s3 = audit.client("s3", home)

    def found(problem: str, region: str = home) -> None:
        audit.found(region, "s3", "state-bucket", bucket, f"{problem}; {FIX}")

    if bucket not in _owned_buckets(audit, home):
        found("the state bucket does not exist in this account")
        return
    region = bucket_region(audit, s3, bucket)
    if audit.foreign(region):
        found(f"the state bucket is in {region}", region)
    s3 = audit.client("s3", region)
    if s3.get_bucket_versioning(Bucket=bucket).get("Status") != "Enabled":
        found("versioning is not enabled", region)
    encryption = bucket_configuration(
        s3, "get_bucket_encryption", bucket, "ServerSideEncryptionConfigurationNotFoundError"
    ).get("ServerSideEncryptionConfiguration", {})
    rules = encryption.get("Rules", [])
    defaults = [r.get("ApplyServerSideEncryptionByDefault", {}) for r in rules]
    keys = [d.get("KMSMasterKeyID") for d in defaults if d.get("SSEAlgorithm") == "aws:kms"]
    if not keys or not keys[0]:
        found("not encrypted with a customer-managed KMS key (SSE-KMS with a CMK)", region)
    else:
        meta = audit.client("kms", region).describe_key(KeyId=keys[0])["KeyMetadata"]
        key_region = str(meta.get("Arn", "")).split(":")[3] if meta.get("Arn") else region
        if meta.get("KeyManager") != "CUSTOMER":
            found("encrypted with an AWS-managed key, not a customer-managed one", region)
        if audit.foreign(key_region) or meta.get("MultiRegion"):
            found(f"its key {meta.get('Arn')} is in {key_region} or multi-region", key_region)
    block = bucket_configuration(
        s3, "get_public_access_block", bucket, "NoSuchPublicAccessBlockConfiguration"
    ).get("PublicAccessBlockConfiguration", {})
    if len(block) < 4 or not all(block.values()):
        found("public access is not fully blocked", region)
    document = bucket_configuration(s3, "get_bucket_policy", bucket, "NoSuchBucketPolicy")
    policy = json.loads(document.get("Policy", "{}"))
    if not _denies_insecure_transport(policy):
        found("its policy does not deny requests without TLS", region)
    if not s3.get_bucket_logging(Bucket=bucket).get("LoggingEnabled"):
        found("access logging is off", region)


def _trail_home(audit: Audit, name: str) -> tuple[str, dict[str, Any]] | None:
    """The trail named ``name`` and its home region, looked up in every scanned region."""
    for region in dict.fromkeys([*audit.allowed, *audit.regions]):
        trails = audit.client("cloudtrail", region).describe_trails(includeShadowTrails=False)
        for trail in trails.get("trailList", []):
            if trail.get("Name") == name:
                return str(trail.get("HomeRegion", region)), trail
    return None


def check_trail(audit: Audit, name: str) -> None:
    """The account trail: homed in an allowed region, logging, log-file validation,
    CMK-encrypted, to a bucket in an allowed region with object lock in compliance
    mode, and to a log group."""
    home = audit.allowed[0]
    located = _trail_home(audit, name)

    def found(problem: str, region: str) -> None:
        audit.found(region, "cloudtrail", "account-trail", name, f"{problem}; {FIX}")

    if located is None:
        found("the account trail does not exist", home)
        return
    region, trail = located
    if audit.foreign(region):
        found(f"the account trail is homed in {region}, outside the allowed regions", region)
    cloudtrail = audit.client("cloudtrail", region)
    if not cloudtrail.get_trail_status(Name=trail.get("TrailARN", name)).get("IsLogging"):
        found("the trail is not logging", region)
    if not trail.get("LogFileValidationEnabled"):
        found("log-file validation is off", region)
    if not trail.get("KmsKeyId"):
        found("log files are not encrypted with a KMS key", region)
    if not trail.get("CloudWatchLogsLogGroupArn"):
        found("no CloudWatch log group receives the trail", region)
    bucket = trail.get("S3BucketName")
    if bucket:
        s3 = audit.client("s3", region)
        target = bucket_region(audit, s3, bucket)
        if audit.foreign(target):
            found(f"delivers to bucket {bucket} in {target}", target)
        lock = bucket_configuration(
            s3, "get_object_lock_configuration", bucket, "ObjectLockConfigurationNotFoundError"
        ).get("ObjectLockConfiguration", {})
        mode = lock.get("Rule", {}).get("DefaultRetention", {}).get("Mode")
        if lock.get("ObjectLockEnabled") != "Enabled" or mode != "COMPLIANCE":
            found(f"bucket {bucket} has no object lock in compliance mode", target)


def _is_region_guardrail(content: dict[str, Any]) -> bool:
    """A Deny of (nearly) every action whose region condition allows only UAE regions."""
    statements = content.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        regions = statement.get("Condition", {}).get("StringNotEquals", {})
        requested = regions.get("aws:RequestedRegion")
        requested = [requested] if isinstance(requested, str) else requested or []
        if (
            statement.get("Effect") == "Deny"
            and ("NotAction" in statement or statement.get("Action") in ("*", ["*"]))
            and requested
            and set(requested) <= set(UAE_AWS_REGIONS)
        ):
            return True
    return False


def check_guardrail(audit: Audit, target: str) -> None:
    """A region-deny SCP allowing only UAE regions is attached to ``target``."""
    org = audit.session.client("organizations", region_name=audit.allowed[0])
    policies = [
        p
        for page in org.get_paginator("list_policies_for_target").paginate(
            TargetId=target, Filter="SERVICE_CONTROL_POLICY"
        )
        for p in page.get("Policies", [])
    ]
    for policy in policies:
        content = json.loads(org.describe_policy(PolicyId=policy["Id"])["Policy"]["Content"])
        if _is_region_guardrail(content):
            return
    audit.found(
        "global",
        "organizations",
        "guardrail",
        target,
        "no service control policy attached here denies actions outside the UAE "
        "regions; run `make bootstrap ARGS='--org-guardrail --target "
        f"{target}'` from the management account",
    )


def run_bootstrap_checks(
    audit: Audit, state_bucket: str, trail: str, guardrail_targets: Sequence[str] = ()
) -> None:
    """Every bootstrap check; a check whose calls fail is recorded, not fatal."""
    home = audit.allowed[0]
    audit.attempt(home, "state-bucket", lambda: check_state_bucket(audit, state_bucket))
    audit.attempt(home, "account-trail", lambda: check_trail(audit, trail))
    for target in guardrail_targets:

        def guardrail(target: str = target) -> None:
            check_guardrail(audit, target)

        audit.attempt("global", "guardrail", guardrail)
