"""Exposure: nothing of the platform is reachable from the internet by default."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from typing import Any

from policies.catalogue import resource_rule
from policies.k8s import HELM_RELEASE_TYPE, kind_of, metadata, object_annotations
from policies.model import ResourceView
from policies.settings import Settings
from policies.values import as_list, dig, known

WORLD_CIDRS = ("0.0.0.0/0", "::/0")


def _within(cidr: str, allowed: tuple[str, ...]) -> bool:
    try:
        network = ipaddress.ip_network(cidr, strict=False)
        return any(
            network.version == ipaddress.ip_network(a, strict=False).version
            and network.subnet_of(ipaddress.ip_network(a, strict=False))  # type: ignore[arg-type]
            for a in allowed
        )
    except ValueError:
        return False


@resource_rule("aws-eks-endpoint-private")
def eks_endpoint_private(resource: ResourceView, settings: Settings) -> Iterator[str]:
    vpc = resource.props.get("vpcConfig")
    private = known(dig(vpc, "endpointPrivateAccess"), "vpcConfig.endpointPrivateAccess")
    public = known(dig(vpc, "endpointPublicAccess"), "vpcConfig.endpointPublicAccess")
    if private is not True:
        yield "`vpcConfig.endpointPrivateAccess` is not true: nodes reach the API over the internet"
    if public is False:
        return
    # EKS opens the public endpoint to 0.0.0.0/0 unless told otherwise.
    cidrs = as_list(known(dig(vpc, "publicAccessCidrs"), "vpcConfig.publicAccessCidrs"))
    if not cidrs or any(c in WORLD_CIDRS for c in cidrs):
        yield "the public endpoint is open to the whole internet (set endpointPublicAccess false)"
        return
    outside = [c for c in cidrs if not _within(str(c), settings.allowed_endpoint_cidrs)]
    if outside:
        yield f"the public endpoint is open to {', '.join(map(str, outside))} (not allowed CIDRs)"


@resource_rule("aws-no-world-ingress")
def no_world_ingress(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    if resource.type == "aws:ec2/securityGroup:SecurityGroup":
        for i, rule in enumerate(as_list(props.get("ingress"))):
            for key in ("cidrBlocks", "ipv6CidrBlocks"):
                cidrs = as_list(known(dig(rule, key), f"ingress[{i}].{key}"))
                for cidr in cidrs:
                    if cidr in WORLD_CIDRS:
                        yield f"`ingress[{i}].{key}` admits {cidr}"
    elif resource.type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        for key in ("cidrIpv4", "cidrIpv6"):
            if known(props.get(key), key) in WORLD_CIDRS:
                yield f"`{key}` admits {props[key]}"
    elif known(props.get("type"), "type") == "ingress":
        for key in ("cidrBlocks", "ipv6CidrBlocks"):
            for cidr in as_list(known(props.get(key), key)):
                if cidr in WORLD_CIDRS:
                    yield f"`{key}` admits {cidr}"


#: Managed data stores and the properties that place them: (subnet group, security
#: groups, EC2-Classic groups outside the VPC or None where the type has none).
PRIVATE_DATA_STORES: dict[str, tuple[str, str, str | None]] = {
    "aws:rds/instance:Instance": ("dbSubnetGroupName", "vpcSecurityGroupIds", None),
    "aws:rds/cluster:Cluster": ("dbSubnetGroupName", "vpcSecurityGroupIds", None),
    # The feature store's online store.
    "aws:elasticache/replicationGroup:ReplicationGroup": (
        "subnetGroupName",
        "securityGroupIds",
        "securityGroupNames",
    ),
}


@resource_rule("aws-data-store-private")
def data_store_private(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    subnets, groups, classic = PRIVATE_DATA_STORES[resource.type]
    if props.get(subnets) in (None, ""):
        yield f"`{subnets}` is not set: the store lands in the default VPC's subnets"
    if not as_list(known(props.get(groups), groups)):
        yield f"`{groups}` is empty: the VPC's default security group applies"
    if classic is not None and as_list(known(props.get(classic), classic)):
        yield f"`{classic}` is set: EC2-Classic groups, outside the stack's VPC"


@resource_rule("aws-s3-public-access-block")
def s3_public_access_block(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if resource.type == "aws:s3/bucketAcl:BucketAcl":
        acl = known(resource.props.get("acl"), "acl")
        if isinstance(acl, str) and acl.startswith(("public-", "authenticated-read")):
            yield f"the bucket ACL {acl} grants access outside the account"
        return
    for key in (
        "blockPublicAcls",
        "blockPublicPolicy",
        "ignorePublicAcls",
        "restrictPublicBuckets",
    ):
        if known(resource.props.get(key), key) is not True:
            yield f"`{key}` is not true"


@resource_rule("aws-no-public-ip-on-nodes")
def no_public_ip(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props = resource.props
    if resource.type == "aws:ec2/subnet:Subnet":
        if known(props.get("mapPublicIpOnLaunch"), "mapPublicIpOnLaunch") is True:
            yield "`mapPublicIpOnLaunch` is true: instances launched here get public IPs"
    elif resource.type == "aws:ec2/launchTemplate:LaunchTemplate":
        for i, nic in enumerate(as_list(props.get("networkInterfaces"))):
            path = f"networkInterfaces[{i}].associatePublicIpAddress"
            if str(known(dig(nic, "associatePublicIpAddress"), path)).lower() == "true":
                yield f"`{path}` is true"
    elif known(props.get("associatePublicIpAddress"), "associatePublicIpAddress") is True:
        yield "`associatePublicIpAddress` is true"


@resource_rule("aws-imdsv2-required")
def imdsv2_required(resource: ResourceView, settings: Settings) -> Iterator[str]:
    options = resource.props.get("metadataOptions")
    if options in (None, {}):
        yield "no `metadataOptions`: IMDSv1 stays enabled"
        return
    tokens = known(dig(options, "httpTokens"), "metadataOptions.httpTokens")
    if tokens != "required":
        yield f"`metadataOptions.httpTokens` is {tokens!r}, not required"
    hops = known(dig(options, "httpPutResponseHopLimit"), "metadataOptions.httpPutResponseHopLimit")
    if hops is None:
        yield "`metadataOptions.httpPutResponseHopLimit` is not set"
    elif not isinstance(hops, int | float) or hops > settings.max_metadata_hop_limit:
        yield (
            f"`metadataOptions.httpPutResponseHopLimit` is {hops}, above "
            f"{settings.max_metadata_hop_limit}"
        )


MONITORING_RE = re.compile(r"grafana|prometheus|alertmanager", re.IGNORECASE)
INTERNAL_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


def _internal(notes: Mapping[str, Any]) -> bool:
    return any(
        str(notes.get(key, "")).lower() == value for key, value in INTERNAL_ANNOTATIONS.items()
    )


def _public_services_in_values(values: Any, path: str = "values") -> Iterator[str]:
    """Chart values that ask for a LoadBalancer service without an internal scheme."""
    if isinstance(values, Mapping):
        if values.get("type") == "LoadBalancer":
            notes = values.get("annotations")
            if not (isinstance(notes, Mapping) and _internal(notes)):
                yield path
        for key, value in values.items():
            yield from _public_services_in_values(value, f"{path}.{key}")
    elif isinstance(values, list):
        for index, value in enumerate(values):
            yield from _public_services_in_values(value, f"{path}[{index}]")


def monitoring_related(resource: ResourceView) -> bool:
    """Helm releases of monitoring charts, and Services and Ingresses whose name or
    labels say Grafana, Prometheus or Alertmanager."""
    if resource.type == HELM_RELEASE_TYPE:
        return bool(MONITORING_RE.search(str(resource.props.get("chart", ""))))
    if kind_of(resource) not in ("Service", "Ingress"):
        return False
    labels = metadata(resource).get("labels")
    text = f"{metadata(resource).get('name', '')} {labels if isinstance(labels, Mapping) else ''}"
    return bool(MONITORING_RE.search(text))


@resource_rule("k8s-monitoring-not-public")
def monitoring_not_public(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if resource.type == HELM_RELEASE_TYPE:
        for path in _public_services_in_values(known(resource.props.get("values"), "values")):
            yield f"`{path}` asks for a LoadBalancer service without an internal scheme"
        return
    notes = object_annotations(resource)
    if kind_of(resource) == "Service":
        service_type = known(dig(resource.props, "spec", "type"), "spec.type")
        if service_type == "LoadBalancer" and not _internal(notes):
            yield "a LoadBalancer service without an internal scheme annotation is internet-facing"
    elif str(notes.get("alb.ingress.kubernetes.io/scheme", "")).lower() == "internet-facing":
        yield "the ingress asks for an internet-facing load balancer"
