"""Residency: resources, copies, keys and images stay in the allowed regions and sites."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policies import stackconfig
from policies.aws import (
    AWS_PROVIDER_TYPE,
    ECR_HOST_RE,
    foreign_regions_in,
    is_global_service,
    parse_arn,
    region_of,
)
from policies.catalogue import resource_rule, stack_rule
from policies.k8s import (
    CONFIGMAP_TYPE,
    HELM_RELEASE_TYPE,
    K8S_PROVIDER_TYPE,
    images,
    is_kubernetes_object,
    parse_image,
)
from policies.model import ResourceView, StackFindings, StackView
from policies.settings import Settings
from policies.values import Deferred, as_list, dig, is_unknown, known, walk_strings

SITE_CONFIGMAP = "gpuplatform-site"
SITE_NAMESPACE = "kube-system"
SITE_KINDS = ("on-premises", "aws-eks")


def regional_aws(resource: ResourceView) -> bool:
    """AWS providers and the resources of regional AWS services."""
    if resource.type == AWS_PROVIDER_TYPE:
        return True
    return resource.type.startswith("aws:") and not is_global_service(resource.type)


@resource_rule("uae-aws-region-allowlist")
def region_allowlist(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if resource.type == AWS_PROVIDER_TYPE:
        region = resource.props.get("region")
        if region in (None, ""):
            yield (
                "the AWS provider sets no region, so it takes one from the environment; "
                f"pin it to one of {', '.join(settings.allowed_regions)}"
            )
        elif known(region, "region") not in settings.allowed_regions:
            allowed = ", ".join(settings.allowed_regions)
            yield f"the AWS provider targets {region}, outside {allowed}"
        return
    region = region_of(resource)
    if region in (None, ""):
        yield (
            "no region pins this resource: it has neither a `region` input nor an explicit "
            "AWS provider with one"
        )
        return
    region = known(region, "region")
    if region not in settings.allowed_regions:
        yield f"region {region} is outside the allowlist ({', '.join(settings.allowed_regions)})"


def global_service(resource: ResourceView) -> bool:
    """The resources of global AWS services (IAM, Route 53, CloudFront)."""
    return resource.type.startswith("aws:") and is_global_service(resource.type)


@resource_rule("uae-global-service-content")
def global_service_content(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for path, text in walk_strings(resource.props):
        known(text, path)
        for region in foreign_regions_in(text, settings.allowed_regions):
            yield f"`{path}` references region {region}"


def _foreign(value: Any, path: str, settings: Settings) -> Iterator[str]:
    """A message when ``value`` (a region name) is outside the allowlist."""
    if value in (None, ""):
        return
    region = known(value, path)
    if region not in settings.allowed_regions:
        yield f"`{path}` copies data to or from {region}"


def _foreign_arn(value: Any, path: str, settings: Settings) -> Iterator[str]:
    if value in (None, ""):
        return
    arn = parse_arn(known(value, path))
    if arn is not None and arn.region and arn.region not in settings.allowed_regions:
        yield f"`{path}` points at {arn.region} ({arn.text})"


def _indexed(items: Any) -> Iterator[tuple[int, Any]]:
    return enumerate(as_list(items))


@resource_rule("uae-no-cross-region-copies")
def no_cross_region_copies(resource: ResourceView, settings: Settings) -> Iterator[str]:
    props, kind = resource.props, resource.type
    if kind == "aws:ecr/replicationConfiguration:ReplicationConfiguration":
        for i, rule in _indexed(dig(props, "replicationConfiguration", "rules")):
            for j, dest in _indexed(dig(rule, "destinations")):
                path = f"replicationConfiguration.rules[{i}].destinations[{j}].region"
                yield from _foreign(dig(dest, "region"), path, settings)
    elif kind == "aws:dlm/lifecyclePolicy:LifecyclePolicy":
        for i, schedule in _indexed(dig(props, "policyDetails", "schedules")):
            for j, copy in _indexed(dig(schedule, "crossRegionCopyRules")):
                base = f"policyDetails.schedules[{i}].crossRegionCopyRules[{j}]"
                yield from _foreign(dig(copy, "target"), f"{base}.target", settings)
                yield from _foreign(dig(copy, "targetRegion"), f"{base}.targetRegion", settings)
        for i, action in _indexed(dig(props, "policyDetails", "actions")):
            for j, copy in _indexed(dig(action, "crossRegionCopies")):
                path = f"policyDetails.actions[{i}].crossRegionCopies[{j}].target"
                yield from _foreign(dig(copy, "target"), path, settings)
    elif kind == "aws:ebs/snapshotCopy:SnapshotCopy":
        yield from _foreign(props.get("sourceRegion"), "sourceRegion", settings)
    elif kind == "aws:ec2/amiCopy:AmiCopy":
        yield from _foreign(props.get("sourceAmiRegion"), "sourceAmiRegion", settings)
    elif kind in ("aws:dynamodb/table:Table", "aws:dynamodb/globalTable:GlobalTable"):
        for i, replica in _indexed(props.get("replicas")):
            yield from _foreign(dig(replica, "regionName"), f"replicas[{i}].regionName", settings)
    elif kind == "aws:efs/replicationConfiguration:ReplicationConfiguration":
        yield from _foreign(dig(props, "destination", "region"), "destination.region", settings)
    elif kind == "aws:secretsmanager/secret:Secret":
        for i, replica in _indexed(props.get("replicas")):
            yield from _foreign(dig(replica, "region"), f"replicas[{i}].region", settings)
    elif kind == "aws:cloudwatch/logDestination:LogDestination":
        yield from _foreign_arn(props.get("targetArn"), "targetArn", settings)
    elif kind == "aws:cloudwatch/logSubscriptionFilter:LogSubscriptionFilter":
        yield from _foreign_arn(props.get("destinationArn"), "destinationArn", settings)
    elif kind == "aws:oam/link:Link":
        yield from _foreign_arn(props.get("sinkIdentifier"), "sinkIdentifier", settings)
    elif kind == "aws:rds/instance:Instance":
        yield from _foreign_arn(props.get("replicateSourceDb"), "replicateSourceDb", settings)
    elif kind == "aws:rds/cluster:Cluster":
        source = props.get("replicationSourceIdentifier")
        yield from _foreign_arn(source, "replicationSourceIdentifier", settings)


@resource_rule("uae-kms-no-multi-region")
def kms_no_multi_region(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if resource.type != "aws:kms/key:Key":
        yield "a replica key copies key material of a multi-region key into another region"
        return
    if known(resource.props.get("multiRegion"), "multiRegion") is True:
        yield "`multiRegion` is true: the key can be replicated to other regions"


def registry_allowed(image: str, settings: Settings) -> bool:
    """True when the image comes from the in-region ECR or a configured registry."""
    ref = parse_image(image)
    ecr = ECR_HOST_RE.match(ref.registry)
    if ecr is not None:
        account, region = ecr.groups()
        if region in settings.allowed_regions and (
            not settings.ecr_account_ids or account in settings.ecr_account_ids
        ):
            return True
    full = f"{ref.registry}/{ref.repository}"
    return any(
        ref.registry == allowed or full.startswith(allowed.rstrip("/") + "/")
        for allowed in settings.allowed_registries
    )


def _allowed_summary(settings: Settings) -> str:
    extra = ", ".join(settings.allowed_registries)
    regions = ", ".join(settings.allowed_regions)
    return f"the in-region ECR (<account>.dkr.ecr.{{{regions}}}.amazonaws.com)" + (
        f" or {extra}" if extra else ""
    )


@resource_rule("uae-container-image-registry")
def container_image_registry(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for who, value, path in images(resource):
        image = known(value, path)
        if not isinstance(image, str) or not image:
            yield f"{who} names no image"
        elif not registry_allowed(image, settings):
            yield (
                f"{who} pulls {image} from {parse_image(image).registry}, "
                f"not from {_allowed_summary(settings)}"
            )


def _chart_images(values: Any, path: str = "values") -> Iterator[tuple[str, str]]:
    """Image references written in a chart's values: ``image: repo:tag`` strings,
    ``{registry?, repository, tag?}`` maps, and an ``images:`` map of component ->
    ``repo[:tag]`` or ``{name, tag}`` (KEDA's charts) (the common chart conventions)."""
    if isinstance(values, Mapping):
        # ``global.imageRegistry`` (Bitnami's and prometheus-community's convention):
        # the registry the chart and its subcharts pull every image from.
        if path == "values":
            override = dig(values, "global", "imageRegistry")
            if isinstance(override, str) and override and not is_unknown(override):
                yield "values.global.imageRegistry", override
        repository, registry = values.get("repository"), values.get("registry")
        if isinstance(repository, str) and repository and not is_unknown(repository):
            prefix = f"{registry}/" if isinstance(registry, str) and registry else ""
            yield path, prefix + repository
        for key, value in values.items():
            child = f"{path}.{key}"
            if key == "image" and isinstance(value, str) and "/" in value:
                yield child, value
            elif key == "images" and isinstance(value, Mapping):
                yield from _image_map(value, child)
            else:
                yield from _chart_images(value, child)
    elif isinstance(values, list):
        for index, value in enumerate(values):
            yield from _chart_images(value, f"{path}[{index}]")


def _image_map(images: Mapping[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """The entries of an ``images:`` map: ``repo[:tag]`` strings, ``{name, tag}`` maps,
    and the other conventions inside (`_chart_images`)."""
    for key, value in images.items():
        child = f"{path}.{key}"
        name = value.get("name") if isinstance(value, Mapping) else value
        if isinstance(name, str) and "/" in name and not is_unknown(name):
            yield child, name
        elif isinstance(value, Mapping):
            yield from _chart_images(value, child)


@resource_rule("uae-helm-chart-images")
def helm_chart_images(resource: ResourceView, settings: Settings) -> Iterator[str]:
    found = list(_chart_images(resource.props.get("values")))
    for path, image in found:
        if not registry_allowed(image, settings):
            yield f"`{path}` pulls {image}, not from {_allowed_summary(settings)}"
    if not found:
        chart = resource.props.get("chart")
        repo = dig(resource.props, "repositoryOpts", "repo")
        yield (
            f"chart {chart} from {repo or 'its repository'} sets no image in its values: the "
            "images it pulls by default cannot be checked in the plan"
        )


@stack_rule("uae-k8s-site-declaration")
def k8s_site_declaration(stack: StackView, settings: Settings) -> StackFindings:
    providers: dict[str, ResourceView | None] = {r.urn: r for r in stack.of_type(K8S_PROVIDER_TYPE)}
    sites: dict[str, ResourceView] = {}
    for resource in stack.resources:
        if not (is_kubernetes_object(resource) or resource.type == HELM_RELEASE_TYPE):
            continue
        if resource.provider is None:
            yield resource.urn, "registered without an explicit Kubernetes provider"
            continue
        providers.setdefault(resource.provider.urn, None)
        meta = resource.props.get("metadata")
        if (
            resource.type == CONFIGMAP_TYPE
            and dig(meta, "name") == SITE_CONFIGMAP
            and dig(meta, "namespace") == SITE_NAMESPACE
        ):
            sites[resource.provider.urn] = resource
    deferred = Deferred()
    target = stackconfig.get("target")
    for provider_urn in sorted(providers):
        site = sites.get(provider_urn)
        if site is None:
            yield (
                provider_urn,
                (
                    f"no {SITE_NAMESPACE}/{SITE_CONFIGMAP} ConfigMap is registered through this "
                    "provider, so the cluster's site and country are undeclared"
                ),
            )
            continue
        with deferred.each():
            for problem in _site_problems(site, settings, target):
                yield provider_urn, problem
    if target == "onprem":
        yield from _onprem_config_problems(sites, settings)
    deferred.finish()


def _onprem_config_problems(sites: Mapping[str, ResourceView], settings: Settings) -> StackFindings:
    """The on-prem stack's own site config (``uae-gpu-platform:site``, or ``site`` and
    ``country`` inside ``uae-gpu-platform:onprem``) must name an allowed country and the
    site the cluster declares."""
    declared: Mapping[str, Any] = {}
    for key in ("site", "onprem"):
        value = stackconfig.get(key)
        if isinstance(value, Mapping) and {"country", "name", "site"} & set(value):
            declared = value
            break
    country = declared.get("country")
    if country is not None and country not in settings.allowed_countries:
        allowed = ", ".join(settings.allowed_countries)
        yield None, f"stack config declares country {country!r}, not one of {allowed}"
    name = declared.get("name") or declared.get("site")
    site_names = {str(dig(site.props, "data", "site")) for site in sites.values()}
    if isinstance(name, str) and site_names and name not in site_names:
        yield (
            None,
            (
                f"stack config declares site {name!r}, but the cluster declares "
                f"{', '.join(sorted(site_names))}"
            ),
        )


def _site_problems(site: ResourceView, settings: Settings, target: Any) -> Iterator[str]:
    data = site.props.get("data")
    data = known(data, f"{site.name}.data")
    data = data if isinstance(data, Mapping) else {}
    name = known(data.get("site"), f"{site.name}.data.site")
    country = known(data.get("country"), f"{site.name}.data.country")
    kind = known(data.get("kind"), f"{site.name}.data.kind")
    if not name:
        yield "the site declaration has no data.site"
    if country not in settings.allowed_countries:
        yield (
            f"site {name} declares country {country!r}, not one of "
            f"{', '.join(settings.allowed_countries)}"
        )
    if kind not in SITE_KINDS:
        yield f"site {name} declares kind {kind!r}, not one of {', '.join(SITE_KINDS)}"
    if kind == "aws-eks":
        region = known(data.get("region"), f"{site.name}.data.region")
        if region not in settings.allowed_regions:
            yield f"site {name} is an EKS cluster in {region!r}, outside the allowed regions"
    if target == "onprem" and kind == "aws-eks":
        yield f"the stack targets on-premises but site {name} declares an EKS cluster"
