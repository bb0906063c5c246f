"""Kubeflow Pipelines (KFP): its artifacts, its databases and its endpoints stay in the
UAE, encrypted and private; the drift alert that starts a run stays in the cluster.

KFP is recognised by its own object names (they are fixed in its manifests and its
code reads them): the launcher configuration ``kfp-launcher``, the install
configuration ``pipeline-install-config``, the API server and UI Services, and the
platform's database proxy configuration ``kfp-database-proxy``.

* Artifact store: every ``kfp-launcher`` names a pipeline root ``s3://`` (KFP falls back
  to ``minio://mlpipeline``, the bundled MinIO, when none is set) in a bucket this
  stack creates (whose region and SSE-KMS key the bucket rules check) where the stack
  has buckets; its S3 providers use TLS and, where they name an AWS endpoint, one in an
  allowed region. The API server's object store (``OBJECTSTORECONFIG_*``) likewise; no
  bundled SeaweedFS or MinIO runs beside it.
* Database: KFP's database host is the loopback proxy, a Service in the cluster or an
  RDS endpoint in an allowed region; the proxy's own upstream likewise, over TLS.
* Exposure: KFP in single-user mode authenticates nobody, so its Services are
  ClusterIP only and no Ingress or Gateway route leads to them.
* Alert webhooks: Alertmanager's webhook receivers (AlertmanagerConfig) post to Services
  in the cluster only.
"""

from __future__ import annotations

import configparser
from collections.abc import Callable, Collection, Iterator, Mapping
from functools import partial
from typing import Any

import yaml

from policies.catalogue import resource_rule, stack_rule
from policies.k8s import containers, kind_of, metadata, parse_image
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.checks import (
    aws_endpoint_problem,
    aws_region,
    endpoint,
    in_cluster_host,
    in_cluster_url,
    not_a_stack_bucket,
    stack_buckets,
    uri_bucket,
)
from policies.settings import Settings
from policies.values import Deferred, dig, is_unknown, known

