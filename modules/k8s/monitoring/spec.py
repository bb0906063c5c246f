"""Monitoring: kube-prometheus-stack, GPU and training metrics, dashboards and alerts.

* Prometheus keeps its data on an encrypted persistent volume for ``retention_days``;
  Alertmanager too. Both, Grafana and the operators run on the system pool.
* Grafana is never public: a ClusterIP service reached by ``kubectl port-forward``, or
  on EKS an internal NLB (scheme ``internal``) reachable only inside the VPC. It sends
  no usage reports or update checks out of the country.
* GPU metrics come from the DCGM exporter (GPU Operator) through its ServiceMonitor;
  training pods labelled ``gpuplatform.ae/metrics: training`` are scraped on their
  ``metrics`` port by a PodMonitor, which labels each series with its job
  (``training_job``).
* The GPU dashboard (`dashboards`) and the alert rules (`alerts`) are code.
* Prometheus, Alertmanager and Grafana serve TLS only (1.3), with certificates from the
  cluster CA (`monitoring_certificates`); Grafana reads both over TLS and trusts only
  that CA; Prometheus scrapes itself, Alertmanager and Grafana over TLS and sends
  alerts to Alertmanager over TLS.
* The namespace denies all traffic by default (`monitoring_network_policies`): its pods
  reach the API server, each other's ports, and Prometheus every pod's and node's
  metrics; OpenCost reads Prometheus; the API server calls the operator's webhook.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from modules.k8s import netpol
from modules.k8s.common import (
    Manifest,
    PlatformNamespace,
    metadata,
    pool_taint_tolerations,
    system_node_selector,
)
from modules.k8s.monitoring.dashboards import DASHBOARD_LABEL
from modules.k8s.names import (
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT_NAME,
    MONITORING_NAMESPACE,
    team_namespace,
)
from modules.k8s.pki.spec import CA_KEY, service_dns_names, serving_certificate
from modules.pools import ACCELERATOR_LABEL, FABRIC_LABEL, POOL_LABEL, ROLE_LABEL
from modules.validation import Checker, bounded

GRAFANA_SERVICE = "grafana"
#: kube-prometheus-stack's release (its fullname prefixes the Prometheus and Alertmanager
#: Services: ``kube-prometheus-stack-prometheus``, ``...-alertmanager``).
RELEASE = "kube-prometheus-stack"
PROMETHEUS_SERVICE = f"{RELEASE}-prometheus"
ALERTMANAGER_SERVICE = f"{RELEASE}-alertmanager"
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
GRAFANA_PORT = 3000
#: Grafana's Service listens on 443 (TLS), forwarding to the container's 3000.
GRAFANA_SERVICE_PORT = 443
#: The Secrets the serving certificates are written to (``tls.crt``, ``tls.key``,
#: ``ca.crt``), one per server.
PROMETHEUS_TLS = "prometheus-tls"
ALERTMANAGER_TLS = "alertmanager-tls"
GRAFANA_TLS = "grafana-tls"
GRAFANA_TLS_DIR = "/etc/grafana/tls"
#: What Prometheus (and OpenCost) call Prometheus by: its certificate's first name.
PROMETHEUS_URL = f"https://{PROMETHEUS_SERVICE}.{MONITORING_NAMESPACE}.svc:{PROMETHEUS_PORT}"
#: Labels of the pods the operators and charts run (used to aim NetworkPolicies).
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
OPERATOR_POD_LABELS = {"app": f"{RELEASE}-operator"}
#: Ports the namespace's pods serve each other: Prometheus, Alertmanager (web and
#: cluster gossip), Grafana, the config reloaders' and kube-state-metrics' 8080,
#: kube-state-metrics' self-metrics (8081), the operator's (10250, also its webhook).
OWN_PORTS: tuple[tuple[str, int], ...] = (
    ("TCP", PROMETHEUS_PORT),
    ("TCP", ALERTMANAGER_PORT),
    ("TCP", 9094),
    ("UDP", 9094),
    ("TCP", GRAFANA_PORT),
    ("TCP", 8080),
    ("TCP", 8081),
    ("TCP", 10250),
)
OPERATOR_WEBHOOK_PORT = 10250
#: What kube-prometheus-stack scrapes on the nodes' own addresses (host network): the
#: kubelet and the node exporter everywhere; where the control plane is the cluster's
#: own (on premises), also kube-proxy (10249), the controller manager (10257), the
#: scheduler (10259) and etcd's metrics (2381), on the control-plane nodes.
NODE_SCRAPE_PORTS = (netpol.KUBELET_PORT, netpol.NODE_EXPORTER_PORT)
CONTROL_PLANE_SCRAPE_PORTS = (10249, 10257, 10259, 2381)
#: Namespaces with this label (platform namespaces only: teams cannot label namespaces)
#: may add routes to Alertmanager with AlertmanagerConfigs carrying the same label,
#: e.g. Kubeflow Pipelines' drift-to-retraining route (`modules.k8s.pipelines.loop`).
ALERT_ROUTING_LABEL = "gpuplatform.ae/alert-routing"
ALERT_ROUTING_VALUE = "platform"
TRAINING_POD_MONITOR = "training-jobs"
# Read by the AWS Load Balancer Controller; the last one by the legacy in-tree
# controller, so the load balancer is internal whichever controller creates it.
INTERNAL_NLB_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
    "service.beta.kubernetes.io/aws-load-balancer-type": "external",
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
    "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
}


@dataclass(frozen=True)
class MonitoringSpec:
    """Monitoring settings (config key ``uae-gpu-platform:monitoring``).

    Args:
        retention_days: how long Prometheus keeps metrics (default 15).
        prometheus_storage_gib: size of Prometheus' encrypted volume (default 100).
        alertmanager_storage_gib: size of Alertmanager's volume (default 10).
        grafana_access: ``port-forward`` (default: ClusterIP only) or
            ``internal-load-balancer`` (EKS: an internal NLB inside the VPC). Grafana is
            never exposed publicly.
        scrape_interval_seconds: how often metrics are scraped (default 30).
        idle_gpu_utilization_percent: a GPU held by a pod below this utilisation...
            (default 5)
        idle_gpu_minutes: ...for this long raises GpuAllocatedButIdle (default 60).
        training_stall_minutes: a training job whose step does not change for this long
            raises TrainingJobNoProgress (default 20).
        gpu_temperature_alert_celsius: GPU temperature that raises GpuHighTemperature
            (default 85).
        node_not_ready_minutes: how long a GPU node may be not Ready before
            GpuNodeNotReady fires (default 5).
    """

    retention_days: int = bounded(1, 3650, default=15)
    prometheus_storage_gib: int = bounded(10, 65_536, default=100)
    alertmanager_storage_gib: int = bounded(1, 1024, default=10)
    grafana_access: Literal["port-forward", "internal-load-balancer"] = "port-forward"
    scrape_interval_seconds: int = bounded(5, 300, default=30)
    idle_gpu_utilization_percent: int = bounded(1, 100, default=5)
    idle_gpu_minutes: int = bounded(5, 1440, default=60)
    training_stall_minutes: int = bounded(2, 1440, default=20)
    gpu_temperature_alert_celsius: int = bounded(50, 110, default=85)
    node_not_ready_minutes: int = bounded(1, 120, default=5)

    def __post_init__(self) -> None:
        check = Checker()
        check.ranges(self)
        check.one_of(
            "grafana_access",
            self.grafana_access,
            ("port-forward", "internal-load-balancer"),
            "never public",
        )
        check.done()


def volume_claim(storage_class: str, size_gib: int) -> dict[str, Any]:
    return {
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{size_gib}Gi"}},
        }
    }


def grafana_service(access: str) -> dict[str, Any]:
    """Grafana's Service: ClusterIP, or an internal NLB. Never internet-facing. It
    listens on 443 (Grafana serves TLS) and forwards to the container's 3000."""
    ports = {"port": GRAFANA_SERVICE_PORT, "targetPort": GRAFANA_PORT, "portName": "https"}
    if access == "internal-load-balancer":
        return {"type": "LoadBalancer", "annotations": dict(INTERNAL_NLB_ANNOTATIONS), **ports}
    return {"type": "ClusterIP", **ports}


