"""Backups stay in the UAE: every copy an AWS Backup plan makes, and every backup it
writes to a logically air-gapped vault, goes to a vault in an allowed region; an
on-premises CloudNativePG database backs up only to an object store in the site (or an
S3 endpoint of an allowed region).

S3 replication, the other way a stack copies its data to a second place, is
`uae-s3-replication-in-region`'s (policies/rules/stack.py).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterator
from typing import Any

from policies.aws import identifiers, parse_arn, region_of
from policies.catalogue import stack_rule
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.checks import GLOBAL_REGION, aws_region
from policies.settings import Settings
from policies.values import Deferred, as_list, dig, is_unknown, known

PLAN = "aws:backup/plan:Plan"
VAULT_TYPES = (
    "aws:backup/vault:Vault",
    "aws:backup/logicallyAirGappedVault:LogicallyAirGappedVault",
)


def _destination_problem(
    stack: StackView, plan: ResourceView, value: object, path: str, settings: Settings
) -> str | None:
    """Why the vault ``value`` names is not shown to be in an allowed region, or None."""
    if value in (None, ""):
        return f"`{path}` names no destination vault"
    vaults = list(stack.of_type(*VAULT_TYPES))
    if is_unknown(value):
        # Computed from a vault of this stack: the plan's rules depend on it. Every vault
        # they depend on must then be in an allowed region; with none, it cannot be told.
        depended = [v for v in vaults if v.urn in plan.property_dependencies.get("rules", ())]
        if not depended:
            known(value, f"{plan.name}.{path}")
        for vault in depended:
            region = known(region_of(vault), f"{vault.name}.region")
            if region not in settings.allowed_regions:
                return f"`{path}` copies to vault {vault.name} in {region}"
        return None
    text = str(value)
    mine = next((v for v in vaults if text in identifiers(v, "arn", "id", "name")), None)
    if mine is not None:
        region = known(region_of(mine), f"{mine.name}.region")
        if region not in settings.allowed_regions:
            return f"`{path}` copies to vault {mine.name} in {region}"
        return None
    arn = parse_arn(text)
    if arn is None or arn.service != "backup" or not arn.region:
        return f"`{path}` is {text!r}, not the ARN of a backup vault: its region cannot be told"
    if arn.region not in settings.allowed_regions:
        return f"`{path}` copies to {text} in {arn.region}"
    return None


@stack_rule("uae-backup-copies-in-region")
def backup_copies_in_region(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    for plan in stack.of_type(PLAN):
        for i, rule in enumerate(as_list(plan.props.get("rules"))):
            destinations = [
                (f"rules[{i}].copyActions[{j}].destinationVaultArn", dig(a, "destinationVaultArn"))
                for j, a in enumerate(as_list(dig(rule, "copyActions")))
            ]
            air_gapped = dig(rule, "targetLogicallyAirGappedBackupVaultArn")
            if air_gapped not in (None, ""):
                path = f"rules[{i}].targetLogicallyAirGappedBackupVaultArn"
                destinations.append((path, air_gapped))
            for path, value in destinations:
                with deferred.each():
                    problem = _destination_problem(stack, plan, value, path, settings)
                    if problem:
                        yield plan.urn, problem
    deferred.finish()


# -- CloudNativePG: a database's backups stay in the site ---------------------------------

CNPG_CLUSTER = "kubernetes:postgresql.cnpg.io/v1:Cluster"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
CNPG_CLUSTER_LABEL = "cnpg.io/cluster"
#: Public object stores of other providers: a backup there leaves the site, wherever the
#: provider's region is (none of these is a UAE-resident service the pack can verify).
PUBLIC_OBJECT_STORES = (
    "googleapis.com",
    "core.windows.net",
    "r2.cloudflarestorage.com",
    "digitaloceanspaces.com",
    "backblazeb2.com",
    "wasabisys.com",
    "linodeobjects.com",
    "aliyuncs.com",
    "oraclecloud.com",
    "appdomain.cloud",
)


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    """Whether a NetworkPolicy's podSelector selects pods with ``labels`` (matchLabels;
    a selector with expressions is taken to select them: the stricter reading here)."""
    if not isinstance(selector, dict):
        return True
    match = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in match.items())


def _opens_port(rule: Any, port: int) -> bool:
    ports = as_list(dig(rule, "ports"))
    return not ports or any(dig(p, "port") in (port, None) for p in ports)


def _egress_outside_site(
    stack: StackView, namespace: str, cluster: str, port: int
) -> Iterator[str]:
    """Where the cluster's instances may connect on ``port`` outside the site: an egress
    rule to any destination, or to an address range that is not private."""
    labels = {CNPG_CLUSTER_LABEL: cluster}
    for policy in stack.of_type(NETWORK_POLICY):
        meta = policy.props.get("metadata") or {}
        if known(dig(meta, "namespace"), f"{policy.name}.metadata.namespace") != namespace:
            continue
        spec = policy.props.get("spec") or {}
        if not _selects(known(dig(spec, "podSelector"), f"{policy.name}.spec.podSelector"), labels):
            continue
        for i, rule in enumerate(as_list(dig(spec, "egress"))):
            if not _opens_port(rule, port):
                continue
            peers = as_list(dig(rule, "to"))
            if not peers:
                yield f"NetworkPolicy {dig(meta, 'name')} egress[{i}] lets it reach any address"
            for peer in peers:
                cidr = dig(peer, "ipBlock", "cidr")
                if cidr is None:
                    continue  # pods of the cluster: inside it
                text = str(known(cidr, f"{policy.name}.spec.egress[{i}].to.ipBlock.cidr"))
                try:
                    network = ipaddress.ip_network(text, strict=False)
                except ValueError:
                    yield f"NetworkPolicy {dig(meta, 'name')} egress[{i}] names {text!r}"
                    continue
                if network.prefixlen == 0 or not network.is_private:
                    yield (
                        f"NetworkPolicy {dig(meta, 'name')} lets it reach {text}, which is "
                        "not a private address range of the site"
                    )


def _target_problems(
    stack: StackView, cluster: ResourceView, store: Any, settings: Settings
) -> Iterator[str]:
    """Why the object store a CloudNativePG cluster backs up to is not shown to be in the
    site (or in an allowed region)."""
    path = "spec.backup.barmanObjectStore"
    for provider in ("azureCredentials", "googleCredentials"):
        if dig(store, provider) is not None:
            yield f"`{path}.{provider}`: backups go to a public cloud's store outside the site"
    destination = str(known(dig(store, "destinationPath"), f"{cluster.name}.{path}"))
    if not destination.startswith("s3://"):
        yield f"`{path}.destinationPath` is {destination!r}: not an S3 bucket of the site"
    endpoint = known(dig(store, "endpointURL"), f"{cluster.name}.{path}.endpointURL")
    if endpoint in (None, ""):
        yield (
            f"`{path}.endpointURL` is not set: barman-cloud then writes to AWS S3's default "
            "endpoint, whose bucket region the plan cannot tell"
        )
        return
    url = urllib.parse.urlsplit(str(endpoint))
    host = (url.hostname or "").lower()
    if url.scheme != "https":
        yield f"`{path}.endpointURL` is {endpoint!r}: backups would travel without TLS"
    region = aws_region(host)
    if region is not None:
        if region not in settings.allowed_regions:
            where = region or f"AWS's global endpoint ({GLOBAL_REGION})"
            yield f"`{path}.endpointURL` is {endpoint!r}, in {where}: outside the allowed regions"
        return
    if host.endswith(PUBLIC_OBJECT_STORES):
        yield f"`{path}.endpointURL` is {endpoint!r}: a public object store outside the site"
        return
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and not address.is_private:
        yield f"`{path}.endpointURL` is {endpoint!r}: not a private address of the site"
        return
    # A name of the site's: what it resolves to is only known at run time, so the
    # database must be fenced to the site's addresses on the store's port.
    meta = cluster.props.get("metadata") or {}
    namespace = known(dig(meta, "namespace"), f"{cluster.name}.metadata.namespace")
    name = known(dig(meta, "name"), f"{cluster.name}.metadata.name")
    port = url.port or (443 if url.scheme == "https" else 80)
    for reason in _egress_outside_site(stack, str(namespace), str(name), port):
        yield f"the database's egress is not confined to the site: {reason}"


@stack_rule("uae-database-backups-in-site")
def database_backups_in_site(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    for cluster in stack.of_type(CNPG_CLUSTER):
        with deferred.each():
            store = dig(cluster.props, "spec", "backup", "barmanObjectStore")
            if store is None:
                continue
            known(store, f"{cluster.name}.spec.backup.barmanObjectStore")
            for problem in _target_problems(stack, cluster, store, settings):
                yield cluster.urn, f"database {cluster.name}: {problem}"
    deferred.finish()
