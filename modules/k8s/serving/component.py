"""`Serving`: installs KServe and metrics-server and registers the runtimes, identities,
fences and monitoring that `manifests` and `observability` build (cert-manager and the
cluster CA are the platform's PKI, `modules.k8s.pki`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from modules.k8s.common import helm_release, namespace, register
from modules.k8s.names import KUBE_SYSTEM
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.serving.manifests import (
    DEPLOYMENT_MODE,
    api_server_egress,
    auth_delegation,
    inference_service_account,
    kserve_network_policies,
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
    KSERVE,
    KSERVE_CRD,
    KSERVE_NAMESPACE,
    METRICS_SERVER,
)


class Serving(pulumi.ComponentResource):
    """KServe, the runtimes, the inference identities and their monitoring (from
    ``args.serving``); its certificates come from the cluster CA (``pki_ready``).

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
        *,
        pki_ready: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("gpuplatform:k8s:Serving", name, None, opts)
        if args.serving is None:
            raise ValueError("Serving needs args.serving")
        spec = args.serving
        provider = args.provider
        version = args.kubernetes_version
        kserve_ns = register(namespace(KSERVE_NAMESPACE, "restricted", version), self, provider)
        fences = [
            register(m, self, provider, depends_on=[kserve_ns])
            for m in kserve_network_policies(args.network)
        ]
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
            depends_on=[kserve_ns, crds, *fences, *pki_ready],
        )
        self.ready: list[pulumi.Resource] = [kserve, *pki_ready]
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
            register(
                api_server_egress(spec, team, args.network),
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
