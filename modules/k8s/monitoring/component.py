"""`Monitoring`: installs kube-prometheus-stack and registers its certificates and fences,
the training PodMonitor, the dashboards and the alert rules that `spec`, `dashboards` and
`alerts` build (and the PodMonitor of cert-manager, installed before monitoring)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from modules.k8s.common import helm_release, register, register_namespace
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
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import KUBE_PROMETHEUS_STACK


class Monitoring(pulumi.ComponentResource):
    """kube-prometheus-stack, the training PodMonitor, dashboards and alert rules."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        storage_class: str,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:Monitoring", name, None, opts)
        provider = args.provider
        # Grafana's dashboards and the namespace's fences exist before the release.
        configured = register_namespace(
            MONITORING_NS.manifest(args.kubernetes_version),
            [
                dashboards_configmap(),
                *monitoring_network_policies(
                    args.network,
                    args.monitoring.grafana_access,
                    OPENCOST_NAMESPACE if args.cost is not None else None,
                    managed_control_plane=args.eks is not None,
                ),
            ],
            self,
            provider,
        )
        ns = configured[0]
        # The servers' certificates (``depends_on`` carries the cluster CA's issuer):
        # their pods mount the Secrets, so they exist before the release waits on them.
        certificates = [
            register(m, self, provider, depends_on=[ns, *depends_on])
            for m in monitoring_certificates()
        ]
        self.release = helm_release(
            "kube-prometheus-stack",
            KUBE_PROMETHEUS_STACK,
            MONITORING_NAMESPACE,
            values=kube_prometheus_stack_values(
                args.monitoring, storage_class, managed_control_plane=args.eks is not None
            ),
            parent=self,
            provider=provider,
            depends_on=[*configured, *certificates, *depends_on],
        )
        register(prometheus_rule(args.monitoring), self, provider, depends_on=[self.release])
        register(cert_manager_pod_monitor(), self, provider, depends_on=[self.release])
        if args.teams:
            register(
                training_pod_monitor([t.name for t in args.teams]),
                self,
                provider,
                depends_on=[self.release],
            )
        self.register_outputs({"grafanaService": f"{MONITORING_NAMESPACE}/{GRAFANA_SERVICE}"})
