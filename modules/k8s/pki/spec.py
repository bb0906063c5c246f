"""The cluster's PKI: cert-manager, one cluster CA, and the certificates services serve.

* cert-manager (jetstack chart, its CRDs installed by the chart) in ``cert-manager``,
  installed before every service that serves TLS: monitoring (Prometheus, Alertmanager,
  Grafana), the tracking server, KServe's webhooks, the inference endpoints and Kubeflow
  Pipelines' API server and UI.
* The cluster CA (cert-manager's documented CA bootstrap): a self-signed ClusterIssuer
  signs the CA certificate (kept in the ``cert-manager`` namespace), and the CA
  ClusterIssuer `CLUSTER_CA_ISSUER` signs each service's serving certificate
  (`serving_certificate`). cert-manager writes the issuing CA into ``ca.crt`` of every
  certificate's Secret, which is how clients in the same namespace verify a server.
* Clients in another namespace (team pods calling MLflow, OpenCost calling Prometheus)
  read the CA from the ``ca.crt`` of a client certificate issued in their own
  namespace (`ca_bundle`): cert-manager has no other way to put the CA into a
  namespace, and no Secret is copied across namespaces by hand.
* Its NetworkPolicies: default deny; the API server for every pod; the API server's
  calls to the webhook; Prometheus' scrape of the metrics port.

Images come from the serving registry where the stack has one (its in-region mirror of
quay.io/jetstack), else from quay.io like the platform's other charts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modules.k8s import names, netpol
from modules.k8s.common import Manifest, PlatformNamespace, metadata, system_node_selector
from modules.k8s.versions import Chart

#: cert-manager issues the cluster's serving certificates; the chart installs its own
#: CRDs (``crds.enabled``). KServe v0.20's quick install tests with v1.17; v1.20 is a
#: supported cert-manager release with the same API.
CERT_MANAGER = Chart("cert-manager", "v1.20.3", "https://charts.jetstack.io")
CERT_MANAGER_NAMESPACE = "cert-manager"
RELEASE = "cert-manager"
SELF_SIGNED_ISSUER = "gpuplatform-selfsigned"
#: The cluster CA's ClusterIssuer and the Secret holding its key pair (`names`: the
#: serving image reads the name without Pulumi).
CLUSTER_CA_ISSUER = names.CLUSTER_CA_ISSUER
CLUSTER_CA_SECRET = "gpuplatform-cluster-ca"
#: In each namespace whose pods call a platform endpoint in another namespace: the
#: Secret whose ``ca.crt`` is the cluster CA (`ca_bundle`).
CA_BUNDLE_SECRET = "gpuplatform-ca"
CA_KEY = "ca.crt"
#: Serving certificates are ECDSA P-256, renewed by cert-manager a third before expiry
#: (its default) with a new key each time.
PRIVATE_KEY = {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"}
#: Labels of cert-manager's pods (the chart's ``app.kubernetes.io/component``).
WEBHOOK_POD_LABELS = {
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "webhook",
}
#: The webhook's and every component's metrics container ports (the chart's names:
#: ``https`` 10250, ``http-metrics`` 9402).
WEBHOOK_PORT_NAME = "https"
METRICS_PORT_NAME = "http-metrics"
POD_MONITOR = "cert-manager"


CERT_MANAGER_NS = PlatformNamespace(CERT_MANAGER_NAMESPACE)


def cert_manager_values(registry: str | None) -> dict[str, Any]:
    """Values of jetstack/cert-manager (keys checked against the chart's values.yaml).

    Metrics are exposed (``prometheus.enabled``) but the chart's ServiceMonitor is off:
    cert-manager is installed before monitoring (whose certificates it issues), so the
    monitor is the platform's (`cert_manager_pod_monitor`), registered after the
    monitoring CRDs exist."""
    system = system_node_selector()
    values: dict[str, Any] = {
        "crds": {"enabled": True, "keep": True},
        "nodeSelector": system,
        "prometheus": {"enabled": True, "servicemonitor": {"enabled": False}},
    }
    for component in ("webhook", "cainjector", "startupapicheck"):
        values[component] = {"nodeSelector": system}
    if registry is not None:
        values["image"] = {"repository": f"{registry}/cert-manager-controller"}
        for component in ("webhook", "cainjector", "startupapicheck"):
            values[component]["image"] = {"repository": f"{registry}/cert-manager-{component}"}
        values["acmesolver"] = {"image": {"repository": f"{registry}/cert-manager-acmesolver"}}
    return values


def _issuer_ref(name: str) -> dict[str, str]:
    return {"name": name, "kind": "ClusterIssuer", "group": "cert-manager.io"}


def certificate_authority() -> list[Manifest]:
    """The cluster CA, in apply order: the self-signed issuer, the CA certificate, the
    CA issuer (cert-manager's documented CA bootstrap)."""
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "ClusterIssuer",
            "metadata": metadata(SELF_SIGNED_ISSUER),
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": metadata(CLUSTER_CA_SECRET, CERT_MANAGER_NAMESPACE),
            "spec": {
                "isCA": True,
                "commonName": "gpuplatform cluster CA",
                "secretName": CLUSTER_CA_SECRET,
                "duration": "87600h",  # ten years; the certificates it signs rotate often
                "privateKey": {"algorithm": "ECDSA", "size": 256},
                "issuerRef": _issuer_ref(SELF_SIGNED_ISSUER),
            },
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "ClusterIssuer",
            "metadata": metadata(CLUSTER_CA_ISSUER),
            "spec": {"ca": {"secretName": CLUSTER_CA_SECRET}},
        },
    ]


