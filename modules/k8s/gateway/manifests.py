"""The LLM gateway's objects and chart values, as pure functions of its spec.

What a request goes through (docs/llm-gateway.md): the internal load balancer, the
Envoy proxy's HTTPS listener (TLS 1.3 only, the cluster CA's certificate), the team
header removed (`client_traffic_policy`), the API key checked and its team written into
that header (`security_policy`), the team's token limits checked (`rate_limits`), AI
Gateway's external processor reading the ``model`` field, the route of that model for
that team (`ai_gateway_route`), the model's in-cluster backend; on the way back AI
Gateway counts the answer's tokens, which the rate limit service charges to the team
and Prometheus records per team (`pod_monitor`, `prometheus_rule`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

import pulumi

from modules.k8s import netpol
from modules.k8s.common import Manifest, PlatformNamespace, metadata, system_node_selector
from modules.k8s.gateway import spec as gs
from modules.k8s.llm.spec import LLMBackend
from modules.k8s.mirror import chart_image
from modules.k8s.monitoring.spec import INTERNAL_NLB_ANNOTATIONS
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.pki.spec import (
    CA_BUNDLE_SECRET,
    CA_KEY,
    ca_bundle,
    service_dns_names,
    serving_certificate,
)
from modules.k8s.security import restricted_container, restricted_pod

CONTROLLER_NS = PlatformNamespace(gs.CONTROLLER_NAMESPACE)
AI_GATEWAY_NS = PlatformNamespace(gs.AI_GATEWAY_NAMESPACE)
GATEWAY_NS = PlatformNamespace(gs.GATEWAY_NAMESPACE)
#: The Envoy proxies' Service (named in the EnvoyProxy, so that it and the certificate's
#: names are known in advance rather than Envoy Gateway's hashed default).
PROXY_SERVICE = "llm-gateway"
#: The gateway's proxy pods, as NetworkPolicies and the PodMonitor select them.
PROXY_SELECTOR = {
    "app.kubernetes.io/component": "proxy",
    "gateway.envoyproxy.io/owning-gateway-name": gs.GATEWAY_NAME,
}
#: The port of an InferencePool's endpoint picker (the Inference Extension's default
#: ``endpointPickerRef`` port): Envoy asks it which pod of the pool takes a request.
ENDPOINT_PICKER_PORT = 9002
#: The images' user (Envoy Gateway's and AI Gateway's images run as 65532).
IMAGE_UID = 65532
INFERENCE_GROUP = "inference.networking.k8s.io"
AIGW_GROUP = "aigateway.envoyproxy.io"
EG_GROUP = "gateway.envoyproxy.io"
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
#: Recorded series (`prometheus_rule`): each model's price per million tokens (by
#: model and token type), and each team's spend in USD per second.
PRICE_SERIES = "gpuplatform:llm_gateway_price_usd_per_million_tokens"
COST_SERIES = "gpuplatform:llm_gateway_cost_usd:rate5m"
TOKENS_SERIES = "gpuplatform:llm_gateway_tokens:rate5m"
#: AI Gateway's token counter and request duration histogram (OpenTelemetry's
#: ``gen_ai.client.token.usage`` and ``gen_ai.server.request.duration``, as Prometheus
#: names them).
TOKEN_METRIC = "gen_ai_client_token_usage_sum"
REQUEST_METRIC = "gen_ai_server_request_duration_count"
POD_MONITOR = "llm-gateway"
PROMETHEUS_RULE = "llm-gateway"


def _gateway_ref() -> Manifest:
    return {"group": GATEWAY_API_GROUP, "kind": "Gateway", "name": gs.GATEWAY_NAME}


def _meta(name: str, namespace: str = gs.GATEWAY_NAMESPACE) -> Manifest:
    return metadata(name, namespace)


def object_name(model: str) -> str:
    """A Kubernetes name for a model's objects: its name in lowercase letters, digits and
    dashes, with a short hash of the exact name so that two models never share one."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(model.encode()).hexdigest()[:8]
    return f"model-{slug}-{digest}" if slug else f"model-{digest}"


# -- charts ------------------------------------------------------------------------


