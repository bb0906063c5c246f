"""The pack's configuration: what each rule may be told through pack config.

Pulumi gives every policy its own configuration (``pulumi preview --policy-pack
policies --policy-pack-config config.json``, with ``{"<rule-id>": {...}}``); the offline
review reads the same file. Each rule declares which keys below it reads; every rule
also reads ``exemptions``. Defaults are the UAE baseline, so no config is needed for it.

Residency can only be narrowed here: ``allowedRegions`` takes UAE regions only and
``allowedCountries`` the UAE only (`UAE_REGIONS`, `UAE_COUNTRIES`), so a config file
cannot move data out of the country.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from modules.residency import UAE_AWS_REGIONS, UAE_COUNTRIES
from modules.validation import Checker

# The only regions and countries pack config may allow: the same definition the stack
# config uses (modules/residency.py).
UAE_REGIONS = UAE_AWS_REGIONS
DEFAULT_ALLOWED_REGIONS = UAE_REGIONS
DEFAULT_ALLOWED_COUNTRIES = UAE_COUNTRIES
DEFAULT_REQUIRED_TAGS = ("owner", "data-classification", "residency")

_STRING_LIST = {"type": "array", "items": {"type": "string"}}

# JSON schema of each configuration key (Pulumi validates pack config against these).
CONFIG_SCHEMAS: dict[str, dict[str, Any]] = {
    "allowedRegions": {
        "type": "array",
        "items": {"type": "string", "enum": list(UAE_REGIONS)},
        "minItems": 1,
        "default": list(DEFAULT_ALLOWED_REGIONS),
        "description": (
            "AWS regions where resources, copies and keys may live: UAE regions only "
            "(the allowlist can be narrowed, never widened)."
        ),
    },
    "allowedCountries": {
        "type": "array",
        "items": {"type": "string", "enum": list(UAE_COUNTRIES)},
        "minItems": 1,
        "default": list(DEFAULT_ALLOWED_COUNTRIES),
        "description": "ISO 3166 country codes a Kubernetes site may declare: AE only.",
    },
    "requiredTags": {
        **_STRING_LIST,
        "default": list(DEFAULT_REQUIRED_TAGS),
        "description": "Tag keys every taggable AWS resource must carry (non-empty).",
    },
    "allowedRegistries": {
        **_STRING_LIST,
        "default": [],
        "description": (
            "Container registries allowed besides the in-region ECR, as host or host/path "
            "prefix (e.g. registry.dc1.example.ae or mirror.example.ae/nvidia)."
        ),
    },
    "allowedObjectStores": {
        **_STRING_LIST,
        "default": [],
        "description": (
            "Object stores of UAE sites a Spark job may use besides the stack's buckets and "
            "stores inside the cluster, as host or host:port (e.g. objects.dc1.example.ae)."
        ),
    },
    "ecrAccountIds": {
        **_STRING_LIST,
        "default": [],
        "description": "When set, ECR images must come from these accounts' registries.",
    },
    "allowedEndpointCidrs": {
        **_STRING_LIST,
        "default": [],
        "description": "CIDRs an EKS public endpoint may be opened to (empty: private only).",
    },
    "maxMetadataHopLimit": {
        "type": "integer",
        "default": 2,
        "minimum": 1,
        "description": "Largest allowed IMDSv2 PUT response hop limit.",
    },
    "minKeyDeletionWindowDays": {
        "type": "integer",
        "default": 7,
        "minimum": 7,
        "maximum": 30,
        "description": "Smallest allowed KMS key deletion window, in days.",
    },
    "trainingRolePattern": {
        "type": "string",
        "default": "train",
        "description": "Case-insensitive substring of an IAM role name marking a training role.",
    },
    "clusterScopedKinds": {
        **_STRING_LIST,
        "default": [],
        "description": "Extra cluster-scoped Kubernetes kinds (CRDs) that need no namespace.",
    },
    "exemptions": {
        "type": "array",
        "default": [],
        "description": "Reviewed exceptions to this rule, each with a reason and an expiry date.",
        "items": {
            "type": "object",
            "required": ["resource", "reason", "expires"],
            "properties": {
                "resource": {
                    "type": "string",
                    "description": "URN, or a glob matched against the URN or resource name.",
                },
                "reason": {"type": "string", "minLength": 1},
                "expires": {"type": "string", "description": "Last day it applies (YYYY-MM-DD)."},
            },
        },
    },
}


class PackConfigError(ValueError):
    """Pack config that cannot be used; the message names every bad key."""


@dataclass(frozen=True)
class Exemption:
    """A reviewed exception to one rule for the resources ``resource`` matches.

    Args:
        resource: a URN, or a glob (``*``, ``?``) matched against the URN or the name.
        reason: why the exception is acceptable (shown in every report).
        expires: the last day the exemption applies; after it the violation counts again.
    """

    resource: str
    reason: str
    expires: dt.date

    def matches(self, urn: str, name: str) -> bool:
        return self.resource == urn or any(
            fnmatch.fnmatchcase(candidate, self.resource) for candidate in (urn, name)
        )

    def active(self, today: dt.date) -> bool:
        return today <= self.expires


@dataclass(frozen=True)
class Settings:
    """One rule's configuration, defaults filled in (see `CONFIG_SCHEMAS`)."""

    allowed_regions: tuple[str, ...] = DEFAULT_ALLOWED_REGIONS
    allowed_countries: tuple[str, ...] = DEFAULT_ALLOWED_COUNTRIES
    required_tags: tuple[str, ...] = DEFAULT_REQUIRED_TAGS
    allowed_registries: tuple[str, ...] = ()
    allowed_object_stores: tuple[str, ...] = ()
    ecr_account_ids: tuple[str, ...] = ()
    allowed_endpoint_cidrs: tuple[str, ...] = ()
    max_metadata_hop_limit: int = 2
    min_key_deletion_window_days: int = 7
    training_role_pattern: str = "train"
    cluster_scoped_kinds: tuple[str, ...] = ()
    exemptions: tuple[Exemption, ...] = field(default_factory=tuple)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Settings:
        """Settings from one rule's pack config; `PackConfigError` lists every problem.
        No config (every rule of a review without one, for every resource) is read once."""
        if not config:
            return _unconfigured()
        return cls._read(config)

    @classmethod
    def _read(cls, config: Mapping[str, Any]) -> Settings:
        config = dict(config)
        config.pop("enforcementLevel", None)
        checker = Checker()
        unknown = sorted(set(config) - set(CONFIG_SCHEMAS))
        checker.require(
            not unknown, "keys", unknown, f"known keys are {', '.join(sorted(CONFIG_SCHEMAS))}"
        )

        def strings(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            value = config.get(key, list(default))
            ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
            checker.require(ok, key, value, "a list of non-empty strings")
            return tuple(value) if ok else default

        def within(key: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
            """A non-empty subset of ``allowed``: pack config narrows residency only."""
            value = config.get(key, list(allowed))
            ok = (
                isinstance(value, list)
                and bool(value)
                and all(isinstance(v, str) and v in allowed for v in value)
            )
            checker.require(
                ok,
                key,
                value,
                f"a non-empty list of {what} ({', '.join(allowed)}): pack config can narrow "
                "residency, never widen it",
            )
            return tuple(value) if ok else allowed

        def integer(key: str, default: int, low: int, high: int) -> int:
            value = config.get(key, default)
            # Pulumi hands numbers over as floats; 2.0 is a fine hop limit.
            ok = (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and float(value).is_integer()
                and low <= value <= high
            )
            checker.require(ok, key, value, f"a whole number from {low} to {high}")
            return int(value) if ok else default

        pattern = config.get("trainingRolePattern", "train")
        checker.require(
            isinstance(pattern, str) and bool(pattern), "trainingRolePattern", pattern, "a string"
        )
        settings = cls(
            allowed_regions=within("allowedRegions", UAE_REGIONS, "UAE regions"),
            allowed_countries=within("allowedCountries", UAE_COUNTRIES, "UAE country codes"),
            required_tags=strings("requiredTags", DEFAULT_REQUIRED_TAGS),
            allowed_registries=strings("allowedRegistries", ()),
            allowed_object_stores=tuple(h.lower() for h in strings("allowedObjectStores", ())),
            ecr_account_ids=strings("ecrAccountIds", ()),
            allowed_endpoint_cidrs=strings("allowedEndpointCidrs", ()),
            max_metadata_hop_limit=integer("maxMetadataHopLimit", 2, 1, 64),
            min_key_deletion_window_days=integer("minKeyDeletionWindowDays", 7, 7, 30),
            training_role_pattern=pattern if isinstance(pattern, str) and pattern else "train",
            cluster_scoped_kinds=strings("clusterScopedKinds", ()),
            exemptions=_exemptions(config.get("exemptions", []), checker),
        )
        if checker.problems:
            raise PackConfigError("; ".join(p.describe() for p in checker.problems))
        return settings


def _exemptions(value: Any, checker: Checker) -> tuple[Exemption, ...]:
    if not isinstance(value, list):
        checker.require(False, "exemptions", value, "a list of {resource, reason, expires}")
        return ()
    result: list[Exemption] = []
    for index, item in enumerate(value):
        where = f"exemptions[{index}]"
        if not isinstance(item, Mapping):
            checker.require(False, where, item, "an object with resource, reason and expires")
            continue
        resource, reason, expires = item.get("resource"), item.get("reason"), item.get("expires")
        checker.require(
            isinstance(resource, str) and bool(resource.strip()),
            f"{where}.resource",
            resource,
            "a URN or a glob of resource names",
        )
        checker.require(
            isinstance(reason, str) and bool(reason.strip()),
            f"{where}.reason",
            reason,
            "a non-empty reason (it is shown in every report)",
        )
        expiry: dt.date | None = None
        try:
            expiry = dt.date.fromisoformat(str(expires))
        except ValueError:
            checker.require(False, f"{where}.expires", expires, "a date, YYYY-MM-DD")
        if isinstance(resource, str) and isinstance(reason, str) and expiry is not None:
            result.append(Exemption(resource.strip(), reason.strip(), expiry))
    return tuple(result)


@functools.cache
def _unconfigured() -> Settings:
    """The settings of a rule without config (frozen: one object serves every call)."""
    return Settings._read({})