def _web_tls(secret: str) -> dict[str, Any]:
    """The operator's ``web.tlsConfig``: serve TLS 1.3 with the certificate in ``secret``."""
    return {
        "tlsConfig": {
            "cert": {"secret": {"name": secret, "key": "tls.crt"}},
            "keySecret": {"name": secret, "key": "tls.key"},
            "minVersion": "TLS13",
        }
    }


def _client_tls(secret: str, service: str) -> dict[str, Any]:
    """A ``tlsConfig`` for calling ``service``: its CA (``ca.crt`` of the server's own
    certificate Secret, in this namespace) and the name its certificate carries."""
    return {
        "ca": {"secret": {"name": secret, "key": CA_KEY}},
        "serverName": f"{service}.{MONITORING_NAMESPACE}.svc",
    }


def _https_monitor(secret: str, service: str) -> dict[str, Any]:
    return {"scheme": "https", "tlsConfig": _client_tls(secret, service)}


def _grafana_probe(**extra: Any) -> dict[str, Any]:
    return {"httpGet": {"path": "/api/health", "port": "grafana", "scheme": "HTTPS"}, **extra}


def grafana_tls_values() -> dict[str, Any]:
    """Grafana serves TLS 1.3 only (its certificate reloaded when cert-manager renews
    it); it reads Prometheus and Alertmanager over TLS and trusts only the cluster CA
    (Go reads ``SSL_CERT_FILE``: Grafana calls nothing outside the cluster); the
    sidecars ask Grafana to reload over its loopback."""
    reload = "https://localhost:3000/api/admin/provisioning/{}/reload"
    # The sidecars' reload requests go to Grafana inside the same pod (loopback):
    # no other host is called with this setting (k8s-sidecar's REQ_SKIP_TLS_VERIFY).
    loopback = {"REQ_SKIP_TLS_VERIFY": "true"}
    return {
        "grafana.ini": {
            "server": {
                "protocol": "https",
                "cert_file": f"{GRAFANA_TLS_DIR}/tls.crt",
                "cert_key": f"{GRAFANA_TLS_DIR}/tls.key",
                "certs_watch_interval": "1h",
                "min_tls_version": "TLS1.3",
            }
        },
        "extraSecretMounts": [
            {
                "name": GRAFANA_TLS,
                "secretName": GRAFANA_TLS,
                "mountPath": GRAFANA_TLS_DIR,
                "readOnly": True,
                "defaultMode": 0o440,
            }
        ],
        "env": {"SSL_CERT_FILE": f"{GRAFANA_TLS_DIR}/{CA_KEY}"},
        "readinessProbe": _grafana_probe(),
        "livenessProbe": _grafana_probe(
            initialDelaySeconds=60, timeoutSeconds=30, failureThreshold=10
        ),
        "serviceMonitor": _https_monitor(GRAFANA_TLS, GRAFANA_SERVICE),
        "sidecar": {
            "dashboards": {"reloadURL": reload.format("dashboards"), "env": dict(loopback)},
            "datasources": {
                "url": f"{PROMETHEUS_URL}/",
                "reloadURL": reload.format("datasources"),
                "env": dict(loopback),
                "alertmanager": {
                    "url": f"https://{ALERTMANAGER_SERVICE}.{MONITORING_NAMESPACE}.svc:"
                    f"{ALERTMANAGER_PORT}/"
                },
            },
        },
    }