def crds_values() -> Manifest:
    """``gateway-crds-helm``: Gateway API's standard channel and Envoy Gateway's CRDs."""
    return {
        "crds": {
            "gatewayAPI": {"enabled": True, "channel": gs.GATEWAY_API_CHANNEL},
            "envoyGateway": {"enabled": True},
        }
    }


def counters_certificates() -> list[Manifest]:
    """The counters' server certificate, and the rate limit service's client certificate
    (the namespace's cluster-CA bundle, whose Secret also carries ``ca.crt``)."""
    service = f"{gs.COUNTERS_RELEASE}-valkey"
    return [
        serving_certificate(
            gs.COUNTERS_TLS_SECRET,
            gs.CONTROLLER_NAMESPACE,
            service_dns_names(service, gs.CONTROLLER_NAMESPACE),
        ),
        ca_bundle(gs.CONTROLLER_NAMESPACE),
    ]


def counters_users_secret(password: pulumi.Input[str]) -> Manifest:
    """The counters' one user and its password (a Pulumi secret)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(gs.COUNTERS_USERS_SECRET, gs.CONTROLLER_NAMESPACE),
        "type": "Opaque",
        "stringData": {gs.COUNTERS_USER: password},
    }


def counters_url() -> str:
    """The counters' Valkey Service (the chart names it ``<release>-valkey``)."""
    host = f"{gs.COUNTERS_RELEASE}-valkey.{gs.CONTROLLER_NAMESPACE}.svc.cluster.local"
    return f"{host}:{gs.COUNTERS_PORT}"


def envoy_gateway_values(spec: gs.LlmGatewaySpec) -> Manifest:
    """``gateway-helm``: the controller on the system pool, configured as AI Gateway's
    installation asks (``manifests/envoy-gateway-values.yaml`` and its InferencePool and
    rate limit add-ons at v1.0.0): the Backend API, AI Gateway as extension server for
    every listener, route, cluster and secret, InferencePools as backends, and the
    global rate limit service on the counters' Valkey. The controller's and the rate
    limit service's images from the mirror (`gs.MIRRORED_IMAGES`), pulled at each
    start; the proxies' image is the EnvoyProxy's (`envoy_proxy`)."""
    images = {
        name: {"image": spec.image(f"llm-gateway/{repository}"), "pullPolicy": "Always"}
        for name, repository in (("envoyGateway", "envoy-gateway"), ("ratelimit", "ratelimit"))
    }
    return {
        "global": {"images": images},
        "deployment": {"pod": {"nodeSelector": system_node_selector()}},
        "config": {
            "envoyGateway": {
                "gateway": {"controllerName": gs.CONTROLLER_NAME},
                "extensionApis": {"enableEnvoyPatchPolicy": True, "enableBackend": True},
                "extensionManager": {
                    "hooks": {
                        "xdsTranslator": {
                            "translation": {
                                part: {"includeAll": True}
                                for part in ("listener", "route", "cluster", "secret")
                            },
                            "post": ["Translation", "Cluster", "Route"],
                        }
                    },
                    "service": {
                        "fqdn": {
                            "hostname": (
                                f"ai-gateway-controller.{gs.AI_GATEWAY_NAMESPACE}.svc.cluster.local"
                            ),
                            "port": gs.AIGW_EXTENSION_PORT,
                        }
                    },
                    "backendResources": [
                        {"group": INFERENCE_GROUP, "kind": "InferencePool", "version": "v1"}
                    ],
                },
                "rateLimit": {
                    "backend": {
                        "type": "Redis",
                        "redis": {
                            "url": counters_url(),
                            # Mutual TLS: the client certificate (and the CA, ca.crt) of
                            # the namespace's cluster-CA bundle, mounted at /redis-certs.
                            "tls": {"certificateRef": {"name": CA_BUNDLE_SECRET}},
                        },
                    }
                },
                "provider": {
                    "type": "Kubernetes",
                    "kubernetes": {"rateLimitDeployment": {"container": {"env": ratelimit_env()}}},
                },
            }
        },
    }


