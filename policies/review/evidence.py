"""The residency evidence table: where each resource lives and which key encrypts it,
and where the stack's state, secrets and audit trail are (`state_rows`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.aws import is_global_service, region_of
from policies.k8s import CONFIGMAP_TYPE, HELM_RELEASE_TYPE
from policies.model import ResourceView, StackView
from policies.review.plan import Plan, stack_resources
from policies.rules.encryption import key_refs
from policies.rules.residency import SITE_CONFIGMAP, SITE_NAMESPACE
from policies.rules.stack import BUCKET, SSE_CONFIG, bucket_ids, stack_key_for
from policies.values import dig, is_unknown

UNKNOWN_TEXT = "(known after apply)"
STACK_TYPE = "pulumi:pulumi:Stack"
# What the program cannot see: the trail is an account resource the bootstrap creates
# and `make audit` verifies; no plan shows it.
TRAIL_NAME = "uae-gpu-platform-account-trail"


@dataclass(frozen=True)
class EvidenceRow:
    """One resource's place and key.

    Args:
        urn, type, name: the resource.
        location: AWS region (or ``global``), or the Kubernetes site and country.
        zone: availability zone(s) or on-prem rack, where the plan says.
        key: the KMS key that encrypts its data (the stack's key name, or the value given).
    """

    urn: str
    type: str
    name: str
    location: str
    zone: str
    key: str


def _text(value: object) -> str:
    if value in (None, ""):
        return "-"
    return UNKNOWN_TEXT if is_unknown(value) else str(value)


def _sites(stack: StackView) -> dict[str, str]:
    sites: dict[str, str] = {}
    for resource in stack.of_type(CONFIGMAP_TYPE):
        meta = resource.props.get("metadata")
        if dig(meta, "name") == SITE_CONFIGMAP and dig(meta, "namespace") == SITE_NAMESPACE:
            data = resource.props.get("data")
            data = data if isinstance(data, Mapping) else {}
            if resource.provider is not None:
                sites[resource.provider.urn] = (
                    f"site {_text(data.get('site'))} ({_text(data.get('country'))})"
                )
    return sites


def _zones(stack: StackView, resource: ResourceView) -> str:
    own = resource.props.get("availabilityZone")
    if own not in (None, ""):
        return _text(own)
    subnets = resource.property_dependencies
    if "subnetIds" not in subnets and "subnetId" not in subnets:
        return "-"
    index = stack.by_urn()
    zones = {
        _text(index[urn].props.get("availabilityZone"))
        for prop in ("subnetIds", "subnetId")
        for urn in resource.property_dependencies.get(prop, ())
        if urn in index and index[urn].props.get("availabilityZone") not in (None, "")
    }
    return ", ".join(sorted(zones)) or "-"


def _key(stack: StackView, resource: ResourceView) -> str:
    refs = key_refs(resource)
    if resource.type == BUCKET:
        configs = stack.referrers((SSE_CONFIG,), "bucket").naming(
            resource.urn, bucket_ids(resource)
        )
        if configs:  # the first in stack order, as `refers_to` finds it
            refs = key_refs(configs[0])
            resource = configs[0]
    names = []
    for ref in refs:
        key = stack_key_for(stack, resource, ref.top, ref.value)
        names.append(key.name if key is not None else _text(ref.value))
    return ", ".join(dict.fromkeys(n for n in names if n != "-")) or "-"


def state_rows(plan: Plan) -> list[EvidenceRow]:
    """The stack's state backend and secrets provider (from the root stack's
    ``residency`` output, where the program records what it checked) and the account
    trail, each with its region or with the layer that checks what the plan cannot show."""
    root = next((r for r in plan.resources if r.type == STACK_TYPE), None)
    residency = root.state.get("residency") if root is not None else None
    urn = root.urn if root is not None else "-"
    rows = []
    for key, kind, name in (
        ("stateBackend", "pulumi:state-backend", "state backend"),
        ("secretsProvider", "pulumi:secrets-provider", "secrets provider"),
    ):
        part = dig(residency, key) if isinstance(residency, Mapping) else None
        if isinstance(part, Mapping):
            region = part.get("region")
            location = _text(region) if region else "no UAE region"
            url, source = _text(part.get("url")), _text(part.get("source"))
            key_text = (
                url if kind == "pulumi:secrets-provider" else "state bucket CMK (`make audit`)"
            )
            rows.append(EvidenceRow(urn, kind, f"{name} {url} ({source})", location, "-", key_text))
        else:
            rows.append(
                EvidenceRow(
                    urn,
                    kind,
                    name,
                    "not shown in this plan: checked by the program before any resource "
                    "and by the pull-request workflow",
                    "-",
                    "-",
                )
            )
    rows.append(
        EvidenceRow(
            urn,
            "aws:cloudtrail (account trail)",
            TRAIL_NAME,
            "not in a plan: created by `make bootstrap`, verified by `make audit`",
            "-",
            "alias/uae-gpu-platform-trail",
        )
    )
    return rows


def evidence_rows(plan: Plan) -> list[EvidenceRow]:
    """The stack's state, secrets and trail (`state_rows`), then a row for every custom
    resource of the plan (providers excluded)."""
    stack = StackView.of(stack_resources(plan))
    sites = _sites(stack)
    rows = state_rows(plan)
    for resource in stack.resources:
        plan_resource = plan.index[resource.urn]
        if not plan_resource.custom or resource.type.startswith("pulumi:providers:"):
            continue
        if resource.type.startswith("aws:"):
            location = "global" if is_global_service(resource.type) else _text(region_of(resource))
        elif resource.type.startswith("kubernetes:") or resource.type == HELM_RELEASE_TYPE:
            provider = resource.provider.urn if resource.provider else None
            location = sites.get(provider or "", "site undeclared")
        else:
            location = "-"
        rows.append(
            EvidenceRow(
                resource.urn,
                resource.type,
                resource.name,
                location,
                _zones(stack, resource),
                _key(stack, resource),
            )
        )
    return rows
