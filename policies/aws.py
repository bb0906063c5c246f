"""What the AWS rules need to know about AWS resources: region, tags, ARNs, keys."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.model import ResourceView
from policies.values import dig, is_unknown, known

AWS_PROVIDER_TYPE = "pulumi:providers:aws"

# Services whose resources have no region of their own (their API endpoint is global):
# they are judged by what they carry (policy documents, origins, targets).
GLOBAL_MODULES = frozenset(
    {
        "iam",
        "route53",
        "cloudfront",
        "organizations",
        "globalaccelerator",
        "shield",
        "budgets",
        "costexplorer",
        "account",
        "route53domains",
        "waf",
    }
)

REGION_PATTERN = r"(?:af|ap|ca|cn|eu|il|me|mx|sa|us)-(?:gov-|iso[a-z]?-)?[a-z]+-\d{1,2}"
REGION_RE = re.compile(rf"^{REGION_PATTERN}$")
# An ARN: arn:<partition>:<service>:<region>:<account>:<resource>
ARN_RE = re.compile(r"\barn:aws[a-z-]*:([a-z0-9-]+):([a-z0-9-]*):(\d{12}|aws)?:[^\s\"',]+")
# A regional AWS endpoint or hostname, e.g. bucket.s3.eu-west-1.amazonaws.com.
ENDPOINT_RE = re.compile(rf"\b({REGION_PATTERN})\.amazonaws\.com(?:\.cn)?\b")
ECR_HOST_RE = re.compile(rf"^(\d{{12}})\.dkr\.ecr(?:-fips)?\.({REGION_PATTERN})\.amazonaws\.com$")


def identifiers(resource: ResourceView, *keys: str) -> set[str]:
    """The known string values of ``keys`` (``arn``, ``id``, ``name`` ...): what other
    resources may use to name this one."""
    values = (resource.props.get(key) for key in keys)
    return {value for value in values if isinstance(value, str) and not is_unknown(value)}


def type_module(type_token: str) -> str:
    """The module of an ``aws:<module>/<resource>:<Class>`` token (``s3``, ``iam`` ...)."""
    parts = type_token.split(":")
    return parts[1].split("/", 1)[0] if len(parts) == 3 else ""


def is_aws_resource(resource: ResourceView) -> bool:
    return resource.type.startswith("aws:")


@functools.lru_cache(maxsize=4096)
def is_global_service(type_token: str) -> bool:
    """True for resources of a global service (IAM, Route 53 zones, CloudFront ...)."""
    module = type_token.split(":")[1] if type_token.count(":") == 2 else ""
    name = module.split("/", 1)[1] if "/" in module else ""
    # Route 53 Resolver endpoints and rules are regional, unlike zones and records.
    return type_module(type_token) in GLOBAL_MODULES and not name.startswith("resolver")


def provider_region(resource: ResourceView) -> Any:
    """The region of the resource's provider (None without one)."""
    if resource.provider is None:
        return None
    return resource.provider.props.get("region")


def region_of(resource: ResourceView) -> Any:
    """The region a regional AWS resource lives in: its own ``region`` input (every
    pulumi-aws v7 resource has one), else its provider's; None when neither says."""
    own = resource.props.get("region")
    if own not in (None, ""):
        return own
    return provider_region(resource)


def default_tags(resource: ResourceView) -> dict[str, Any]:
    """The provider's ``defaultTags.tags`` (providers may store it as a JSON string)."""
    if resource.provider is None:
        return {}
    value = resource.provider.props.get("defaultTags")
    if isinstance(value, str) and not is_unknown(value):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    tags = dig(value, "tags")
    if is_unknown(tags):
        known(tags, "provider.defaultTags.tags")
    return dict(tags) if isinstance(tags, dict) else {}


def effective_tags(resource: ResourceView) -> dict[str, Any]:
    """Provider default tags merged with the resource's own ``tags`` (own ones win)."""
    own = resource.props.get("tags")
    if is_unknown(own):
        known(own, "tags")
    merged = default_tags(resource)
    if isinstance(own, dict):
        merged.update(own)
    return merged


@functools.lru_cache(maxsize=512)
def sdk_taggable(type_token: str) -> bool | None:
    """Whether pulumi-aws declares tags for this type (None when the SDK does not know it).

    Read from the class's source file where it is where the SDK's generator puts it
    (``pulumi_aws/<module>/<file_name>.py``): importing an SDK module takes a large part
    of a second, once per module a plan uses. Else from the class itself."""
    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "aws" or "/" not in parts[1]:
        return None
    module, file = parts[1].split("/", 1)
    from_source = _taggable_in_source(module, file, parts[2])
    return from_source if from_source is not None else sdk_taggable_by_import(type_token)


@functools.cache
def _sdk_root() -> Path | None:
    spec = importlib.util.find_spec("pulumi_aws")
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(next(iter(locations))) if locations else None


def _taggable_in_source(module: str, file: str, cls: str) -> bool | None:
    """Whether the resource class ``cls`` in its generated source file has the
    ``tags_all`` output; None when the file or the class is not where expected."""
    root = _sdk_root()
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", file).lower()
    try:
        source = (root / module / f"{name}.py").read_text(encoding="utf-8") if root else ""
    except OSError:
        return None
    start = source.find(f"\nclass {cls}(pulumi.CustomResource):")
    if start < 0:
        return None
    end = source.find("\nclass ", start + 1)
    body = source[start : end if end >= 0 else len(source)]
    return "\n    def tags_all(self) -> pulumi.Output[" in body


@functools.lru_cache(maxsize=512)
def sdk_taggable_by_import(type_token: str) -> bool | None:
    """`sdk_taggable` from the SDK's class itself (its module imported)."""
    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "aws" or "/" not in parts[1]:
        return None
    module = parts[1].split("/", 1)[0]
    try:
        # Through the package, never its submodule: importing pulumi_aws.<m>.<file>
        # directly breaks the SDK's lazy package (its classes vanish for later users).
        sdk_module = importlib.import_module(f"pulumi_aws.{module}")
        cls = getattr(sdk_module, parts[2], None)
    except ImportError:
        return None
    return None if cls is None else hasattr(cls, "tags_all")


def is_taggable(resource: ResourceView) -> bool:
    """A custom AWS resource that accepts tags."""
    if not is_aws_resource(resource):
        return False
    taggable = sdk_taggable(resource.type)
    return taggable if taggable is not None else "tags" in resource.props


@dataclass(frozen=True)
class Arn:
    """The parts of an ARN that residency cares about."""

    service: str
    region: str
    account: str
    text: str


def arns_in(text: str) -> Iterator[Arn]:
    for match in ARN_RE.finditer(text):
        yield Arn(match.group(1), match.group(2), match.group(3) or "", match.group(0))


def parse_arn(text: Any) -> Arn | None:
    if not isinstance(text, str):
        return None
    match = ARN_RE.fullmatch(text.strip())
    if match is None:
        return None
    return Arn(match.group(1), match.group(2), match.group(3) or "", match.group(0))


def foreign_regions_in(text: str, allowed: tuple[str, ...]) -> list[str]:
    """Regions outside ``allowed`` named by ARNs or regional endpoints in ``text``."""
    found = [arn.region for arn in arns_in(text) if arn.region and arn.region not in allowed]
    found += [m.group(1) for m in ENDPOINT_RE.finditer(text) if m.group(1) not in allowed]
    return sorted(set(found))


def is_aws_managed_key(key: str) -> bool:
    """True for AWS-managed key aliases (``alias/aws/ebs``) that no customer controls."""
    return "alias/aws/" in key