def ratelimit_env() -> list[Manifest]:
    """What Envoy Gateway v1.8.1 does not set on the rate limit service for a Redis with
    a private CA and a password (envoyproxy/ratelimit's own settings): the CA that
    verifies the counters' certificate, and the password, from the counters' users
    Secret."""
    return [
        {"name": "REDIS_TLS_CACERT", "value": f"/redis-certs/{CA_KEY}"},
        {
            "name": "REDIS_AUTH",
            "valueFrom": {
                "secretKeyRef": {"name": gs.COUNTERS_USERS_SECRET, "key": gs.COUNTERS_USER}
            },
        },
    ]


def ai_gateway_values(spec: gs.LlmGatewaySpec) -> Manifest:
    """``ai-gateway-helm``: the controller on the system pool as the restricted profile
    asks; the team header exported as a label of every gen_ai metric; the webhook's
    certificate from cert-manager (rotated) instead of the chart's embedded one; the
    controller's image and the external processor's (which the controller's webhook
    injects into the proxies) from the mirror, pulled at each start."""

    def image(repository: str) -> Manifest:
        return chart_image(spec.image(f"llm-gateway/{repository}"))

    return {
        "extProc": {"image": image("ai-gateway-extproc"), "imagePullPolicy": "Always"},
        "controller": {
            "image": image("ai-gateway-controller"),
            "imagePullPolicy": "Always",
            "metricsRequestHeaderAttributes": f"{gs.TEAM_HEADER}:{gs.TEAM_ATTRIBUTE}",
            "nodeSelector": system_node_selector(),
            "podSecurityContext": restricted_pod(IMAGE_UID),
            "securityContext": restricted_container(IMAGE_UID),
            "mutatingWebhook": {"certManager": {"enable": True}},
        },
        "envoyGateway": {"namespace": gs.CONTROLLER_NAMESPACE},
    }


def counters_values(spec: gs.LlmGatewaySpec, storage_class: str) -> Manifest:
    """The ``valkey`` chart holding the rate limit counters: one primary with an
    append-only persistent volume, so that the monthly budgets survive a restart."""
    container = {k: v for k, v in restricted_container(1000).items() if k != "runAsGroup"}
    valkey = chart_image(spec.image("llm-gateway/valkey"))
    registry, _, repository = valkey["repository"].partition("/")
    return {
        "image": {
            "registry": registry,
            "repository": repository,
            "tag": valkey["tag"],
            "pullPolicy": "Always",
        },
        "podSecurityContext": restricted_pod(1000),
        "securityContext": container,
        # The rate limit service signs in as `default` (a password-only connection).
        "auth": {
            "enabled": True,
            "usersExistingSecret": gs.COUNTERS_USERS_SECRET,
            "aclUsers": {gs.COUNTERS_USER: {"permissions": "~* &* +@all -@admin -@dangerous"}},
        },
        # TLS from the cluster CA, and only clients with a certificate from it.
        "tls": {
            "enabled": True,
            "existingSecret": gs.COUNTERS_TLS_SECRET,
            "serverPublicKey": "tls.crt",
            "serverKey": "tls.key",
            "caPublicKey": CA_KEY,
            "requireClientCertificate": True,
        },
        "dataStorage": {
            "enabled": True,
            "requestedSize": f"{spec.counters_storage_gib}Gi",
            "className": storage_class,
            "keepPvc": True,
        },
        "deploymentStrategy": "Recreate",
        "valkeyConfig": "appendonly yes\nappendfsync everysec\nmaxmemory-policy noeviction\n",
        "nodeSelector": system_node_selector(),
        "service": {"type": "ClusterIP", "port": gs.COUNTERS_PORT},
        "metrics": {"enabled": False},
    }


# -- the gateway -------------------------------------------------------------------


def certificate(spec: gs.LlmGatewaySpec) -> Manifest:
    """The listener's certificate from the cluster CA: the name clients use and the
    proxies' in-cluster Service names."""
    names = [spec.hostname, *service_dns_names(PROXY_SERVICE, gs.CONTROLLER_NAMESPACE)]
    return serving_certificate(gs.TLS_SECRET, gs.GATEWAY_NAMESPACE, names)