#: The images kube-prometheus-stack runs with these values, by repository under their
#: upstream registries (quay.io, registry.k8s.io, ghcr.io, docker.io): the operator, its
#: config reloader and its admission webhook's certificate job, Prometheus, Alertmanager,
#: kube-state-metrics, node-exporter, Grafana and its sidecar. Read from the charts'
#: values.yaml (vendored: 88.5.3 and its subcharts; the pinned 91.5.0 could not be read
#: here); the tags are the pinned chart's own.
MIRRORED_REPOSITORIES = (
    "prometheus-operator/prometheus-operator",
    "prometheus-operator/prometheus-config-reloader",
    "jkroepke/kube-webhook-certgen",
    "prometheus/prometheus",
    "prometheus/alertmanager",
    "kube-state-metrics/kube-state-metrics",
    "prometheus/node-exporter",
    "grafana/grafana",
    "kiwigrid/k8s-sidecar",
)


def kube_prometheus_stack_values(
    spec: MonitoringSpec,
    storage_class: str,
    managed_control_plane: bool,
    registry: str | None = None,
) -> dict[str, Any]:
    """Values of kube-prometheus-stack.

    ``managed_control_plane`` (EKS) turns off scraping of the control plane components
    a managed cluster does not expose, which would otherwise only raise "down" alerts.
    With ``registry`` (on AWS the stack's ECR) every image comes from that mirror, under
    its upstream repository path: the chart's ``global.imageRegistry``, which the chart
    and its subcharts (Grafana, kube-state-metrics, node-exporter) put in place of each
    image's registry.
    """
    system = system_node_selector()
    # Every monitor and rule in the cluster is picked up, not only the chart's own.
    selectors = {
        f"{kind}SelectorNilUsesHelmValues": False
        for kind in ("serviceMonitor", "podMonitor", "rule", "probe", "scrapeConfig")
    }
    values: dict[str, Any] = {
        "prometheusOperator": {
            "nodeSelector": system,
            "admissionWebhooks": {"patch": {"nodeSelector": system}},
        },
        "prometheus": {
            "prometheusSpec": {
                **selectors,
                "nodeSelector": system,
                "retention": f"{spec.retention_days}d",
                # Leave headroom on the volume: Prometheus drops old blocks first.
                "retentionSize": f"{spec.prometheus_storage_gib * 85 // 100}GB",
                "scrapeInterval": f"{spec.scrape_interval_seconds}s",
                "storageSpec": {
                    "volumeClaimTemplate": volume_claim(storage_class, spec.prometheus_storage_gib)
                },
                "web": _web_tls(PROMETHEUS_TLS),
            },
            "serviceMonitor": _https_monitor(PROMETHEUS_TLS, PROMETHEUS_SERVICE),
        },
        "alertmanager": {
            "alertmanagerSpec": {
                "nodeSelector": system,
                # Platform routes from AlertmanagerConfigs in labelled namespaces; their
                # matchers are taken as written (a route for a team namespace's alert
                # lives in a platform namespace), not narrowed to their own namespace.
                "alertmanagerConfigSelector": {
                    "matchLabels": {ALERT_ROUTING_LABEL: ALERT_ROUTING_VALUE}
                },
                "alertmanagerConfigNamespaceSelector": {
                    "matchLabels": {ALERT_ROUTING_LABEL: ALERT_ROUTING_VALUE}
                },
                "alertmanagerConfigMatcherStrategy": {"type": "None"},
                "storage": {
                    "volumeClaimTemplate": volume_claim(
                        storage_class, spec.alertmanager_storage_gib
                    )
                },
                "web": _web_tls(ALERTMANAGER_TLS),
                # How Prometheus sends alerts to it.
                "scheme": "https",
                "tlsConfig": _client_tls(ALERTMANAGER_TLS, ALERTMANAGER_SERVICE),
            },
            "serviceMonitor": _https_monitor(ALERTMANAGER_TLS, ALERTMANAGER_SERVICE),
        },
        "grafana": {
            "fullnameOverride": GRAFANA_SERVICE,
            "nodeSelector": system,
            # Empty: the chart generates a random admin password into its Secret (and
            # keeps it across upgrades) instead of the well-known default.
            "adminPassword": "",
            "service": grafana_service(spec.grafana_access),
            "ingress": {"enabled": False},
            "grafana.ini": {
                "analytics": {
                    "reporting_enabled": False,
                    "check_for_updates": False,
                    "check_for_plugin_updates": False,
                },
                "auth.anonymous": {"enabled": False},
                "users": {"allow_sign_up": False},
            },
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": DASHBOARD_LABEL,
                    "labelValue": "1",
                    "searchNamespace": MONITORING_NAMESPACE,
                }
            },
        },
        "kube-state-metrics": {
            "nodeSelector": system,
            # Labels the dashboards join on: a pod's Job and queue, a node's pool.
            "metricLabelsAllowlist": [
                "pods=[batch.kubernetes.io/job-name,kueue.x-k8s.io/queue-name]",
                f"nodes=[{POOL_LABEL},{ROLE_LABEL},{FABRIC_LABEL},{ACCELERATOR_LABEL}]",
            ],
        },
        # Node metrics from every node, GPU and fabric nodes included.
        "prometheus-node-exporter": {"tolerations": pool_taint_tolerations()},
    }
    if registry is not None:
        values["global"] = {"imageRegistry": registry}
    values["grafana"] = _merge(values["grafana"], grafana_tls_values())
    if managed_control_plane:
        for component in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"):
            values[component] = {"enabled": False}
    return values


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, nested mappings key by key."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def monitoring_certificates() -> list[Manifest]:
    """The serving certificates of Prometheus, Alertmanager and Grafana (Grafana's also
    for ``localhost``: its sidecars call it there)."""
    ns = MONITORING_NAMESPACE
    return [
        serving_certificate(PROMETHEUS_TLS, ns, service_dns_names(PROMETHEUS_SERVICE, ns)),
        serving_certificate(ALERTMANAGER_TLS, ns, service_dns_names(ALERTMANAGER_SERVICE, ns)),
        serving_certificate(
            GRAFANA_TLS, ns, [*service_dns_names(GRAFANA_SERVICE, ns), "localhost"]
        ),
    ]