def service_dns_names(service: str, service_namespace: str) -> list[str]:
    """The names a Service is reached by inside the cluster, shortest last."""
    return [
        f"{service}.{service_namespace}.svc.cluster.local",
        f"{service}.{service_namespace}.svc",
        f"{service}.{service_namespace}",
        service,
    ]


def serving_certificate(
    name: str, cert_namespace: str, dns_names: Sequence[str], secret: str | None = None
) -> Manifest:
    """A server certificate from the cluster CA; its Secret (``secret``, default
    ``name``) holds ``tls.crt``, ``tls.key`` and the CA as ``ca.crt``."""
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": metadata(name, cert_namespace),
        "spec": {
            "secretName": secret or name,
            "commonName": dns_names[0],
            "dnsNames": list(dns_names),
            "usages": ["server auth", "digital signature"],
            "privateKey": dict(PRIVATE_KEY),
            "issuerRef": _issuer_ref(CLUSTER_CA_ISSUER),
        },
    }


def ca_bundle(bundle_namespace: str) -> Manifest:
    """In a namespace of clients: a client certificate from the cluster CA whose Secret
    ``gpuplatform-ca`` carries the CA as ``ca.crt`` (what the clients mount). Its own
    key pair serves no one (no platform endpoint asks for client certificates)."""
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": metadata(CA_BUNDLE_SECRET, bundle_namespace),
        "spec": {
            "secretName": CA_BUNDLE_SECRET,
            "commonName": f"{bundle_namespace}.clients.gpuplatform",
            "usages": ["client auth", "digital signature"],
            "privateKey": dict(PRIVATE_KEY),
            "issuerRef": _issuer_ref(CLUSTER_CA_ISSUER),
        },
    }


def ca_volume(volume_name: str = "gpuplatform-ca") -> Manifest:
    """A pod volume holding only the cluster CA (``ca.crt`` of `ca_bundle`'s Secret)."""
    return {
        "name": volume_name,
        "secret": {
            "secretName": CA_BUNDLE_SECRET,
            "items": [{"key": CA_KEY, "path": CA_KEY}],
        },
    }


def cert_manager_pod_monitor() -> Manifest:
    """Scrapes the controller, webhook and cainjector (the chart's own PodMonitor, whose
    selector this repeats; registered after the monitoring CRDs exist)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(POD_MONITOR, CERT_MANAGER_NAMESPACE),
        "spec": {
            "jobLabel": "app.kubernetes.io/name",
            "selector": {
                "matchExpressions": [
                    {
                        "key": "app.kubernetes.io/name",
                        "operator": "In",
                        "values": ["cainjector", "cert-manager", "webhook"],
                    },
                    {"key": "app.kubernetes.io/instance", "operator": "In", "values": [RELEASE]},
                    {
                        "key": "app.kubernetes.io/component",
                        "operator": "In",
                        "values": ["cainjector", "controller", "webhook"],
                    },
                ]
            },
            "namespaceSelector": {"matchNames": [CERT_MANAGER_NAMESPACE]},
            "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics"}],
        },
    }


def network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """cert-manager's pods reach the API server only (no ACME issuer: nothing outside);
    the API server calls the webhook; Prometheus scrapes the metrics port."""
    ns = CERT_MANAGER_NAMESPACE
    return [
        *netpol.baseline(ns, network),
        netpol.allow_from_api_server(
            ns, network, netpol.tcp(WEBHOOK_PORT_NAME), pod_labels=WEBHOOK_POD_LABELS
        ),
        netpol.allow_scrape(ns, netpol.tcp(METRICS_PORT_NAME)),
    ]
