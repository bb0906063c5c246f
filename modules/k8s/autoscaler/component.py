"""`Autoscaler`: installs the Cluster Autoscaler with the values `spec` builds (EKS only)."""

from __future__ import annotations

import pulumi

from modules.component_base import Outputs
from modules.k8s.autoscaler.spec import cluster_autoscaler_values
from modules.k8s.names import KUBE_SYSTEM
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import CLUSTER_AUTOSCALER


class Autoscaler(PlatformService):
    """The Cluster Autoscaler in ``kube-system``."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        if args.eks is None:
            raise ValueError("the Cluster Autoscaler is for EKS only")
        version, registry = args.kubernetes_version, args.eks.registry
        values = pulumi.Output.all(args.eks.cluster_name, args.eks.region).apply(
            lambda names: cluster_autoscaler_values(names[0], names[1], version, registry)
        )
        self.release = self.install("cluster-autoscaler", CLUSTER_AUTOSCALER, KUBE_SYSTEM, values)
        return {"chartVersion": CLUSTER_AUTOSCALER.version}