def monitoring_network_policies(
    network: netpol.ClusterNetwork,
    grafana_access: str,
    opencost_namespace: str | None,
    managed_control_plane: bool = True,
) -> list[Manifest]:
    """Default deny, DNS and the API server (the operator, kube-state-metrics, Prometheus'
    service discovery and Grafana's sidecars watch the API); the namespace's own ports;
    Prometheus scrapes every pod (each target's namespace admits it on its metrics port
    only) and the nodes' kubelets and node exporters (on premises also the control
    plane's components, `CONTROL_PLANE_SCRAPE_PORTS`); the API server calls the
    operator's webhook; OpenCost reads Prometheus; on EKS with an internal load
    balancer, the VPC reaches Grafana."""
    ns = MONITORING_NAMESPACE
    own = [{"protocol": proto, "port": port} for proto, port in OWN_PORTS]
    policies = [
        *netpol.baseline(ns, network),
        netpol.allow_within(ns, own),
        netpol.policy(
            ns,
            "allow-prometheus-scrape",
            {
                "podSelector": netpol.pods(PROMETHEUS_POD_LABELS),
                "policyTypes": ["Egress"],
                "egress": [
                    {"to": [{"namespaceSelector": {}}]},
                    {
                        "to": netpol.cidr_peers(network.node_cidrs),
                        "ports": netpol.tcp(
                            *NODE_SCRAPE_PORTS,
                            *(() if managed_control_plane else CONTROL_PLANE_SCRAPE_PORTS),
                        ),
                    },
                ],
            },
        ),
        netpol.allow_from_api_server(
            ns, network, netpol.tcp(OPERATOR_WEBHOOK_PORT), pod_labels=OPERATOR_POD_LABELS
        ),
    ]
    if opencost_namespace is not None:
        policies.append(
            netpol.allow_ingress(
                ns,
                "allow-opencost",
                [netpol.namespace_peer(opencost_namespace)],
                netpol.tcp(PROMETHEUS_PORT),
                pod_labels=PROMETHEUS_POD_LABELS,
            )
        )
    if grafana_access == "internal-load-balancer":
        policies.append(
            netpol.allow_ingress(
                ns,
                "allow-grafana-load-balancer",
                netpol.cidr_peers(network.node_cidrs),
                netpol.tcp(GRAFANA_PORT),
                pod_labels={"app.kubernetes.io/name": "grafana"},
            )
        )
    return policies


