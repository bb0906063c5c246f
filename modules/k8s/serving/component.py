"""`Serving`: installs cert-manager, KServe and metrics-server and registers the runtimes,
identities and monitoring that `manifests` and `observability` build."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from modules.k8s.common import helm_release, namespace, register
from modules.k8s.names import KUBE_SYSTEM
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.serving.manifests import (
    DEPLOYMENT_MODE,
    api_server_egress,
    auth_delegation,
    cert_manager_values,
    certificate_authority,
    inference_service_account,
    kserve_values,
    metrics_server_values,
    serving_runtimes,
)
from modules.k8s.serving.observability import (
    drift_pod_monitor,
    inference_pod_monitor,
    serving_dashboard_configmap,
    serving_prometheus_rule,
)
from modules.k8s.serving.spec import (
    CERT_MANAGER,
    CERT_MANAGER_NAMESPACE,
    KSERVE,
    KSERVE_CRD,
    KSERVE_NAMESPACE,
    METRICS_SERVER,
)


class Serving(pulumi.ComponentResource):
    """cert-manager, KServe, the runtimes, the inference identities and their monitoring
    (from ``args.serving``).

    Attributes:
        ready: what an InferenceService must ``depends_on`` (KServe and its runtimes).
    """

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        team_namespaces: Mapping[str, pulumi.Resource],
        monitoring_release: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:Serving", name, None, opts)
        if args.serving is None:
            raise ValueError("Serving needs args.serving")
        spec = args.serving
        provider = args.provider
        version = args.kubernetes_version
        cm_ns = register(namespace(CERT_MANAGER_NAMESPACE, "restricted", version), self, provider)
        kserve_ns = register(namespace(KSERVE_NAMESPACE, "restricted", version), self, provider)
        cert_manager = helm_release(
            "cert-manager",
            CERT_MANAGER,
            CERT_MANAGER_NAMESPACE,
            values=cert_manager_values(spec),
            parent=self,
            provider=provider,
            depends_on=[cm_ns, monitoring_release],
        )
        crds = helm_release(
            "kserve-crd",
            KSERVE_CRD,
            KSERVE_NAMESPACE,
            values={},
            parent=self,
            provider=provider,
            depends_on=[kserve_ns],
        )
        region = args.eks.region if args.eks is not None else None
        kserve = helm_release(
            "kserve",
            KSERVE,
            KSERVE_NAMESPACE,
            values=kserve_values(spec, region if isinstance(region, str) else None),
            parent=self,
            provider=provider,
            depends_on=[kserve_ns, crds, cert_manager],
        )
        self.ready: list[pulumi.Resource] = [kserve]
        issued: list[pulumi.Resource] = [cert_manager]
        for issuer in certificate_authority():
            issued = [register(issuer, self, provider, depends_on=issued)]
        self.ready += issued
        if spec.install_metrics_server:
            # kube-system: where the resource metrics API's server conventionally runs.
            self.ready.append(
                helm_release(
                    "metrics-server",
                    METRICS_SERVER,
                    KUBE_SYSTEM,
                    values=metrics_server_values(spec),
                    parent=self,
                    provider=provider,
                )
            )
        runtimes = serving_runtimes(spec, bool(args.gpu_pools))
        for runtime in runtimes:
            self.ready.append(register(runtime, self, provider, depends_on=[kserve]))
        teams = [t.name for t in args.teams]
        for team in teams:
            self.ready.append(
                register(
                    inference_service_account(team),
                    self,
                    provider,
                    depends_on=[team_namespaces[team]],
                )
            )
            if spec.api_server_cidrs:
                register(
                    api_server_egress(spec, team),
                    self,
                    provider,
                    depends_on=[team_namespaces[team]],
                )
        if teams:
            register(auth_delegation(teams), self, provider)
            register(inference_pod_monitor(teams), self, provider, depends_on=[monitoring_release])
            register(drift_pod_monitor(teams), self, provider, depends_on=[monitoring_release])
        register(serving_prometheus_rule(spec), self, provider, depends_on=[monitoring_release])
        # In the monitoring namespace, which the monitoring release waits for.
        register(serving_dashboard_configmap(spec), self, provider, depends_on=[monitoring_release])
        self.register_outputs(
            {
                "kserve": f"{KSERVE.version} ({DEPLOYMENT_MODE})",
                "runtimes": [r["metadata"]["name"] for r in runtimes],
            }
        )
