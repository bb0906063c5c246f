"""Stack-level rules: what only the whole stack can show (companions, key origins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.aws import identifiers, parse_arn, region_of
from policies.catalogue import stack_rule
from policies.documents import InvalidDocumentError, statements
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.encryption import key_refs
from policies.settings import Settings
from policies.values import Deferred, as_list, dig, is_unknown, known

BUCKET = "aws:s3/bucket:Bucket"
SSE_CONFIG = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
)
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
REPLICATION = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
KEY = "aws:kms/key:Key"
ALIAS = "aws:kms/alias:Alias"


def bucket_ids(bucket: ResourceView) -> set[str]:
    """The values another resource may use to name this bucket (name, id, ARN)."""
    ids = identifiers(bucket, "bucket", "id", "arn")
    ids |= {f"arn:aws:s3:::{i}" for i in list(ids) if not i.startswith("arn:")}
    return ids


def refers_to(resource: ResourceView, prop: str, target: ResourceView, ids: set[str]) -> bool:
    """Whether ``resource.<prop>`` names ``target``: by dependency, or by a known value."""
    if target.urn in resource.property_dependencies.get(prop, ()):
        return True
    value = resource.props.get(prop)
    return isinstance(value, str) and value in ids


def _good(
    good: Callable[[ResourceView], bool], companion: ResourceView, unreadable: list[str]
) -> bool:
    """``good(companion)``; a companion whose document cannot be read is not good, and
    why is added to ``unreadable``."""
    try:
        return good(companion)
    except InvalidDocumentError as invalid:
        unreadable.append(str(invalid))
        return False


def _companions(
    stack: StackView, companion_type: str, good: Callable[[ResourceView], bool], what: str
) -> StackFindings:
    # Companions are looked up by what their `bucket` names (as `refers_to` matches
    # them), not by scanning every companion for every bucket.
    referrers = stack.referrers((companion_type,), "bucket")
    # A companion whose bucket is unknown and has no dependency names no bucket.
    unresolved = [
        c
        for c in stack.of_type(companion_type)
        if is_unknown(c.props.get("bucket")) and not c.property_dependencies.get("bucket")
    ]
    deferred = Deferred()
    for bucket in stack.of_type(BUCKET):
        ids = bucket_ids(bucket)
        mine = referrers.naming(bucket.urn, ids)
        with deferred.each():
            unreadable: list[str] = []
            if not any(_good(good, c, unreadable) for c in mine):
                if unresolved:
                    known(unresolved[0].props.get("bucket"), f"{unresolved[0].name}.bucket")
                yield (
                    bucket.urn,
                    f"bucket {bucket.name} has no {what}"
                    + "".join(f": {problem}" for problem in unreadable),
                )
    deferred.finish()


@stack_rule("aws-s3-bucket-encryption-config")
def bucket_encryption_config(stack: StackView, settings: Settings) -> StackFindings:
    yield from _companions(
        stack, SSE_CONFIG, lambda c: True, "server-side encryption configuration"
    )


@stack_rule("aws-s3-bucket-public-access-block")
def bucket_public_access_block(stack: StackView, settings: Settings) -> StackFindings:
    yield from _companions(stack, PUBLIC_ACCESS_BLOCK, lambda c: True, "public access block")


def denies_insecure_transport(policy: ResourceView) -> bool:
    """A Deny statement on aws:SecureTransport = false (TLS-only bucket policy).

    Raises `InvalidDocumentError` when the policy is not a JSON object.
    """
    for statement in statements(policy.props.get("policy"), f"{policy.name}.policy"):
        if statement.get("Effect") != "Deny":
            continue
        condition = dig(statement, "Condition", "Bool", "aws:SecureTransport")
        if any(str(v).lower() == "false" for v in as_list(condition)):
            return True
    return False


@stack_rule("aws-s3-bucket-tls-only")
def bucket_tls_only(stack: StackView, settings: Settings) -> StackFindings:
    yield from _companions(
        stack, BUCKET_POLICY, denies_insecure_transport, "TLS-only bucket policy"
    )


def stack_key_for(
    stack: StackView, resource: ResourceView, top: str, value: Any
) -> ResourceView | None:
    """The stack's KMS key ``value`` names (through an alias too), or None."""
    index = stack.by_urn()
    for dependency in (index[u] for u in resource.property_dependencies.get(top, ()) if u in index):
        if dependency.type == KEY:
            return dependency
        if dependency.type == ALIAS:
            for target in (
                index[u]
                for u in dependency.property_dependencies.get("targetKeyId", ())
                if u in index
            ):
                if target.type == KEY:
                    return target
    if not isinstance(value, str) or is_unknown(value):
        return None
    for key in stack.of_type(KEY):
        if value in identifiers(key, "arn", "keyId", "id"):
            return key
    alias_name = value.split(":alias/", 1)[-1] if ":alias/" in value else value
    alias_name = alias_name if alias_name.startswith("alias/") else f"alias/{alias_name}"
    for alias in stack.of_type(ALIAS):
        if alias.props.get("name") == alias_name:
            return stack_key_for(stack, alias, "targetKeyId", alias.props.get("targetKeyId"))
    return None