def team_pod_monitor(
    name: str,
    team_names: Sequence[str],
    selector: Manifest,
    ports: Sequence[str],
    series_label: tuple[str, str],
    *,
    node: bool = True,
) -> Manifest:
    """A PodMonitor in ``monitoring`` over the team namespaces: the pods ``selector``
    picks, scraped at ``/metrics`` on each of ``ports``. Each series gets the label
    ``series_label[1]`` from the pod label whose Prometheus meta name ends in
    ``series_label[0]`` and, with ``node``, the node's name (``node``)."""
    pod_label, target = series_label
    relabelings = [
        {"sourceLabels": [f"__meta_kubernetes_pod_label_{pod_label}"], "targetLabel": target}
    ]
    if node:
        relabelings.append(
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
        )
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(name, MONITORING_NAMESPACE),
        "spec": {
            "namespaceSelector": {"matchNames": [team_namespace(t) for t in sorted(team_names)]},
            "selector": selector,
            "podMetricsEndpoints": [
                {"port": port, "path": "/metrics", "relabelings": relabelings} for port in ports
            ],
        },
    }


def training_pod_monitor(team_names: Sequence[str]) -> Manifest:
    """Scrape training pods' ``metrics`` port in the team namespaces; label each series
    with its Job (``training_job``)."""
    return team_pod_monitor(
        TRAINING_POD_MONITOR,
        team_names,
        {"matchLabels": {METRICS_LABEL: METRICS_LABEL_VALUE}},
        [METRICS_PORT_NAME],
        ("batch_kubernetes_io_job_name", "training_job"),
    )


# `privileged`: the node exporter DaemonSet uses the host's network, PID namespace and
# root file system to report node metrics. No team can run pods here.
MONITORING_NS = PlatformNamespace(
    MONITORING_NAMESPACE,
    "privileged",
    "node-exporter reads host network, PID and filesystem metrics",
)
