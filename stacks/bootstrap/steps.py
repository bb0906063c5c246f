"""The bootstrap's steps: each reads what exists, and creates or corrects only what is
missing or different, so a second run changes nothing and a failed run is resumed by
running it again. In a dry run every step only reads.

Everything regional is created in ``names.region`` (a UAE region). IAM (the role
CloudTrail uses to reach the log group) and Organizations (the guardrail) are global
services with no region of their own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from . import documents
from .names import Names

# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096,
                      1827, 2192, 2557, 2922, 3288, 3653)  # fmt: skip
PENDING = "(created by this run)"


class BootstrapError(Exception):
    """A problem the user must fix; the message is one screen and names the fix."""


@dataclass(frozen=True)
class Options:
    """What the command line asked for.

    Args:
        admin_roles, ci_roles: IAM role ARNs the state and secrets key policies name.
        trail_retention_days: object-lock (compliance mode) retention of trail logs.
        log_retention_days: retention of the trail's CloudWatch log group.
        noncurrent_days: how long the state bucket keeps noncurrent versions.
        data_buckets: further buckets whose object-level events the trail records.
        guardrail_target: OU, root or account the region guardrail is attached to.
        custom_key_store_id: create the keys in this connected KMS custom key store
            (key custody ``hsm``, docs/compliance.md); None keeps them in AWS KMS.
        xks_key_ids: for an external key store, the external key bound to each key
            (``state``, ``secrets``, ``trail``).
    """

    admin_roles: tuple[str, ...] = ()
    ci_roles: tuple[str, ...] = ()
    trail_retention_days: int = 365
    log_retention_days: int = 365
    noncurrent_days: int = 90
    data_buckets: tuple[str, ...] = ()
    guardrail_target: str | None = None
    custom_key_store_id: str | None = None
    xks_key_ids: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Change:
    """What one step did (or, in a dry run, would do) to one resource."""

    kind: str
    name: str
    action: str  # created, updated, unchanged (dry run: would create, would update)
    detail: str = ""


@dataclass
class Bootstrap:
    """Runs the steps against one account and region."""

    session: boto3.session.Session
    names: Names
    options: Options
    dry_run: bool = False
    changes: list[Change] = field(default_factory=list)

    def client(self, service: str) -> BaseClient:
        return self.session.client(service, region_name=self.names.region)

    def record(
        self,
        kind: str,
        name: str,
        fixes: Sequence[str],
        created: bool = False,
        detail: str = "",
    ) -> None:
        if created:
            action = "would create" if self.dry_run else "created"
        elif fixes:
            action = "would update" if self.dry_run else "updated"
        else:
            action = "unchanged"
        self.changes.append(Change(kind, name, action, ", ".join(fixes) or detail))

    # -- KMS ---------------------------------------------------------------------------

    def key_store_origin(self) -> str | None:
        """The ``Origin`` of keys in the custom key store (None without one); the store
        must be connected, or KMS cannot create keys in it."""
        store_id = self.options.custom_key_store_id
        if store_id is None:
            return None
        stores = self.client("kms").describe_custom_key_stores(CustomKeyStoreId=store_id)
        found = stores.get("CustomKeyStores", [])
        if len(found) != 1:
            raise BootstrapError(
                f"custom key store {store_id} was not found in {self.names.region}: create it "
                "in this account and region (docs/compliance.md, Key custody) and run again"
            )
        store = found[0]
        state = store.get("ConnectionState")
        if state != "CONNECTED":
            raise BootstrapError(
                f"custom key store {store_id} is {state}, not CONNECTED: connect it "
                f"(aws kms connect-custom-key-store --custom-key-store-id {store_id}), wait "
                "until describe-custom-key-stores shows CONNECTED, and run again"
            )
        external = store.get("CustomKeyStoreType") == "EXTERNAL_KEY_STORE"
        if external and not self.options.xks_key_ids:
            raise BootstrapError(
                f"custom key store {store_id} is an external key store: pass "
                "--xks-key-id state=<id> --xks-key-id secrets=<id> --xks-key-id trail=<id>"
            )
        if not external and self.options.xks_key_ids:
            raise BootstrapError(
                f"custom key store {store_id} is a CloudHSM key store: --xks-key-id is only "
                "for an external key store"
            )
        return "EXTERNAL_KEY_STORE" if external else "AWS_CLOUDHSM"

    def ensure_key(
        self,
        alias: str,
        description: str,
        policy: dict[str, Any],
        purpose: str = "",
        origin: str | None = None,
    ) -> str:
        """A symmetric, single-region CMK with ``policy``: rotating in AWS KMS, or in the
        custom key store (``origin`` set), where KMS does not rotate keys; returns its ARN."""
        kms = self.client("kms")
        store_id = self.options.custom_key_store_id if origin else None
        key_id = None
        for page in kms.get_paginator("list_aliases").paginate():
            for entry in page.get("Aliases", []):
                if entry.get("AliasName") == alias and entry.get("TargetKeyId"):
                    key_id = entry["TargetKeyId"]
        if key_id is None:
            if self.dry_run:
                self.record("kms key", alias, [], created=True)
                return f"{alias} {PENDING}"
            store: dict[str, str] = {}
            if store_id is not None and origin is not None:
                store = {"CustomKeyStoreId": store_id, "Origin": origin}
                if origin == "EXTERNAL_KEY_STORE":
                    store["XksKeyId"] = dict(self.options.xks_key_ids)[purpose]
            meta = kms.create_key(
                Description=description,
                KeySpec="SYMMETRIC_DEFAULT",
                KeyUsage="ENCRYPT_DECRYPT",
                MultiRegion=False,  # a multi-region key's material can be copied abroad
                Policy=json.dumps(policy),
                Tags=[{"TagKey": "residency", "TagValue": self.names.region}],
                **store,
            )["KeyMetadata"]
            kms.create_alias(AliasName=alias, TargetKeyId=meta["KeyId"])
            if store_id is None:
                # KMS cannot rotate keys in a custom key store (EnableKeyRotation).
                kms.enable_key_rotation(KeyId=meta["KeyId"])
            self.record(
                "kms key", alias, [], created=True, detail=f"in {store_id}" if store_id else ""
            )
            return str(meta["Arn"])
        meta = kms.describe_key(KeyId=key_id)["KeyMetadata"]
        if meta.get("MultiRegion") or meta.get("KeyState") != "Enabled":
            raise BootstrapError(
                f"the key behind {alias} ({meta['Arn']}) is {meta.get('KeyState')}"
                f"{' and multi-region' if meta.get('MultiRegion') else ''}; point the alias at "
                "an enabled single-region key (or delete the alias) and run the bootstrap again"
            )
        if meta.get("CustomKeyStoreId") != store_id:
            where = meta.get("CustomKeyStoreId") or "AWS KMS"
            wanted = store_id or "AWS KMS"
            raise BootstrapError(
                f"the key behind {alias} ({meta['Arn']}) is held in {where}, not in {wanted}; "
                "a key cannot move between AWS KMS and a custom key store: point the alias "
                "at a key in the wanted place (or delete the alias) and run again"
            )
        fixes = []
        if store_id is None and not kms.get_key_rotation_status(KeyId=key_id).get(
            "KeyRotationEnabled"
        ):
            fixes.append("rotation on")
            if not self.dry_run:
                kms.enable_key_rotation(KeyId=key_id)
        current = json.loads(kms.get_key_policy(KeyId=key_id, PolicyName="default")["Policy"])
        if current != policy:
            fixes.append("key policy")
            if not self.dry_run:
                kms.put_key_policy(KeyId=key_id, PolicyName="default", Policy=json.dumps(policy))
        self.record("kms key", alias, fixes)
        return str(meta["Arn"])

    # -- S3 ----------------------------------------------------------------------------

    def bucket_exists(self, bucket: str) -> bool:
        """True if this account owns ``bucket`` in the region; errors say what to fix."""
        s3 = self.client("s3")
        # ListBuckets answers only the caller's own buckets: a name outside it that
        # still answers HeadBucket (200 or 403) belongs to another account.
        owned = {
            b["Name"]
            for page in s3.get_paginator("list_buckets").paginate()
            for b in page.get("Buckets", [])
        }
        if bucket not in owned:
            try:
                s3.head_bucket(Bucket=bucket)
            except ClientError as err:
                code = str(err.response.get("Error", {}).get("Code", ""))
                if code in ("404", "NoSuchBucket", "NotFound"):
                    return False
                if code not in ("403", "AccessDenied", "Forbidden"):
                    raise
            raise BootstrapError(
                f"the bucket name {bucket} is taken by another account; pass --name-suffix "
                "(e.g. --name-suffix=-a1) to derive other bucket names and run again"
            )
        location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
        if location != self.names.region:
            raise BootstrapError(
                f"bucket {bucket} already exists in {location}, outside {self.names.region}; "
                "move its contents and delete it (or pass --name-suffix), then run again"
            )
        return True

    def ensure_bucket(self, bucket: str, object_lock: bool = False) -> bool | None:
        """Create ``bucket`` unless this account has it. Returns whether it existed, or
        None on a dry run that would create it (recorded: there is nothing to check)."""
        exists = self.bucket_exists(bucket)
        if not exists and self.dry_run:
            self.record("s3 bucket", bucket, [], created=True)
            return None
        if not exists:
            self.create_bucket(bucket, object_lock)
        return exists

    def create_bucket(self, bucket: str, object_lock: bool = False) -> None:
        s3 = self.client("s3")
        try:
            s3.create_bucket(
                Bucket=bucket,
                CreateBucketConfiguration={"LocationConstraint": self.names.region},
                ObjectLockEnabledForBucket=object_lock,
                ObjectOwnership="BucketOwnerEnforced",
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "BucketAlreadyExists":
                raise BootstrapError(
                    f"the bucket name {bucket} is taken by another account; pass "
                    "--name-suffix to derive other names and run again"
                ) from None
            raise

    def _setting(
        self,
        fixes: list[str],
        *,
        label: str,
        read: Callable[[], Any],
        wanted: Any,
        write: Callable[[], Any],
        missing_codes: tuple[str, ...] = (),
    ) -> None:
        """Compare one bucket setting with ``wanted``; write it when it differs."""
        try:
            current = read()
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in missing_codes:
                raise
            current = None
        if current != wanted:
            fixes.append(label)
            if not self.dry_run:
                write()

    def _default_encryption(
        self, bucket: str, fixes: list[str], label: str, rules: list[dict[str, Any]]
    ) -> None:
        """The bucket's default-encryption ``rules``, written when they differ."""
        s3 = self.client("s3")
        self._setting(
            fixes,
            label=label,
            read=lambda: _sse_rules(s3, bucket),
            wanted=rules,
            write=lambda: s3.put_bucket_encryption(
                Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": rules}
            ),
            missing_codes=("ServerSideEncryptionConfigurationNotFoundError",),
        )

    def _common_bucket_settings(self, bucket: str, fixes: list[str], policy: Any) -> None:
        s3 = self.client("s3")
        block = {
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        }
        self._setting(
            fixes,
            label="public access block",
            read=lambda: s3.get_public_access_block(Bucket=bucket)[
                "PublicAccessBlockConfiguration"
            ],
            wanted=block,
            write=lambda: s3.put_public_access_block(
                Bucket=bucket, PublicAccessBlockConfiguration=block
            ),
            missing_codes=("NoSuchPublicAccessBlockConfiguration",),
        )
        ownership = [{"ObjectOwnership": "BucketOwnerEnforced"}]
        self._setting(
            fixes,
            label="object ownership",
            read=lambda: s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"][
                "Rules"
            ],
            wanted=ownership,
            write=lambda: s3.put_bucket_ownership_controls(
                Bucket=bucket, OwnershipControls={"Rules": ownership}
            ),
            missing_codes=("OwnershipControlsNotFoundError",),
        )
        self._setting(
            fixes,
            label="versioning",
            read=lambda: s3.get_bucket_versioning(Bucket=bucket).get("Status"),
            wanted="Enabled",
            write=lambda: s3.put_bucket_versioning(
                Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
            ),
        )
        self._setting(
            fixes,
            label="bucket policy",
            read=lambda: json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]),
            wanted=policy,
            write=lambda: s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy)),
            missing_codes=("NoSuchBucketPolicy",),
        )

    def ensure_trail_bucket(self) -> None:
        """Object lock (compliance mode), versioning, TLS only, no public access."""
        bucket, s3 = self.names.trail_bucket, self.client("s3")
        exists = self.ensure_bucket(bucket, object_lock=True)
        if exists is None:
            return
        fixes: list[str] = []
        self._common_bucket_settings(bucket, fixes, documents.trail_bucket_policy(self.names))
        # Default encryption SSE-S3: S3 server access logs (the state bucket's) cannot be
        # delivered to a bucket whose default is SSE-KMS. The trail's own log files are
        # encrypted with the trail CMK by CloudTrail itself (the trail's KmsKeyId).
        sse = [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        self._default_encryption(bucket, fixes, "default encryption", sse)
        lock = {
            "ObjectLockEnabled": "Enabled",
            "Rule": {
                "DefaultRetention": {
                    "Mode": "COMPLIANCE",
                    "Days": self.options.trail_retention_days,
                }
            },
        }
        self._setting(
            fixes,
            label=f"object lock (compliance, {self.options.trail_retention_days} days)",
            read=lambda: _lock(s3, bucket),
            wanted=lock,
            write=lambda: s3.put_object_lock_configuration(
                Bucket=bucket, ObjectLockConfiguration=lock
            ),
            missing_codes=("ObjectLockConfigurationNotFoundError",),
        )
        self.record("s3 bucket", bucket, [] if not exists else fixes, created=not exists)

    def ensure_state_bucket(self, state_key_arn: str) -> None:
        """Versioned, SSE-KMS with the state CMK, TLS and SSE-KMS uploads only, no public
        access, access logs to the trail bucket, noncurrent versions expire."""
        bucket, s3 = self.names.state_bucket, self.client("s3")
        exists = self.ensure_bucket(bucket)
        if exists is None:
            return
        fixes: list[str] = []
        self._common_bucket_settings(bucket, fixes, documents.state_bucket_policy(self.names))
        sse = [
            {
                "ApplyServerSideEncryptionByDefault": {
                    "SSEAlgorithm": "aws:kms",
                    "KMSMasterKeyID": state_key_arn,
                },
                "BucketKeyEnabled": True,
            }
        ]
        self._default_encryption(bucket, fixes, "SSE-KMS (state key)", sse)
        logging = {"TargetBucket": self.names.trail_bucket, "TargetPrefix": "state-access/"}
        self._setting(
            fixes,
            label="access logging",
            read=lambda: s3.get_bucket_logging(Bucket=bucket).get("LoggingEnabled"),
            wanted=logging,
            write=lambda: s3.put_bucket_logging(
                Bucket=bucket, BucketLoggingStatus={"LoggingEnabled": logging}
            ),
        )
        rules = [
            {
                "ID": "noncurrent-versions",
                "Status": "Enabled",
                "Filter": {"Prefix": ""},
                "NoncurrentVersionExpiration": {"NoncurrentDays": self.options.noncurrent_days},
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
            }
        ]
        self._setting(
            fixes,
            label=f"lifecycle (noncurrent versions {self.options.noncurrent_days} days)",
            read=lambda: s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"],
            wanted=rules,
            write=lambda: s3.put_bucket_lifecycle_configuration(
                Bucket=bucket, LifecycleConfiguration={"Rules": rules}
            ),
            missing_codes=("NoSuchLifecycleConfiguration",),
        )
        self.record("s3 bucket", bucket, [] if not exists else fixes, created=not exists)

    # -- CloudWatch Logs, IAM, CloudTrail ----------------------------------------------

    def ensure_log_group(self, trail_key_arn: str) -> str:
        logs, group = self.client("logs"), self.names.log_group
        found = [
            g
            for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=group)
            for g in page.get("logGroups", [])
            if g.get("logGroupName") == group
        ]
        arn = f"arn:aws:logs:{self.names.region}:{self.names.account}:log-group:{group}:*"
        retention = self.options.log_retention_days
        if not found:
            if not self.dry_run:
                logs.create_log_group(logGroupName=group, kmsKeyId=trail_key_arn)
                logs.put_retention_policy(logGroupName=group, retentionInDays=retention)
            self.record("log group", group, [], created=True)
            return arn
        fixes = []
        if found[0].get("retentionInDays") != retention:
            fixes.append(f"retention {retention} days")
            if not self.dry_run:
                logs.put_retention_policy(logGroupName=group, retentionInDays=retention)
        if found[0].get("kmsKeyId") != trail_key_arn:
            fixes.append("CMK encryption")
            if not self.dry_run:
                logs.associate_kms_key(logGroupName=group, kmsKeyId=trail_key_arn)
        self.record("log group", group, fixes)
        return arn

    def ensure_trail_logs_role(self) -> str:
        iam, role = (
            self.session.client("iam", region_name=self.names.region),
            self.names.trail_logs_role,
        )
        trust, permissions = (
            documents.trail_logs_trust(),
            documents.trail_logs_permissions(self.names),
        )
        arn = f"arn:aws:iam::{self.names.account}:role/{role}"
        try:
            current = iam.get_role(RoleName=role)["Role"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "NoSuchEntity":
                raise
            if not self.dry_run:
                iam.create_role(
                    RoleName=role,
                    AssumeRolePolicyDocument=json.dumps(trust),
                    Description="CloudTrail delivers the account trail to its log group",
                )
                iam.put_role_policy(
                    RoleName=role, PolicyName="to-log-group", PolicyDocument=json.dumps(permissions)
                )
            self.record("iam role (global)", role, [], created=True)
            return arn
        fixes = []
        if _document(current.get("AssumeRolePolicyDocument")) != trust:
            fixes.append("trust policy")
            if not self.dry_run:
                iam.update_assume_role_policy(RoleName=role, PolicyDocument=json.dumps(trust))
        try:
            inline = _document(
                iam.get_role_policy(RoleName=role, PolicyName="to-log-group")["PolicyDocument"]
            )
        except ClientError:
            inline = None
        if inline != permissions:
            fixes.append("permissions")
            if not self.dry_run:
                iam.put_role_policy(
                    RoleName=role, PolicyName="to-log-group", PolicyDocument=json.dumps(permissions)
                )
        self.record("iam role (global)", role, fixes)
        return str(current.get("Arn", arn))

    def ensure_trail(self, trail_key_arn: str, log_group_arn: str, role_arn: str) -> None:
        """A multi-region trail homed in the UAE region: every region's management
        events, and object-level events of the state and data buckets, to the trail
        bucket with log-file validation and the trail CMK, and to the log group."""
        cloudtrail, name = self.client("cloudtrail"), self.names.trail
        settings = {
            "S3BucketName": self.names.trail_bucket,
            "IsMultiRegionTrail": True,
            "IncludeGlobalServiceEvents": True,
            "EnableLogFileValidation": True,
            "KmsKeyId": trail_key_arn,
            "CloudWatchLogsLogGroupArn": log_group_arn,
            "CloudWatchLogsRoleArn": role_arn,
        }
        found = cloudtrail.describe_trails(trailNameList=[name], includeShadowTrails=False)
        current = next((t for t in found.get("trailList", []) if t.get("Name") == name), None)
        selectors = [
            {
                "ReadWriteType": "All",
                "IncludeManagementEvents": True,
                "DataResources": [
                    {
                        "Type": "AWS::S3::Object",
                        "Values": [
                            f"arn:aws:s3:::{b}/"
                            for b in (self.names.state_bucket, *self.options.data_buckets)
                        ],
                    }
                ],
            }
        ]
        if current is None:
            if not self.dry_run:
                cloudtrail.create_trail(Name=name, **settings)
                cloudtrail.put_event_selectors(TrailName=name, EventSelectors=selectors)
                cloudtrail.start_logging(Name=name)
            self.record("cloudtrail trail", name, [], created=True)
            return
        if current.get("HomeRegion") not in (None, self.names.region):
            raise BootstrapError(
                f"a trail named {name} is homed in {current['HomeRegion']}; delete it there "
                f"so it can be recreated in {self.names.region}, then run again"
            )
        fixes = [
            key
            for key, value in settings.items()
            if key != "S3BucketName" and _trail_value(current, key) != value
        ]
        if current.get("S3BucketName") != self.names.trail_bucket:
            fixes.insert(0, "S3BucketName")
        if fixes and not self.dry_run:
            cloudtrail.update_trail(Name=name, **settings)
        now = cloudtrail.get_event_selectors(TrailName=name).get("EventSelectors", [])
        if _selectors(now) != _selectors(selectors):
            fixes.append("event selectors")
            if not self.dry_run:
                cloudtrail.put_event_selectors(TrailName=name, EventSelectors=selectors)
        if not cloudtrail.get_trail_status(Name=name).get("IsLogging"):
            fixes.append("logging on")
            if not self.dry_run:
                cloudtrail.start_logging(Name=name)
        self.record("cloudtrail trail", name, fixes)

    # -- Organizations -----------------------------------------------------------------

    def ensure_guardrail(self, target: str) -> None:
        """The region-deny SCP, created or corrected, and attached to ``target``."""
        org = self.session.client("organizations", region_name=self.names.region)
        content = documents.region_guardrail()
        name = self.names.guardrail_policy
        policy = None
        for page in org.get_paginator("list_policies").paginate(Filter="SERVICE_CONTROL_POLICY"):
            policy = next((p for p in page.get("Policies", []) if p["Name"] == name), policy)
        if policy is None:
            if self.dry_run:
                self.record("scp (global)", name, [], created=True)
                self.record("scp attachment", f"{name} -> {target}", [], created=True)
                return
            policy = org.create_policy(
                Content=json.dumps(content),
                Description="Deny actions outside the UAE regions (global services exempt)",
                Name=name,
                Type="SERVICE_CONTROL_POLICY",
            )["Policy"]["PolicySummary"]
            self.record("scp (global)", name, [], created=True)
        else:
            described = org.describe_policy(PolicyId=policy["Id"])["Policy"]
            fixes = [] if json.loads(described["Content"]) == content else ["policy document"]
            if fixes and not self.dry_run:
                org.update_policy(PolicyId=policy["Id"], Content=json.dumps(content))
            self.record("scp (global)", name, fixes)
        targets = [
            t["TargetId"]
            for page in org.get_paginator("list_targets_for_policy").paginate(PolicyId=policy["Id"])
            for t in page.get("Targets", [])
        ]
        attached = target in targets
        if not attached and not self.dry_run:
            org.attach_policy(PolicyId=policy["Id"], TargetId=target)
        self.record("scp attachment", f"{name} -> {target}", [], created=not attached)

    def run(self) -> list[Change]:
        names, options = self.names, self.options
        origin = self.key_store_origin()
        state_key = self.ensure_key(
            names.state_key_alias,
            "Pulumi state bucket (uae-gpu-platform)",
            documents.key_policy(names, options.admin_roles, options.ci_roles, None),
            "state",
            origin,
        )
        self.ensure_key(
            names.secrets_key_alias,
            "Pulumi stack secrets, awskms secrets provider (uae-gpu-platform)",
            documents.key_policy(names, options.admin_roles, options.ci_roles, None),
            "secrets",
            origin,
        )
        trail_key = self.ensure_key(
            names.trail_key_alias,
            "Account trail log files and log group (uae-gpu-platform)",
            documents.key_policy(
                names, options.admin_roles, (), documents.trail_key_services(names)
            ),
            "trail",
            origin,
        )
        self.ensure_trail_bucket()
        self.ensure_state_bucket(state_key)
        log_group = self.ensure_log_group(trail_key)
        role = self.ensure_trail_logs_role()
        self.ensure_trail(trail_key, log_group, role)
        if options.guardrail_target:
            self.ensure_guardrail(options.guardrail_target)
        return self.changes


def _sse_rules(s3: BaseClient, bucket: str) -> Any:
    """The default-encryption rules, without the ``BucketKeyEnabled: false`` S3 adds."""
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    return [
        {k: v for k, v in rule.items() if not (k == "BucketKeyEnabled" and v is False)}
        for rule in rules
    ]


def _lock(s3: BaseClient, bucket: str) -> Any:
    """The object-lock configuration, without the zero ``Years`` some answers carry."""
    lock = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
    retention = lock.get("Rule", {}).get("DefaultRetention")
    if isinstance(retention, dict):
        lock["Rule"]["DefaultRetention"] = {k: v for k, v in retention.items() if v != 0}
    return lock


def _document(value: Any) -> Any:
    """IAM answers policy documents as URL-decoded JSON text or already parsed."""
    if isinstance(value, str):
        from urllib.parse import unquote  # noqa: PLC0415 - only for this rare shape

        return json.loads(unquote(value))
    return value


def _trail_value(trail: dict[str, Any], key: str) -> Any:
    if key == "EnableLogFileValidation":
        return trail.get("LogFileValidationEnabled")
    return trail.get(key)


def _selectors(selectors: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            s.get("ReadWriteType", "All"),
            bool(s.get("IncludeManagementEvents", True)),
            tuple(
                sorted(
                    (d["Type"], tuple(sorted(d.get("Values", []))))
                    for d in s.get("DataResources", [])
                )
            ),
        )
        for s in selectors
    )
