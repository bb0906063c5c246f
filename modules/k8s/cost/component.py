"""`CostAllocation`: installs OpenCost and registers the cost rules and the dashboard that
`spec` builds."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.common import helm_release, namespace, register
from modules.k8s.cost.spec import (
    OPENCOST,
    OPENCOST_NAMESPACE,
    CostInputs,
    cost_dashboard_configmap,
    cost_rule,
    opencost_network_policies,
    opencost_values,
)
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.pki.spec import ca_bundle


class CostAllocation(pulumi.ComponentResource):
    """OpenCost, the cost recording rules and budget alerts, the team cost dashboard."""

    def __init__(
        self,
        name: str,
        inputs: CostInputs,
        provider: k8s.Provider,
        kubernetes_version: str,
        network: ClusterNetwork,
        *,
        depends_on: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:CostAllocation", name, None, opts)
        ns = register(
            namespace(OPENCOST_NAMESPACE, "restricted", kubernetes_version), self, provider
        )
        fences = [
            register(m, self, provider, depends_on=[ns]) for m in opencost_network_policies(network)
        ]
        # The cluster CA OpenCost verifies Prometheus with (``depends_on`` carries the
        # monitoring release, which waits for the CA's issuer).
        bundle = register(
            ca_bundle(OPENCOST_NAMESPACE), self, provider, depends_on=[ns, *depends_on]
        )
        self.release = helm_release(
            "opencost",
            OPENCOST,
            OPENCOST_NAMESPACE,
            values=opencost_values(inputs),
            parent=self,
            provider=provider,
            depends_on=[ns, bundle, *fences, *depends_on],
        )
        register(cost_rule(inputs), self, provider, depends_on=list(depends_on))
        register(cost_dashboard_configmap(), self, provider, depends_on=list(depends_on))
        self.register_outputs({"opencost": f"{OPENCOST_NAMESPACE}/opencost"})
