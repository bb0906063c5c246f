"""`Monitoring`: installs kube-prometheus-stack and registers its certificates and fences,
the training PodMonitor, the dashboards and the alert rules that `spec`, `dashboards` and
`alerts` build (and the PodMonitor of cert-manager, installed before monitoring)."""

from __future__ import annotations

from modules.component_base import Outputs
from modules.k8s.cost.spec import OPENCOST_NAMESPACE
from modules.k8s.monitoring.alerts import prometheus_rule
from modules.k8s.monitoring.dashboards import dashboards_configmap
from modules.k8s.monitoring.spec import (
    GRAFANA_SERVICE,
    MONITORING_NS,
    kube_prometheus_stack_values,
    monitoring_certificates,
    monitoring_network_policies,
    training_pod_monitor,
)
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.pki.spec import cert_manager_pod_monitor
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.storage.spec import platform_storage_class
from modules.k8s.versions import KUBE_PROMETHEUS_STACK


class Monitoring(PlatformService):
    """kube-prometheus-stack, the training PodMonitor, dashboards and alert rules."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        # Grafana's dashboards and the namespace's fences exist before the release.
        configured = self.fenced_namespace(
            MONITORING_NS,
            [
                dashboards_configmap(),
                *monitoring_network_policies(
                    args.network,
                    args.monitoring.grafana_access,
                    OPENCOST_NAMESPACE if args.cost is not None else None,
                    managed_control_plane=args.eks is not None,
                ),
            ],
        )
        ns = configured[0]
        # The servers' certificates (``waits_for`` carries the cluster CA's issuer):
        # their pods mount the Secrets, so they exist before the release waits on them.
        certificates = [self.add(m, [ns, *self.waits_for]) for m in monitoring_certificates()]
        values = kube_prometheus_stack_values(
            args.monitoring,
            platform_storage_class(args),
            managed_control_plane=args.eks is not None,
            registry=args.addon_registry,
        )
        self.release = self.install(
            "kube-prometheus-stack",
            KUBE_PROMETHEUS_STACK,
            MONITORING_NAMESPACE,
            values,
            [*configured, *certificates, *self.waits_for],
        )
        self.add(prometheus_rule(args.monitoring), [self.release])
        self.add(cert_manager_pod_monitor(), [self.release])
        if args.teams:
            self.add(training_pod_monitor([t.name for t in args.teams]), [self.release])
        return {"grafanaService": f"{MONITORING_NAMESPACE}/{GRAFANA_SERVICE}"}
