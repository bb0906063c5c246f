"""`Fabric`: installs the EFA device plugin (EKS) or the Network Operator and registers
the InfiniBand objects (on premises) that `spec` builds."""

from __future__ import annotations

import pulumi

from modules.component_base import Outputs
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
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import EFA_DEVICE_PLUGIN, NETWORK_OPERATOR


class Fabric(PlatformService):
    """EFA device plugin (EKS) or the Network Operator (on-prem InfiniBand)."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        self.releases: list[pulumi.Resource] = []
        if args.eks is not None and args.pools_with_fabric("efa"):
            values = pulumi.Output.from_input(args.eks.region).apply(efa_device_plugin_values)
            self.releases.append(
                self.install("aws-efa-k8s-device-plugin", EFA_DEVICE_PLUGIN, KUBE_SYSTEM, values)
            )
        spec = args.infiniband
        if spec is not None and args.pools_with_fabric("infiniband"):
            fenced = self.fenced_namespace(
                NETWORK_OPERATOR_NS, network_operator_network_policies(args.network)
            )
            release = self.install(
                "network-operator",
                NETWORK_OPERATOR,
                NETWORK_OPERATOR_NAMESPACE,
                network_operator_values(args.addon_registry),
                fenced,
            )
            self.releases.append(release)
            self.add(nic_cluster_policy(spec, args.addon_registry), [release])
            if args.secondary_network:
                pool = self.add(ib_ip_pool(spec), [release])
                for team in args.teams:
                    self.add(
                        ipoib_network(team.name, spec), [pool, self.team_namespaces[team.name]]
                    )
        return {"releases": len(self.releases)}
