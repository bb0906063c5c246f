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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from modules.k8s.common import (
    Manifest,
    metadata,
    namespace,
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
from modules.pools import ACCELERATOR_LABEL, FABRIC_LABEL, POOL_LABEL, ROLE_LABEL
from modules.validation import Checker

GRAFANA_SERVICE = "grafana"
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

    retention_days: int = 15
    prometheus_storage_gib: int = 100
    alertmanager_storage_gib: int = 10
    grafana_access: Literal["port-forward", "internal-load-balancer"] = "port-forward"
    scrape_interval_seconds: int = 30
    idle_gpu_utilization_percent: int = 5
    idle_gpu_minutes: int = 60
    training_stall_minutes: int = 20
    gpu_temperature_alert_celsius: int = 85
    node_not_ready_minutes: int = 5

    def __post_init__(self) -> None:
        check = Checker()
        ranges = {
            "retention_days": (1, 3650),
            "prometheus_storage_gib": (10, 65_536),
            "alertmanager_storage_gib": (1, 1024),
            "scrape_interval_seconds": (5, 300),
            "idle_gpu_utilization_percent": (1, 100),
            "idle_gpu_minutes": (5, 1440),
            "training_stall_minutes": (2, 1440),
            "gpu_temperature_alert_celsius": (50, 110),
            "node_not_ready_minutes": (1, 120),
        }
        for field, (low, high) in ranges.items():
            value = getattr(self, field)
            check.require(low <= value <= high, field, value, f"use {low} to {high}")
        check.require(
            self.grafana_access in ("port-forward", "internal-load-balancer"),
            "grafana_access",
            self.grafana_access,
            "one of 'port-forward', 'internal-load-balancer' (never public)",
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
    """Grafana's Service: ClusterIP, or an internal NLB. Never internet-facing."""
    if access == "internal-load-balancer":
        return {"type": "LoadBalancer", "annotations": dict(INTERNAL_NLB_ANNOTATIONS)}
    return {"type": "ClusterIP"}


def kube_prometheus_stack_values(
    spec: MonitoringSpec, storage_class: str, managed_control_plane: bool
) -> dict[str, Any]:
    """Values of kube-prometheus-stack.

    ``managed_control_plane`` (EKS) turns off scraping of the control plane components
    a managed cluster does not expose, which would otherwise only raise "down" alerts.
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
            }
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
            }
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
    if managed_control_plane:
        for component in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"):
            values[component] = {"enabled": False}
    return values


def training_pod_monitor(team_names: Sequence[str]) -> Manifest:
    """Scrape training pods' ``metrics`` port in the team namespaces; label each series
    with its Job (``training_job``)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(TRAINING_POD_MONITOR, MONITORING_NAMESPACE),
        "spec": {
            "namespaceSelector": {"matchNames": [team_namespace(t) for t in sorted(team_names)]},
            "selector": {"matchLabels": {METRICS_LABEL: METRICS_LABEL_VALUE}},
            "podMetricsEndpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "relabelings": [
                        {
                            "sourceLabels": [
                                "__meta_kubernetes_pod_label_batch_kubernetes_io_job_name"
                            ],
                            "targetLabel": "training_job",
                        },
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                            "targetLabel": "node",
                        },
                    ],
                }
            ],
        },
    }


def monitoring_namespace(kubernetes_version: str) -> Manifest:
    # `privileged`: the node exporter DaemonSet uses the host's network, PID namespace
    # and root file system to report node metrics. No team can run pods here.
    return namespace(
        MONITORING_NAMESPACE,
        "privileged",
        kubernetes_version,
        reason="node-exporter reads host network, PID and filesystem metrics",
    )