def gateway_class() -> Manifest:
    return {
        "apiVersion": f"{GATEWAY_API_GROUP}/v1",
        "kind": "GatewayClass",
        "metadata": metadata(gs.GATEWAY_CLASS),
        "spec": {"controllerName": gs.CONTROLLER_NAME},
    }


def envoy_proxy(spec: gs.LlmGatewaySpec, *, eks: bool) -> Manifest:
    """The proxies: on the system pool, restricted, behind an internal load balancer
    (on EKS an internal NLB; on premises the site's LoadBalancer implementation, which
    hands out addresses of the site network)."""
    service: Manifest = {"name": PROXY_SERVICE, "type": "LoadBalancer"}
    if eks:
        service["annotations"] = dict(INTERNAL_NLB_ANNOTATIONS)
    return {
        "apiVersion": f"{EG_GROUP}/v1alpha1",
        "kind": "EnvoyProxy",
        "metadata": _meta(gs.ENVOY_PROXY),
        "spec": {
            "provider": {
                "type": "Kubernetes",
                "kubernetes": {
                    "envoyService": service,
                    "envoyDeployment": {
                        "replicas": spec.replicas,
                        "pod": {
                            "nodeSelector": system_node_selector(),
                            "securityContext": restricted_pod(IMAGE_UID),
                        },
                        # The proxies' image from the mirror (EnvoyProxy's container
                        # spec has no pull policy: the kubelet's default for a tag).
                        "container": {
                            "image": spec.image("llm-gateway/envoy"),
                            "securityContext": restricted_container(IMAGE_UID),
                        },
                    },
                },
            }
        },
    }


def gateway() -> Manifest:
    """One HTTPS listener on 443, the certificate from the cluster CA, routes from the
    gateway's own namespace only."""
    return {
        "apiVersion": f"{GATEWAY_API_GROUP}/v1",
        "kind": "Gateway",
        "metadata": _meta(gs.GATEWAY_NAME),
        "spec": {
            "gatewayClassName": gs.GATEWAY_CLASS,
            "infrastructure": {
                "parametersRef": {"group": EG_GROUP, "kind": "EnvoyProxy", "name": gs.ENVOY_PROXY}
            },
            "listeners": [
                {
                    "name": "https",
                    "protocol": "HTTPS",
                    "port": gs.LISTENER_PORT,
                    "tls": {
                        "mode": "Terminate",
                        "certificateRefs": [{"kind": "Secret", "group": "", "name": gs.TLS_SECRET}],
                    },
                    "allowedRoutes": {"namespaces": {"from": "Same"}},
                }
            ],
        },
    }


def client_traffic_policy() -> Manifest:
    """TLS 1.3 only on the listener; the team header removed before anything reads it,
    so only the API key check can set it."""
    return {
        "apiVersion": f"{EG_GROUP}/v1alpha1",
        "kind": "ClientTrafficPolicy",
        "metadata": _meta("llm-gateway-clients"),
        "spec": {
            "targetRefs": [_gateway_ref()],
            "tls": {"minVersion": "1.3"},
            "headers": {"earlyRequestHeaders": {"remove": [gs.TEAM_HEADER]}},
        },
    }


def security_policy() -> Manifest:
    """Every request carries a team's API key (``Authorization: Bearer <key>``, as the
    OpenAI client sends it); the key's team goes on in the team header and the key
    itself is removed before the backend."""
    return {
        "apiVersion": f"{EG_GROUP}/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": _meta("llm-gateway-api-keys"),
        "spec": {
            "targetRefs": [_gateway_ref()],
            "apiKeyAuth": {
                "credentialRefs": [{"group": "", "kind": "Secret", "name": gs.KEYS_SECRET}],
                "extractFrom": [{"headers": ["Authorization"]}],
                "forwardClientIDHeader": gs.TEAM_HEADER,
                "sanitize": True,
            },
        },
    }


