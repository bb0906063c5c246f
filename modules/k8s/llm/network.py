"""NetworkPolicies of the namespaces LLM serving adds (``keda``, ``lws-system``) and the
one it adds to ``monitoring`` (KEDA reads Prometheus). Each namespace denies by default
(`modules.k8s.netpol.baseline`), then admits only what its pods need."""

from __future__ import annotations

from collections.abc import Sequence

from modules.k8s import netpol
from modules.k8s.common import Manifest
from modules.k8s.llm.spec import INTERCEPTOR_PORT, KEDA_NAMESPACE, LWS_NAMESPACE, VLLM_PORT
from modules.k8s.monitoring.spec import PROMETHEUS_POD_LABELS, PROMETHEUS_PORT
from modules.k8s.names import MONITORING_NAMESPACE

#: The HTTP add-on's interceptor pods (its chart's labels).
INTERCEPTOR_POD_LABELS = {
    "app.kubernetes.io/component": "interceptor",
    "app.kubernetes.io/name": "http-add-on",
}
#: Ports KEDA's pods serve each other: the metrics API server (6443, also the API
#: server's aggregated API) and its gRPC link to the operator (9666), the webhooks
#: (9443), the add-on's operator (8443), scaler and interceptor admin (9090), the
#: interceptor's proxy (8080).
KEDA_OWN_PORTS = (6443, 8080, 8443, 9090, 9443, 9666)
#: The API server calls KEDA's admission webhooks and its metrics API (aggregated), on
#: their pods (the keda chart's labels).
KEDA_WEBHOOK_PORT = 9443
KEDA_WEBHOOK_POD_LABELS = {"app.kubernetes.io/name": "keda-admission-webhooks"}
KEDA_METRICS_API_PORT = 6443
KEDA_METRICS_API_POD_LABELS = {"app.kubernetes.io/name": "keda-operator-metrics-apiserver"}
#: LeaderWorkerSet's webhook (its chart's Service port) on its controller's pods.
LWS_WEBHOOK_PORT = 9443
LWS_POD_LABELS = {"control-plane": "controller-manager"}


def keda_network_policies(
    network: netpol.ClusterNetwork, gateway_namespace: str, model_namespaces: Sequence[str]
) -> list[Manifest]:
    """KEDA's namespace: its pods talk among themselves and to the API server; the API
    server calls its metrics API and webhooks; the gateway's proxies reach the
    interceptor, which reaches the model namespaces' vLLM port; KEDA reads Prometheus."""
    ns = KEDA_NAMESPACE
    policies = [
        *netpol.baseline(ns, network),
        netpol.allow_within(ns, netpol.tcp(*KEDA_OWN_PORTS)),
        netpol.allow_from_api_server(
            ns, network, netpol.tcp(KEDA_WEBHOOK_PORT), pod_labels=KEDA_WEBHOOK_POD_LABELS
        ),
        netpol.allow_from_api_server(
            ns,
            network,
            netpol.tcp(KEDA_METRICS_API_PORT),
            pod_labels=KEDA_METRICS_API_POD_LABELS,
            name="allow-metrics-api",
        ),
        netpol.allow_ingress(
            ns,
            "allow-gateway-to-interceptor",
            [netpol.namespace_peer(gateway_namespace)],
            netpol.tcp(INTERCEPTOR_PORT),
            INTERCEPTOR_POD_LABELS,
        ),
        netpol.allow_egress(
            ns,
            "allow-prometheus",
            [netpol.namespace_peer(MONITORING_NAMESPACE, PROMETHEUS_POD_LABELS)],
            netpol.tcp(PROMETHEUS_PORT),
        ),
    ]
    if model_namespaces:
        policies.append(
            netpol.allow_egress(
                ns,
                "allow-interceptor-to-models",
                [netpol.namespaces_peer(model_namespaces)],
                netpol.tcp(VLLM_PORT),
                INTERCEPTOR_POD_LABELS,
            )
        )
    return policies


def lws_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """LeaderWorkerSet's controller: the API server (both ways: its webhook)."""
    ns = LWS_NAMESPACE
    return [
        *netpol.baseline(ns, network),
        netpol.allow_from_api_server(
            ns, network, netpol.tcp(LWS_WEBHOOK_PORT), pod_labels=LWS_POD_LABELS
        ),
    ]


def prometheus_from_keda() -> Manifest:
    """In ``monitoring``: KEDA's operator queries Prometheus (the triggers of the GPU
    models' ScaledObjects)."""
    return netpol.allow_ingress(
        MONITORING_NAMESPACE,
        "allow-keda",
        [netpol.namespace_peer(KEDA_NAMESPACE)],
        netpol.tcp(PROMETHEUS_PORT),
        pod_labels=PROMETHEUS_POD_LABELS,
    )
