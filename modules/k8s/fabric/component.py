"""`Fabric`: installs the EFA device plugin (EKS) or the Network Operator and registers
the InfiniBand objects (on premises) that `spec` builds."""

from __future__ import annotations

import pulumi

from modules.k8s.common import helm_release, register, register_namespace
from modules.k8s.fabric.spec import (
    NETWORK_OPERATOR_NS,
    efa_device_plugin_values,
    ib_ip_pool,
    ipoib_network,
    network_operator_network_policies,
    network_operator_values,
    nic_cluster_policy,
)
from modules.k8s.names import KUBE_SYSTEM, NETWORK_OPERATOR_NAMESPACE
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import EFA_DEVICE_PLUGIN, NETWORK_OPERATOR


class Fabric(pulumi.ComponentResource):
    """EFA device plugin (EKS) or the Network Operator (on-prem InfiniBand)."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        team_namespaces: dict[str, pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:Fabric", name, None, opts)
        provider = args.provider
        self.releases: list[pulumi.Resource] = []
        if args.eks is not None and args.pools_with_fabric("efa"):
            values = pulumi.Output.from_input(args.eks.region).apply(efa_device_plugin_values)
            self.releases.append(
                helm_release(
                    "aws-efa-k8s-device-plugin",
                    EFA_DEVICE_PLUGIN,
                    KUBE_SYSTEM,
                    values=values,
                    parent=self,
                    provider=provider,
                )
            )
        spec = args.infiniband
        if spec is not None and args.pools_with_fabric("infiniband"):
            fenced = register_namespace(
                NETWORK_OPERATOR_NS.manifest(args.kubernetes_version),
                network_operator_network_policies(args.network),
                self,
                provider,
            )
            release = helm_release(
                "network-operator",
                NETWORK_OPERATOR,
                NETWORK_OPERATOR_NAMESPACE,
                values=network_operator_values(),
                parent=self,
                provider=provider,
                depends_on=fenced,
            )
            self.releases.append(release)
            register(nic_cluster_policy(spec), self, provider, depends_on=[release])
            if args.secondary_network:
                pool = register(ib_ip_pool(spec), self, provider, depends_on=[release])
                for team in args.teams:
                    register(
                        ipoib_network(team.name, spec),
                        self,
                        provider,
                        depends_on=[pool, team_namespaces[team.name]],
                    )
        self.register_outputs({"releases": len(self.releases)})