CONFIGMAP = "kubernetes:core/v1:ConfigMap"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
LAUNCHER_CONFIG = "kfp-launcher"
INSTALL_CONFIG = "pipeline-install-config"
PROXY_CONFIG = "kfp-database-proxy"
API_SERVER = "ml-pipeline"
#: KFP's Services (the API, the UI, ML Metadata's gRPC and gRPC-web endpoints) and the
#: platform's retrain trigger: none authenticates its callers.
KFP_SERVICES = frozenset(
    {"ml-pipeline", "ml-pipeline-ui", "metadata-envoy-service", "metadata-grpc-service"}
)
KFP_LABEL = ("application-crd-id", "kubeflow-pipelines")
ROUTE_KINDS = ("Ingress", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute")
#: Images of the object stores KFP bundles.
BUNDLED_STORES = ("seaweedfs", "minio")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
RDS_DOMAINS = (".rds.amazonaws.com", ".rds.amazonaws.com.cn")


def _named(resource: ResourceView, kind: str, names: tuple[str, ...]) -> bool:
    return kind_of(resource) == kind and metadata(resource).get("name") in names


def endpoint_problem(text: Any, settings: Settings) -> str | None:
    """Why an S3 endpoint is outside the allowed regions (None when it is not AWS, or
    AWS in an allowed region). AWS's global endpoint lands in us-east-1."""
    if not isinstance(text, str) or not text:
        return None
    return aws_endpoint_problem(text, settings.allowed_regions)


def on_site_store(text: Any) -> bool:
    """Whether an object store endpoint is the site's (set, and not AWS's): its buckets
    are the site's to name. Unset, KFP's S3 client goes to AWS."""
    return isinstance(text, str) and bool(text) and aws_region(endpoint(text).host) is None


def root_problem(root: Any, buckets: Collection[str], on_site: Callable[[str], bool]) -> str | None:
    """Why a pipeline root is not in the stack's store (None when it is): ``s3://`` of a
    bucket the stack creates or, where the stack creates none, of a bucket ``on_site``
    says KFP reaches on the site's store."""
    if not isinstance(root, str) or not root:
        return (
            "no `defaultPipelineRoot`: KFP falls back to minio://mlpipeline, the bundled "
            "object store"
        )
    scheme, sep, _ = root.partition("://")
    if not sep or scheme != "s3":
        return f"pipeline root {root} is not s3:// (the stack's bucket or the site's store)"
    bucket = uri_bucket(root)
    if bucket not in buckets and (buckets or not on_site(bucket)):
        return not_a_stack_bucket(f"pipeline root {root}", bucket, buckets)
    return None


def _providers(providers: Any) -> Any:
    """``data.providers`` parsed (YAML in a string), as KFP reads it; None where unset."""
    if is_unknown(providers):
        known(providers, "data.providers")
    if providers in (None, ""):
        return None
    return yaml.safe_load(providers) if isinstance(providers, str) else providers


def _root_on_site(data: Any, bucket: str) -> bool:
    """Whether KFP reaches ``bucket`` on the site's store: the S3 provider of
    ``kfp-launcher`` that names the bucket (else its default) has a site endpoint.
    Providers that cannot be read are `_provider_problems`'."""
    try:
        providers = _providers(dig(data, "providers"))
    except yaml.YAMLError:
        return False
    s3 = dig(providers, "s3")
    if not isinstance(s3, Mapping):
        return False
    chosen = s3.get("default")
    for override in s3.get("Overrides") or []:
        if isinstance(override, Mapping) and override.get("bucketName") == bucket:
            chosen = override
    return on_site_store(known(dig(chosen, "endpoint"), "data.providers.s3.endpoint"))


def _provider_problems(providers: Any, settings: Settings) -> Iterator[str]:
    if providers in (None, ""):
        return
    try:
        parsed = _providers(providers)
    except yaml.YAMLError:
        yield "`data.providers` is not YAML"
        return
    if not isinstance(parsed, Mapping):
        yield "`data.providers` is not a mapping of providers"
        return
    if parsed.get("minio"):
        yield "`data.providers` configures MinIO, the bundled store"
    s3 = parsed.get("s3")
    if not isinstance(s3, Mapping):
        return
    configs = [("s3.default", s3.get("default"))]
    configs += [(f"s3.Overrides[{i}]", o) for i, o in enumerate(s3.get("Overrides") or [])]
    for path, config in configs:
        if not isinstance(config, Mapping):
            continue
        if config.get("disableSSL") is True:
            yield f"`{path}.disableSSL` is true: artifacts cross the network in clear text"
        problem = endpoint_problem(config.get("endpoint"), settings)
        if problem:
            yield f"`{path}`: {problem}"


def _env(container: Mapping[str, Any]) -> dict[str, Any]:
    env = container.get("env")
    if not isinstance(env, list):
        return {}
    return {
        str(e.get("name")): e.get("value", e.get("valueFrom"))
        for e in env
        if isinstance(e, Mapping)
    }


def _api_server_problems(
    deployment: ResourceView, buckets: Collection[str], settings: Settings
) -> Iterator[str]:
    for container in containers(deployment):
        env = _env(container.spec)
        if not any(str(k).startswith("OBJECTSTORECONFIG_") for k in env):
            continue
        secure = known(env.get("OBJECTSTORECONFIG_SECURE"), "OBJECTSTORECONFIG_SECURE")
        if str(secure).lower() != "true":
            yield f"container {container.name}: `OBJECTSTORECONFIG_SECURE` is not true"
        bucket = known(env.get("OBJECTSTORECONFIG_BUCKETNAME"), "OBJECTSTORECONFIG_BUCKETNAME")
        if bucket not in buckets and (
            buckets
            or not on_site_store(known(env.get("OBJECTSTORECONFIG_HOST"), "OBJECTSTORECONFIG_HOST"))
        ):
            yield (
                f"container {container.name}: `OBJECTSTORECONFIG_BUCKETNAME` {bucket!r} is "
                "not a bucket this stack creates"
            )
        host = known(env.get("OBJECTSTORECONFIG_HOST"), "OBJECTSTORECONFIG_HOST")
        problem = endpoint_problem(host, settings)
        if problem:
            yield f"container {container.name}: `OBJECTSTORECONFIG_HOST`: {problem}"


def _namespace(resource: ResourceView) -> Any:
    return metadata(resource).get("namespace")


@stack_rule("uae-pipelines-artifact-store")
def pipelines_artifact_store(stack: StackView, settings: Settings) -> StackFindings:
    buckets = stack_buckets(stack)
    deferred = Deferred()
    kfp_namespaces = set()
    for config in stack.of_type(CONFIGMAP):
        if not _named(config, "ConfigMap", (LAUNCHER_CONFIG,)):
            continue
        kfp_namespaces.add(_namespace(config))
        data = config.props.get("data") or {}
        with deferred.each():
            root = known(dig(data, "defaultPipelineRoot"), "data.defaultPipelineRoot")
            problem = root_problem(root, buckets, partial(_root_on_site, data))
            if problem:
                yield config.urn, f"{LAUNCHER_CONFIG}: {problem}"
        with deferred.each():
            for problem in _provider_problems(dig(data, "providers"), settings):
                yield config.urn, f"{LAUNCHER_CONFIG}: {problem}"
    for deployment in stack.of_type(DEPLOYMENT):
        if _named(deployment, "Deployment", (API_SERVER,)):
            with deferred.each():
                for problem in _api_server_problems(deployment, buckets, settings):
                    yield deployment.urn, f"{API_SERVER}: {problem}"
        if _namespace(deployment) in kfp_namespaces:
            for container in containers(deployment):
                image = container.spec.get("image")
                if isinstance(image, str) and not is_unknown(image):
                    repository = parse_image(image).repository.rsplit("/", 1)[-1]
                    if repository in BUNDLED_STORES:
                        yield (
                            deployment.urn,
                            (
                                f"container {container.name} runs {image}, the bundled object "
                                "store, outside the stack's encrypted bucket"
                            ),
                        )
    deferred.finish()


def database_host_problem(host: Any, settings: Settings) -> str | None:
    """Why a database host is not in the region (None: loopback, in-cluster, allowed RDS)."""
    if not isinstance(host, str) or not host:
        return "no database host"
    host = host.strip().lower()
    if host in LOOPBACK:
        return None
    region = aws_region(host) if host.endswith(RDS_DOMAINS) else None
    if region in settings.allowed_regions:
        return None
    if region:
        return f"database {host} is RDS in {region}, outside the allowed regions"
    if in_cluster_host(host):
        return None
    return f"database {host} is neither in the cluster nor RDS in an allowed region"


def proxy_problems(ini: Any, settings: Settings) -> Iterator[str]:
    """The proxy's upstream hosts and TLS to them (`pgbouncer.ini`)."""
    if not isinstance(ini, str) or not ini:
        yield f"{PROXY_CONFIG} has no `pgbouncer.ini`"
        return
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(ini)
    except configparser.Error:
        yield f"{PROXY_CONFIG}: `pgbouncer.ini` cannot be read"
        return
    if parser.has_section("databases"):
        for name, line in parser.items("databases"):
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            problem = database_host_problem(fields.get("host"), settings)
            if problem:
                yield f"{PROXY_CONFIG} [databases] {name}: {problem}"
    # Only verify-full checks both the database's certificate and its name: with
    # `require` (or `verify-ca`) anyone on the path with any certificate (or any
    # certificate of the same authority) could pose as the database.
    mode = parser.get("pgbouncer", "server_tls_sslmode", fallback="prefer").strip()
    ca_file = parser.get("pgbouncer", "server_tls_ca_file", fallback="").strip()
    if mode != "verify-full":
        yield (
            f"{PROXY_CONFIG}: `server_tls_sslmode = {mode}`: the database's certificate and "
            "name are not verified (use verify-full with server_tls_ca_file)"
        )
    elif not ca_file:
        yield (
            f"{PROXY_CONFIG}: `server_tls_sslmode = verify-full` without `server_tls_ca_file`: "
            "name the database's CA bundle"
        )


@stack_rule("uae-pipelines-database-in-region")
def pipelines_database_in_region(stack: StackView, settings: Settings) -> StackFindings:
    deferred = Deferred()
    proxies = {
        _namespace(c): c
        for c in stack.of_type(CONFIGMAP)
        if _named(c, "ConfigMap", (PROXY_CONFIG,))
    }
    for config in stack.of_type(CONFIGMAP):
        if not _named(config, "ConfigMap", (INSTALL_CONFIG,)):
            continue
        data = config.props.get("data") or {}
        with deferred.each():
            kind = known(dig(data, "dbType"), "data.dbType") or "mysql"
            key = "postgresHost" if kind == "postgres" else "mysqlHost"
            host = known(dig(data, key), f"data.{key}")
            problem = database_host_problem(host, settings)
            if problem:
                yield config.urn, f"{INSTALL_CONFIG} `{key}`: {problem}"
            elif isinstance(host, str) and host.strip().lower() in LOOPBACK:
                proxy = proxies.get(_namespace(config))
                if proxy is None:
                    yield (
                        config.urn,
                        (
                            f"{INSTALL_CONFIG} `{key}` is the loopback, but no {PROXY_CONFIG} "
                            "in the namespace says where the database is"
                        ),
                    )
    for proxy in proxies.values():
        with deferred.each():
            ini = known(dig(proxy.props, "data", "pgbouncer.ini"), "data.pgbouncer.ini")
            for problem in proxy_problems(ini, settings):
                yield proxy.urn, problem
    deferred.finish()


def _kfp_service(resource: ResourceView) -> bool:
    """A Service of Kubeflow Pipelines (by name or by KFP's label)."""
    if kind_of(resource) != "Service":
        return False
    meta = metadata(resource)
    labels = meta.get("labels")
    labelled = isinstance(labels, Mapping) and labels.get(KFP_LABEL[0]) == KFP_LABEL[1]
    return meta.get("name") in KFP_SERVICES or labelled


def _backends(resource: ResourceView) -> Iterator[str]:
    """Service names a route sends traffic to (Ingress and Gateway API routes)."""
    spec = resource.props.get("spec")
    if not isinstance(spec, Mapping):
        return
    if kind_of(resource) == "Ingress":
        default = dig(spec, "defaultBackend", "service", "name")
        if isinstance(default, str):
            yield default
        for rule in spec.get("rules") or []:
            for path in dig(rule, "http", "paths") or []:
                name = dig(path, "backend", "service", "name")
                if isinstance(name, str):
                    yield name
        return
    for rule in spec.get("rules") or []:
        for ref in (rule.get("backendRefs") or []) if isinstance(rule, Mapping) else []:
            if isinstance(ref, Mapping) and ref.get("kind", "Service") == "Service":
                name = ref.get("name")
                if isinstance(name, str):
                    yield name


def kfp_service_or_route(resource: ResourceView) -> bool:
    """The Services of Kubeflow Pipelines, and every Ingress and Gateway API route."""
    return _kfp_service(resource) or kind_of(resource) in ROUTE_KINDS


@resource_rule("k8s-pipelines-not-public")
def pipelines_not_public(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if kind_of(resource) in ROUTE_KINDS:
        for name in _backends(resource):
            if name in KFP_SERVICES:
                yield f"the {kind_of(resource)} routes to {name}, which authenticates nobody"
        return
    spec = known(resource.props.get("spec"), "spec") or {}
    service_type = known(dig(spec, "type"), "spec.type") or "ClusterIP"
    if service_type != "ClusterIP":
        yield f"`spec.type` is {service_type}: reachable from outside the cluster"
    if known(dig(spec, "externalIPs"), "spec.externalIPs"):
        yield "`spec.externalIPs` is set: reachable from outside the cluster"


def _webhooks(resource: ResourceView) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, config) of every webhook receiver."""
    for index, receiver in enumerate(dig(resource.props, "spec", "receivers") or []):
        if not isinstance(receiver, Mapping):
            continue
        for hook, config in enumerate(receiver.get("webhookConfigs") or []):
            if not isinstance(config, Mapping):
                continue
            yield f"spec.receivers[{index}].webhookConfigs[{hook}]", config


def alertmanager_config(resource: ResourceView) -> bool:
    """The Prometheus Operator's AlertmanagerConfig objects."""
    return kind_of(resource) == "AlertmanagerConfig"


@resource_rule("k8s-alert-webhooks-in-cluster")
def alert_webhooks_in_cluster(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for path, config in _webhooks(resource):
        if "urlSecret" in config:
            yield (
                f"`{path}.urlSecret`: a URL from a Secret cannot be checked to stay in the cluster"
            )
            continue
        url = known(config.get("url"), f"{path}.url")
        if not isinstance(url, str) or not in_cluster_url(url):
            yield f"`{path}.url` is {url!r}, not a Service in the cluster"
            continue
        if endpoint(url).scheme != "https":
            yield f"`{path}.url` is {url!r}: alerts would cross the cluster in clear text"
            continue
        tls = known(dig(config, "httpConfig", "tlsConfig"), f"{path}.httpConfig.tlsConfig") or {}
        if not isinstance(tls, Mapping) or not tls.get("ca"):
            yield (
                f"`{path}.httpConfig.tlsConfig.ca` is not set: the receiver's certificate is "
                "not verified against the cluster CA"
            )
        elif tls.get("insecureSkipVerify"):
            yield (
                f"`{path}.httpConfig.tlsConfig.insecureSkipVerify` is true: the receiver's "
                "certificate is not verified"
            )
