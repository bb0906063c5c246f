"""`Autoscaler`: installs the Cluster Autoscaler with the values `spec` builds (EKS only)."""

from __future__ import annotations

import pulumi

from modules.k8s.autoscaler.spec import cluster_autoscaler_values
from modules.k8s.common import helm_release
from modules.k8s.names import KUBE_SYSTEM
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import CLUSTER_AUTOSCALER


class Autoscaler(pulumi.ComponentResource):
    """The Cluster Autoscaler in ``kube-system``."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:Autoscaler", name, None, opts)
        if args.eks is None:
            raise ValueError("the Cluster Autoscaler is for EKS only")
        version = args.kubernetes_version
        values = pulumi.Output.all(args.eks.cluster_name, args.eks.region).apply(
            lambda names: cluster_autoscaler_values(names[0], names[1], version)
        )
        self.release = helm_release(
            "cluster-autoscaler",
            CLUSTER_AUTOSCALER,
            KUBE_SYSTEM,
            values=values,
            parent=self,
            provider=args.provider,
        )
        self.register_outputs({"chartVersion": CLUSTER_AUTOSCALER.version})
