"""Scale from zero: the Cluster Autoscaler (EKS only; none on premises).

When Kueue admits a job whose pods do not fit, the pods stay Pending and the autoscaler
grows the node group that can hold them, even from zero nodes: it learns an empty
group's labels, taints and GPUs from the node groups' ``node-template`` tags (set by the
AWS side). Idle nodes are removed after ``scale-down-unneeded-time``.

The autoscaler finds its node groups by the tags ``k8s.io/cluster-autoscaler/enabled``
and ``k8s.io/cluster-autoscaler/<cluster>``, and runs as ``kube-system/cluster-autoscaler``,
the ServiceAccount the AWS side's Pod Identity association names.
"""

from __future__ import annotations

from typing import Any

from modules.k8s.common import system_node_selector
from modules.k8s.names import CLUSTER_AUTOSCALER_SERVICE_ACCOUNT
from modules.k8s.versions import CLUSTER_AUTOSCALER_IMAGE_TAGS


def discovery_tags(cluster_name: str) -> list[str]:
    """The node group tags the autoscaler discovers its groups by."""
    return ["k8s.io/cluster-autoscaler/enabled", f"k8s.io/cluster-autoscaler/{cluster_name}"]


#: The autoscaler's image (registry.k8s.io), by its repository under a mirror; its tag
#: follows the cluster's minor version (`CLUSTER_AUTOSCALER_IMAGE_TAGS`).
UPSTREAM_REGISTRY = "registry.k8s.io"
REPOSITORY = "autoscaling/cluster-autoscaler"


def cluster_autoscaler_values(
    cluster_name: str, region: str, kubernetes_version: str, registry: str | None = None
) -> dict[str, Any]:
    """Values of the cluster-autoscaler chart (keys checked against its values.yaml);
    the image from ``registry``, a mirror under the upstream repository path (the
    stack's ECR), pulled at each start."""
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name, "tags": discovery_tags(cluster_name)},
        "fullnameOverride": "cluster-autoscaler",
        "rbac": {
            "create": True,
            "serviceAccount": {"create": True, "name": CLUSTER_AUTOSCALER_SERVICE_ACCOUNT},
        },
        # The autoscaler's minor version must match the cluster's.
        "image": {
            "repository": f"{registry or UPSTREAM_REGISTRY}/{REPOSITORY}",
            "tag": CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version],
            "pullPolicy": "Always",
        },
        "nodeSelector": system_node_selector(),
        "extraArgs": {
            "balance-similar-node-groups": True,
            "expander": "least-waste",
            "scale-down-unneeded-time": "10m",
            "scale-down-delay-after-add": "10m",
            # DaemonSet pods (device plugins, exporters) do not keep a node alive.
            "skip-nodes-with-system-pods": False,
            "skip-nodes-with-local-storage": False,
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
