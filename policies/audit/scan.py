"""The audit's checks: read-only calls that find data, keys and copies outside the
allowed regions, whoever created them (the stack, another tool, or a person by hand).

Every call is a List/Describe/Get; every listing goes through boto3's paginators, so an
account with more items than one page is covered in full.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import boto3
from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError

S3_ARN_PREFIX = "arn:aws:s3:::"


@dataclass(frozen=True)
class Finding:
    """One resource, copy or key outside the allowed regions.

    Args:
        region: where it is (or, for replication and trails, where the copy goes).
        service: s3, kms, ec2, eks, ecr or cloudtrail.
        resource_type: e.g. ``bucket``, ``volume``, ``replication-rule``.
        resource: its name, ID or ARN.
        problem: what is wrong, in a sentence.
    """

    region: str
    service: str
    resource_type: str
    resource: str
    problem: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class ScanError:
    """A check that could not run (access denied, service not in the region ...)."""

    region: str
    check: str
    error: str


@dataclass
class Audit:
    """Accumulates findings and errors over all checks."""

    session: boto3.session.Session
    regions: Sequence[str]
    allowed: Sequence[str]
    page_size: int | None = None
    findings: list[Finding] | None = None
    errors: list[ScanError] | None = None
    account_id: str = ""

    def __post_init__(self) -> None:
        self.findings = []
        self.errors = []

    def client(self, service: str, region: str) -> BaseClient:
        return self.session.client(service, region_name=region)

    def pages(self, client: BaseClient, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        config = {"PageSize": self.page_size} if self.page_size else {}
        yield from client.get_paginator(operation).paginate(**kwargs, PaginationConfig=config)

    def found(
        self, region: str, service: str, resource_type: str, resource: str, problem: str
    ) -> None:
        """Record a `Finding` (its fields, in order)."""
        assert self.findings is not None
        self.findings.append(Finding(region, service, resource_type, resource, problem))

    def run(self, check: Callable[[Audit, str], None], region: str) -> None:
        """Run a regional check in ``region`` (see `attempt`)."""
        self.attempt(region, check.__name__, lambda: check(self, region))

    def attempt(self, region: str, name: str, check: Callable[[], None]) -> None:
        """Run one check; a call that fails is recorded as a check not run (`ScanError`),
        and the audit goes on."""
        try:
            check()
        except ClientError as err:
            assert self.errors is not None
            self.errors.append(ScanError(region, name, f"{error_code(err) or 'error'}: {err}"))
        except BotoCoreError as err:
            assert self.errors is not None
            self.errors.append(ScanError(region, name, str(err)))

    def foreign(self, region: str) -> bool:
        return region not in self.allowed


def error_code(err: ClientError) -> str:
    """The AWS error code of a failed call ("" when the answer has none)."""
    return str(err.response.get("Error", {}).get("Code", ""))


def bucket_configuration(
    s3: BaseClient, operation: str, bucket: str, missing: str
) -> dict[str, Any]:
    """The answer of the S3 Get call ``operation`` for ``bucket``, or ``{}`` when AWS
    answers that the bucket has no such configuration (the error code ``missing``)."""
    try:
        answer: dict[str, Any] = getattr(s3, operation)(Bucket=bucket)
    except ClientError as err:
        if error_code(err) != missing:
            raise
        return {}
    return answer


def bucket_region(audit: Audit, s3: BaseClient, bucket: str) -> str:
    """The region of a bucket (GetBucketLocation's legacy answers normalised)."""
    location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    if location in (None, ""):
        return "us-east-1"
    if location == "EU":
        return "eu-west-1"
    return str(location)


def check_buckets(audit: Audit, region: str) -> None:
    """Buckets located outside the allowlist, and replication rules that copy objects
    to a bucket outside it (or to one whose region cannot be read)."""
    s3 = audit.client("s3", region)
    for page in (
        audit.session.client("s3", region_name=region).get_paginator("list_buckets").paginate()
    ):
        for bucket in page.get("Buckets", []):
            name = bucket["Name"]
            location = bucket_region(audit, s3, name)
            if audit.foreign(location):
                audit.found(location, "s3", "bucket", name, f"bucket is located in {location}")
            replication = bucket_configuration(
                s3, "get_bucket_replication", name, "ReplicationConfigurationNotFoundError"
            ).get("ReplicationConfiguration", {})
            for rule in replication.get("Rules", []):
                if rule.get("Status") != "Enabled":
                    continue
                target = str(rule.get("Destination", {}).get("Bucket", ""))
                target_name = target.removeprefix(S3_ARN_PREFIX)
                try:
                    target_region = bucket_region(audit, s3, target_name)
                except ClientError:
                    audit.found(
                        location,
                        "s3",
                        "replication-rule",
                        f"{name} -> {target_name}",
                        "replicates to a bucket whose region cannot be read (another account?)",
                    )
                    continue
                if audit.foreign(target_region):
                    audit.found(
                        target_region,
                        "s3",
                        "replication-rule",
                        f"{name} -> {target_name}",
                        f"replicates objects to {target_region}",
                    )


def check_kms(audit: Audit, region: str) -> None:
    """Customer-managed keys in foreign regions, and multi-region keys anywhere."""
    kms = audit.client("kms", region)
    for page in audit.pages(kms, "list_keys"):
        for entry in page.get("Keys", []):
            meta = kms.describe_key(KeyId=entry["KeyId"])["KeyMetadata"]
            if meta.get("KeyManager") == "AWS" or meta.get("KeyState") == "PendingDeletion":
                continue
            arn = meta.get("Arn", entry["KeyId"])
            if meta.get("MultiRegion"):
                audit.found(
                    region,
                    "kms",
                    "key",
                    arn,
                    "multi-region key: its material can be replicated abroad",
                )
            elif audit.foreign(region):
                audit.found(region, "kms", "key", arn, f"customer-managed key in {region}")


def check_ec2_storage(audit: Audit, region: str) -> None:
    """EBS volumes, the account's own snapshots and AMIs in foreign regions."""
    if not audit.foreign(region):
        return
    ec2 = audit.client("ec2", region)
    for page in audit.pages(ec2, "describe_volumes"):
        for volume in page.get("Volumes", []):
            audit.found(region, "ec2", "volume", volume["VolumeId"], f"EBS volume in {region}")
    for page in audit.pages(ec2, "describe_snapshots", OwnerIds=[audit.account_id or "self"]):
        for snapshot in page.get("Snapshots", []):
            if audit.account_id and snapshot.get("OwnerId") != audit.account_id:
                continue
            audit.found(
                region, "ec2", "snapshot", snapshot["SnapshotId"], f"EBS snapshot in {region}"
            )
    for page in audit.pages(ec2, "describe_images", Owners=["self"]):
        for image in page.get("Images", []):
            audit.found(region, "ec2", "image", image["ImageId"], f"AMI in {region}")


def check_eks(audit: Audit, region: str) -> None:
    """EKS clusters in foreign regions."""
    if not audit.foreign(region):
        return
    eks = audit.client("eks", region)
    for page in audit.pages(eks, "list_clusters"):
        for name in page.get("clusters", []):
            audit.found(region, "eks", "cluster", name, f"EKS cluster in {region}")


def check_ecr(audit: Audit, region: str) -> None:
    """Repositories in foreign regions, and registry replication to foreign regions."""
    ecr = audit.client("ecr", region)
    if audit.foreign(region):
        for page in audit.pages(ecr, "describe_repositories"):
            for repo in page.get("repositories", []):
                audit.found(
                    region,
                    "ecr",
                    "repository",
                    repo["repositoryArn"],
                    f"ECR repository in {region}",
                )
    replication = ecr.describe_registry().get("replicationConfiguration", {})
    for rule in replication.get("rules", []):
        for destination in rule.get("destinations", []):
            target = destination.get("region", "")
            if audit.foreign(target):
                audit.found(
                    target,
                    "ecr",
                    "replication-rule",
                    f"registry in {region} -> {target}",
                    f"registry replication copies images to {target}",
                )


def check_cloudtrail(audit: Audit, region: str) -> None:
    """Trails (homed in this region) delivering logs to a bucket in a foreign region."""
    cloudtrail = audit.client("cloudtrail", region)
    s3 = audit.client("s3", region)
    for trail in cloudtrail.describe_trails(includeShadowTrails=False).get("trailList", []):
        bucket = trail.get("S3BucketName")
        if not bucket:
            continue
        arn = trail.get("TrailARN", trail.get("Name", "?"))
        try:
            target = bucket_region(audit, s3, bucket)
        except ClientError:
            audit.found(
                region,
                "cloudtrail",
                "trail",
                arn,
                f"delivers to bucket {bucket}, whose region cannot be read",
            )
            continue
        if audit.foreign(target):
            audit.found(
                target, "cloudtrail", "trail", arn, f"delivers logs to bucket {bucket} in {target}"
            )


REGIONAL_CHECKS: tuple[Callable[[Audit, str], None], ...] = (
    check_kms,
    check_ec2_storage,
    check_eks,
    check_ecr,
    check_cloudtrail,
)


def run_audit(
    session: boto3.session.Session,
    regions: Sequence[str],
    allowed: Sequence[str],
    page_size: int | None = None,
) -> Audit:
    """Every check over ``regions``; S3 (a global listing) once."""
    audit = Audit(session, regions, allowed, page_size)
    audit.account_id = session.client("sts", region_name=regions[0]).get_caller_identity()[
        "Account"
    ]
    audit.run(check_buckets, regions[0])
    for region in regions:
        for check in REGIONAL_CHECKS:
            audit.run(check, region)
    return audit