def api_keys_secret(keys: Mapping[str, pulumi.Input[str]]) -> Manifest:
    """The teams' API keys, each under its team (the client id the check forwards)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(gs.KEYS_SECRET),
        "type": "Opaque",
        "stringData": dict(keys),
    }


def _team_rule(team: str, tokens: int, unit: str) -> Manifest:
    """A team's token limit per ``unit``: checked before a request (cost 0), charged with
    the answer's total tokens (AI Gateway's count) after it."""
    return {
        "clientSelectors": [
            {"headers": [{"name": gs.TEAM_HEADER, "type": "Exact", "value": team}]}
        ],
        "limit": {"requests": tokens, "unit": unit},
        "shared": True,
        "cost": {
            "request": {"from": "Number", "number": 0},
            "response": {
                "from": "Metadata",
                "metadata": {"namespace": gs.COST_METADATA_NAMESPACE, "key": gs.TOTAL_TOKENS_KEY},
            },
        },
    }


def rate_limits(spec: gs.LlmGatewaySpec) -> Manifest:
    """Per team, its tokens per minute and per month, across every model and proxy
    (global: one count in the rate limit service, ``shared`` over the Gateway's routes)."""
    rules = []
    for team in spec.teams:
        rules.append(_team_rule(team.team, team.tokens_per_minute, "Minute"))
        rules.append(_team_rule(team.team, team.tokens_per_month, "Month"))
    return {
        "apiVersion": f"{EG_GROUP}/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": _meta("llm-gateway-token-limits"),
        "spec": {
            "targetRefs": [_gateway_ref()],
            "rateLimit": {"type": "Global", "global": {"rules": rules}},
        },
    }


def token_costs() -> list[Manifest]:
    """What AI Gateway counts of each answer, under the keys the rate limits read."""
    return [
        {"metadataKey": gs.INPUT_TOKENS_KEY, "type": "InputToken"},
        {"metadataKey": gs.OUTPUT_TOKENS_KEY, "type": "OutputToken"},
        {"metadataKey": gs.TOTAL_TOKENS_KEY, "type": "TotalToken"},
    ]


def _backend_ref(backend: LLMBackend) -> Manifest:
    if backend.kind == "InferencePool":
        return {
            "group": INFERENCE_GROUP,
            "kind": "InferencePool",
            "name": backend.name,
            "namespace": backend.namespace,
        }
    return {"name": object_name(backend.model)}


def ai_gateway_route(spec: gs.LlmGatewaySpec, backends: Sequence[LLMBackend]) -> Manifest:
    """The one OpenAI-compatible route: per model, a rule matching the model and one of
    the teams that may call it (any other pair finds no route: 404)."""
    rules = []
    for backend in gs.routed_backends(spec, backends):
        rules.append(
            {
                "matches": [
                    {
                        "headers": [
                            {"type": "Exact", "name": gs.MODEL_HEADER, "value": backend.model},
                            {"type": "Exact", "name": gs.TEAM_HEADER, "value": team},
                        ]
                    }
                    for team in gs.team_models(spec, backend.model)
                ],
                "backendRefs": [_backend_ref(backend)],
            }
        )
    return {
        "apiVersion": f"{AIGW_GROUP}/v1beta1",
        "kind": "AIGatewayRoute",
        "metadata": _meta(gs.ROUTE_NAME),
        "spec": {
            "parentRefs": [_gateway_ref()],
            "rules": rules,
            "llmRequestCosts": token_costs(),
        },
    }


def service_backends(spec: gs.LlmGatewaySpec, backends: Sequence[LLMBackend]) -> list[Manifest]:
    """For a model served by a plain Service: Envoy Gateway's Backend naming the Service's
    in-cluster DNS name (AI Gateway v1.0.0 accepts only a Backend behind an
    AIServiceBackend), over TLS verified with the cluster CA (the namespace's bundle,
    added with the first such Backend), and the AIServiceBackend speaking the OpenAI
    schema."""
    objects: list[Manifest] = []
    for backend in gs.routed_backends(spec, backends):
        if backend.kind != "Service":
            continue
        name = object_name(backend.model)
        hostname = f"{backend.name}.{backend.namespace}.svc.cluster.local"
        objects.append(
            {
                "apiVersion": f"{EG_GROUP}/v1alpha1",
                "kind": "Backend",
                "metadata": _meta(name),
                "spec": {
                    "endpoints": [{"fqdn": {"hostname": hostname, "port": backend.port}}],
                    # TLS 1.3 to the Service (the KEDA HTTP add-on's interceptor serves its
                    # TLS listener with a certificate from the cluster CA): the CA from the
                    # namespace's bundle, the name checked (Envoy Gateway matches the
                    # certificate's SAN against the SNI).
                    "tls": {
                        "caCertificateRefs": [
                            {"group": "", "kind": "Secret", "name": CA_BUNDLE_SECRET}
                        ],
                        "sni": hostname,
                        "minVersion": "1.3",
                    },
                },
            }
        )
        objects.append(
            {
                "apiVersion": f"{AIGW_GROUP}/v1beta1",
                "kind": "AIServiceBackend",
                "metadata": _meta(name),
                "spec": {
                    "schema": {"name": "OpenAI"},
                    "backendRef": {"name": name, "kind": "Backend", "group": EG_GROUP},
                },
            }
        )
    if objects:
        objects.append(ca_bundle(gs.GATEWAY_NAMESPACE))
    return objects


def reference_grants(spec: gs.LlmGatewaySpec, backends: Sequence[LLMBackend]) -> list[Manifest]:
    """In each namespace with an InferencePool the route names: the grant that lets the
    route (and the HTTPRoute AI Gateway makes of it) reference pools there."""
    namespaces = sorted(
        {b.namespace for b in gs.routed_backends(spec, backends) if b.kind == "InferencePool"}
    )
    return [
        {
            "apiVersion": f"{GATEWAY_API_GROUP}/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": _meta("llm-gateway-routes", namespace),
            "spec": {
                "from": [
                    {
                        "group": AIGW_GROUP,
                        "kind": "AIGatewayRoute",
                        "namespace": gs.GATEWAY_NAMESPACE,
                    },
                    {
                        "group": GATEWAY_API_GROUP,
                        "kind": "HTTPRoute",
                        "namespace": gs.GATEWAY_NAMESPACE,
                    },
                ],
                "to": [{"group": INFERENCE_GROUP, "kind": "InferencePool"}],
            },
        }
        for namespace in namespaces
    ]


# -- network -----------------------------------------------------------------------


def backend_ports(backends: Sequence[LLMBackend]) -> dict[str, list[int]]:
    """Per backend namespace, the ports the proxies may reach there: each backend's
    serving port, and an InferencePool's endpoint picker."""
    ports: dict[str, set[int]] = {}
    for backend in backends:
        wanted = ports.setdefault(backend.namespace, set())
        wanted.add(backend.port)
        if backend.kind == "InferencePool":
            wanted.add(ENDPOINT_PICKER_PORT)
    return {namespace: sorted(found) for namespace, found in sorted(ports.items())}


def controller_network_policies(
    spec: gs.LlmGatewaySpec,
    backends: Sequence[LLMBackend],
    network: netpol.ClusterNetwork,
    client_namespaces: Sequence[str],
) -> list[Manifest]:
    """Envoy Gateway's namespace: default deny, DNS and the API server, then each part's
    own peers: the proxies take HTTPS from the client namespaces and the load balancer
    (inside the VPC or site network) and reach only the LLM namespaces' serving ports,
    the rate limit service and the controller; the rate limit service reaches only its
    counters; Prometheus scrapes the proxies and the controller."""
    ns = gs.CONTROLLER_NAMESPACE
    proxy = PROXY_SELECTOR
    # Envoy Gateway's rate limit Deployment (``app.kubernetes.io/name: envoy-ratelimit``).
    ratelimit = {"app.kubernetes.io/name": "envoy-ratelimit"}
    own = netpol.same_namespace_peer
    routed = gs.routed_backends(spec, backends)
    # HTTPS from the load balancer (VPC or site network) and the client namespaces.
    clients = netpol.cidr_peers(network.node_cidrs)
    if client_namespaces:
        clients = [netpol.namespaces_peer(client_namespaces), *clients]
    policies = [
        *netpol.baseline(ns, network),
        netpol.allow_ingress(
            ns, "allow-gateway-clients", clients, netpol.tcp(gs.PROXY_CONTAINER_PORT), proxy
        ),
        netpol.policy(
            ns,
            "allow-proxy-egress",
            {
                "podSelector": netpol.pods(proxy),
                "policyTypes": ["Egress"],
                "egress": [
                    *(
                        {"to": [netpol.namespace_peer(backend_ns)], "ports": netpol.tcp(*ports)}
                        for backend_ns, ports in backend_ports(routed).items()
                    ),
                    {"to": [own(ratelimit)], "ports": netpol.tcp(gs.RATELIMIT_PORT)},
                    {"to": [own(gs.EG_CONTROLLER_POD_LABELS)], "ports": netpol.tcp(gs.EG_XDS_PORT)},
                ],
            },
        ),
        netpol.allow_ingress(
            ns,
            "allow-ratelimit-from-proxies",
            [own(proxy)],
            netpol.tcp(gs.RATELIMIT_PORT),
            pod_labels=ratelimit,
        ),
        netpol.allow_egress(
            ns,
            "allow-ratelimit-egress",
            [own(gs.COUNTERS_POD_LABELS)],
            netpol.tcp(gs.COUNTERS_PORT),
            pod_labels=ratelimit,
        ),
        netpol.allow_egress(
            ns,
            "allow-ratelimit-config",
            [own(gs.EG_CONTROLLER_POD_LABELS)],
            netpol.tcp(gs.EG_RATELIMIT_XDS_PORT),
            pod_labels=ratelimit,
        ),
        netpol.allow_ingress(
            ns,
            "allow-counters-from-ratelimit",
            [own(ratelimit)],
            netpol.tcp(gs.COUNTERS_PORT),
            pod_labels=gs.COUNTERS_POD_LABELS,
        ),
        netpol.allow_ingress(
            ns,
            "allow-controller-xds",
            [own(proxy), own(ratelimit)],
            netpol.tcp(gs.EG_XDS_PORT, gs.EG_RATELIMIT_XDS_PORT, gs.EG_WASM_PORT),
            pod_labels=gs.EG_CONTROLLER_POD_LABELS,
        ),
        netpol.allow_egress(
            ns,
            "allow-controller-extension",
            [netpol.namespace_peer(gs.AI_GATEWAY_NAMESPACE, gs.AIGW_CONTROLLER_POD_LABELS)],
            netpol.tcp(gs.AIGW_EXTENSION_PORT),
            pod_labels=gs.EG_CONTROLLER_POD_LABELS,
        ),
        netpol.allow_from_api_server(
            ns, network, netpol.tcp(gs.EG_WEBHOOK_PORT), pod_labels=gs.EG_CONTROLLER_POD_LABELS
        ),
        netpol.allow_scrape(
            ns,
            netpol.tcp(gs.EG_METRICS_PORT, gs.EXTPROC_ADMIN_PORT),
            pod_labels=proxy,
            name="allow-proxy-scrape",
        ),
        netpol.allow_scrape(
            ns,
            netpol.tcp(gs.EG_METRICS_PORT),
            pod_labels=gs.EG_CONTROLLER_POD_LABELS,
            name="allow-controller-scrape",
        ),
    ]
    return policies


def ai_gateway_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """AI Gateway's namespace: the API server calls its webhook, Envoy Gateway its
    extension server, Prometheus its metrics; it reaches the API server only."""
    ns = gs.AI_GATEWAY_NAMESPACE
    pods = gs.AIGW_CONTROLLER_POD_LABELS
    return [
        *netpol.baseline(ns, network),
        netpol.allow_from_api_server(ns, network, netpol.tcp(gs.AIGW_WEBHOOK_PORT), pods),
        netpol.allow_ingress(
            ns,
            "allow-extension-from-envoy-gateway",
            [netpol.namespace_peer(gs.CONTROLLER_NAMESPACE, gs.EG_CONTROLLER_POD_LABELS)],
            netpol.tcp(gs.AIGW_EXTENSION_PORT),
            pods,
        ),
        netpol.allow_scrape(ns, netpol.tcp(gs.AIGW_METRICS_PORT), pods),
    ]


def client_egress_policies(client_namespaces: Sequence[str]) -> list[Manifest]:
    """In each client namespace (whose own policies deny all egress by default): its pods
    may reach the gateway's proxies on their HTTPS port, and nothing more of them."""
    return [
        netpol.allow_egress(
            namespace,
            "allow-llm-gateway",
            [netpol.namespace_peer(gs.CONTROLLER_NAMESPACE, PROXY_SELECTOR)],
            netpol.tcp(gs.PROXY_CONTAINER_PORT),
        )
        for namespace in client_namespaces
    ]


def gateway_namespace_policies() -> list[Manifest]:
    """The gateway's own namespace holds configuration only (no pods): deny all but DNS
    (every namespace's baseline, for whatever a person runs there to debug)."""
    return [netpol.default_deny(gs.GATEWAY_NAMESPACE), netpol.allow_dns(gs.GATEWAY_NAMESPACE)]


def backend_ingress_policies(
    spec: gs.LlmGatewaySpec, backends: Sequence[LLMBackend]
) -> list[Manifest]:
    """In each LLM namespace: the gateway's proxies may reach its serving ports (the
    namespace's own default deny stays; this adds only the gateway)."""
    proxy = PROXY_SELECTOR
    return [
        netpol.allow_ingress(
            namespace,
            "allow-llm-gateway-proxies",
            [netpol.namespace_peer(gs.CONTROLLER_NAMESPACE, proxy)],
            netpol.tcp(*ports),
        )
        for namespace, ports in backend_ports(gs.routed_backends(spec, backends)).items()
    ]


# -- metrics and cost --------------------------------------------------------------


def pod_monitor() -> Manifest:
    """Scrapes AI Gateway's external processor in each proxy pod (the gen_ai metrics:
    requests, tokens by type, model and team) and Envoy's own statistics."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(POD_MONITOR, gs.CONTROLLER_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": dict(PROXY_SELECTOR)},
            "namespaceSelector": {"matchNames": [gs.CONTROLLER_NAMESPACE]},
            "podMetricsEndpoints": [
                {"port": "aigw-admin", "path": "/metrics"},
                {"port": "metrics", "path": "/stats/prometheus"},
            ],
        },
    }


def cost_rules(spec: gs.LlmGatewaySpec) -> list[Manifest]:
    """The prices as series (one per model and token type, from the stack file), the
    tokens per team and model, and each team's spend: tokens times their model's price."""
    prices = [
        {
            "record": PRICE_SERIES,
            "expr": f"vector({getattr(spec.price(model), field)!r})",
            "labels": {"gen_ai_request_model": model, "gen_ai_token_type": token_type},
        }
        for model in spec.models
        for token_type, field in (
            ("input", "input_usd_per_million_tokens"),
            ("output", "output_usd_per_million_tokens"),
        )
    ]
    usage = (
        f"sum by ({gs.TEAM_LABEL}, gen_ai_request_model, gen_ai_token_type) "
        f'(rate({TOKEN_METRIC}{{gen_ai_token_type=~"input|output"}}[5m]))'
    )
    return [
        *prices,
        {"record": TOKENS_SERIES, "expr": usage},
        {
            "record": COST_SERIES,
            "expr": (
                f"sum by ({gs.TEAM_LABEL}) ({TOKENS_SERIES} * on (gen_ai_request_model, "
                f"gen_ai_token_type) group_left {PRICE_SERIES}) / 1e6"
            ),
        },
    ]


def prometheus_rule(spec: gs.LlmGatewaySpec) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(PROMETHEUS_RULE, MONITORING_NAMESPACE),
        "spec": {"groups": [{"name": "llm-gateway-cost", "rules": cost_rules(spec)}]},
    }


def manifests(
    spec: gs.LlmGatewaySpec,
    backends: Sequence[LLMBackend],
    *,
    eks: bool,
) -> list[Manifest]:
    """The gateway's configuration objects (no Secret, no namespace, no NetworkPolicy)."""
    routed = gs.routed_backends(spec, backends)
    objects = [
        certificate(spec),
        gateway_class(),
        envoy_proxy(spec, eks=eks),
        gateway(),
        client_traffic_policy(),
        security_policy(),
        rate_limits(spec),
        *service_backends(spec, backends),
        *reference_grants(spec, backends),
    ]
    if routed:
        objects.append(ai_gateway_route(spec, backends))
    return objects