def names_a_key(resource: ResourceView) -> bool:
    """Resources that name a KMS key for their data (`key_refs`)."""
    return any(ref.value not in (None, "") for ref in key_refs(resource))


@stack_rule("uae-kms-key-from-stack")
def kms_key_from_stack(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    for resource in stack.resources:
        for ref in key_refs(resource):
            if ref.value in (None, ""):
                continue  # missing keys are `aws-encryption-customer-managed-key`'s concern
            with deferred.each():
                key = stack_key_for(stack, resource, ref.top, ref.value)
                if key is None:
                    known(ref.value, f"{resource.name}.{ref.path}")
                    yield (
                        resource.urn,
                        f"`{ref.path}` uses key {ref.value}, which this stack does not create",
                    )
                    continue
                key_region = known(region_of(key), f"{key.name}.region")
                data_region = region_of(resource)
                if key_region in (None, ""):
                    continue  # an unpinned key is `uae-aws-region-allowlist`'s concern
                if key_region not in settings.allowed_regions:
                    yield (
                        resource.urn,
                        f"`{ref.path}` uses key {key.name} in {key_region}, outside the allowlist",
                    )
                elif (
                    data_region not in (None, "")
                    and not is_unknown(data_region)
                    and data_region != key_region
                ):
                    yield (
                        resource.urn,
                        (
                            f"`{ref.path}` uses key {key.name} in {key_region} for data in "
                            f"{data_region}"
                        ),
                    )
    deferred.finish()


@stack_rule("uae-s3-replication-in-region")
def s3_replication_in_region(stack: StackView, settings: Settings) -> StackFindings:
    buckets = list(stack.of_type(BUCKET))
    deferred = Deferred()
    for config in stack.of_type(REPLICATION):
        for i, rule in enumerate(as_list(config.props.get("rules"))):
            destination = dig(rule, "destination", "bucket")
            path = f"rules[{i}].destination.bucket"
            with deferred.each():
                by_dependency = [
                    b for b in buckets if b.urn in config.property_dependencies.get("rules", ())
                ]
                target = None
                if isinstance(destination, str) and not is_unknown(destination):
                    target = next((b for b in buckets if destination in bucket_ids(b)), None)
                elif len(by_dependency) == 1:
                    target = by_dependency[0]
                else:
                    known(destination, f"{config.name}.{path}")
                if target is None:
                    arn = parse_arn(destination)
                    where = f" (in {arn.region})" if arn and arn.region else ""
                    yield (
                        config.urn,
                        (
                            f"`{path}` replicates to {destination}, a bucket this stack does not "
                            f"create{where}: its region "
                            "cannot be shown to be allowed"
                        ),
                    )
                    continue
                region = known(region_of(target), f"{target.name}.region")
                if region not in settings.allowed_regions:
                    yield config.urn, f"`{path}` replicates to bucket {target.name} in {region}"
    deferred.finish()
