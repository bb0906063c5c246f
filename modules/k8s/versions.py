"""Pinned versions of everything the Kubernetes layer installs.

One place to bump a chart: each `Chart` names its repository, chart and exact version,
so an upgrade is a reviewed one-line change and the plan shows what a stack runs.
Versions were checked against the projects' release notes and install guides.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kubernetes minor versions this layer is tested against. Each has an OpenAPI schema in
#: kubernetes-validate, and the tests validate every manifest against each of them. The
#: stack config validation imports this tuple.
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = ("1.31", "1.32", "1.33", "1.34")


@dataclass(frozen=True)
class Chart:
    """A Helm chart pinned to one version.

    Args:
        chart: chart name, or the full ``oci://`` reference for OCI registries.
        version: exact chart version (no ranges).
        repo: the chart repository URL; empty for OCI charts (the reference says where).
    """

    chart: str
    version: str
    repo: str = ""


GPU_OPERATOR = Chart("gpu-operator", "v25.10.1", "https://helm.ngc.nvidia.com/nvidia")
NETWORK_OPERATOR = Chart("network-operator", "v26.4.1", "https://helm.ngc.nvidia.com/nvidia")
# v0.5.15 and later list p5en/p6 in their defaults; we select EFA pools by our own label.
EFA_DEVICE_PLUGIN = Chart(
    "aws-efa-k8s-device-plugin", "v0.5.20", "https://aws.github.io/eks-charts"
)
KUBE_PROMETHEUS_STACK = Chart(
    "kube-prometheus-stack", "91.5.0", "https://prometheus-community.github.io/helm-charts"
)
# Kueue serves kueue.x-k8s.io/v1beta2 since v0.15 (v1beta1 is gone in v0.20).
KUEUE = Chart("oci://registry.k8s.io/kueue/charts/kueue", "0.19.6")
CLUSTER_AUTOSCALER = Chart(
    "cluster-autoscaler", "9.50.0", "https://kubernetes.github.io/autoscaler"
)
FSX_CSI_DRIVER = Chart(
    "aws-fsx-csi-driver", "1.17.0", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
)

# -- tracking (MLflow) ------------------------------------------------------------
# community-charts/mlflow 1.11.5 (commit 9d23d003): MLflow 3.15.1 in the chart's
# default image burakince/mlflow, whose pyproject adds psycopg2-binary, boto3 and
# mlflow[extras] (prometheus-flask-exporter, for --expose-prometheus) to MLflow; read
# on an older revision of that pyproject, not re-checked for the 3.15.1 image.
MLFLOW = Chart("mlflow", "1.11.5", "https://community-charts.github.io/helm-charts")
# cloudnative-pg/charts cloudnative-pg-v0.29.0 (commit d1b5ad60): operator 1.30.0.
CLOUDNATIVE_PG = Chart("cloudnative-pg", "0.29.0", "https://cloudnative-pg.github.io/charts")
#: The PostgreSQL image (repository, tag) of the on-premises tracking database
#: (CloudNativePG's operand image; major 17, the same major as RDS on AWS, so a dump
#: moves between the two), mirrored into the stack's registry.
CLOUDNATIVE_PG_POSTGRES_IMAGE = ("ghcr.io/cloudnative-pg/postgresql", "17.6")
#: RDS engine version of the tracking database on AWS (a major version: RDS picks its
#: current minor and applies minor upgrades in the maintenance window).
RDS_POSTGRES_MAJOR = "17"

# -- LLM serving (modules/k8s/llm) ------------------------------------------------
# The versions KServe v0.20.0 builds its LLMInferenceService against: KEDA 2.18.0 (its
# go.mod, github.com/kedacore/keda/v2 v2.18.0) and LeaderWorkerSet v0.8.0 (KEDA_VERSION and
# LWS_VERSION of hack/setup/quick-install/keda-dependency-install.sh). kedacore/charts tag v2.18.0
# (commit c06731ef) holds both the keda 2.18.0 chart and the HTTP add-on chart 0.11.0
# (add-on v0.11.0); kubernetes-sigs/lws tag v0.8.0 (commit fc19b9ae) publishes its chart
# as oci://registry.k8s.io/lws/charts/lws 0.8.0 (its installation page).
KEDA = Chart("keda", "2.18.0", "https://kedacore.github.io/charts")
KEDA_HTTP_ADD_ON = Chart("keda-add-ons-http", "0.11.0", "https://kedacore.github.io/charts")
LEADER_WORKER_SET = Chart("oci://registry.k8s.io/lws/charts/lws", "0.8.0")

#: Cluster Autoscaler must match the cluster's minor version (upstream policy).
CLUSTER_AUTOSCALER_IMAGE_TAGS: dict[str, str] = {
    "1.31": "v1.31.0",
    "1.32": "v1.32.0",
    "1.33": "v1.33.0",
    "1.34": "v1.34.0",
}

#: Images the NVIDIA Network Operator deploys from a NicClusterPolicy (same release).
NETWORK_OPERATOR_IMAGE_REPOSITORY = "nvcr.io/nvidia/mellanox"
NETWORK_OPERATOR_COMPONENT_TAG = "network-operator-v26.4.1"
DOCA_OFED_DRIVER_VERSION = "doca3.4.1-26.04-1.1.0.0-1"

#: Amazon EKS replicates its add-on images (the EFA device plugin among them) into a
#: registry in each region; pulling from the stack's own region keeps traffic in-country.
EKS_ADDON_REGISTRIES: dict[str, str] = {
    "me-central-1": "759879836304.dkr.ecr.me-central-1.amazonaws.com",
}


def charts() -> dict[str, Chart]:
    """Every chart this layer may install, by release name (for the plan summary)."""
    return {
        "gpu-operator": GPU_OPERATOR,
        "network-operator": NETWORK_OPERATOR,
        "aws-efa-k8s-device-plugin": EFA_DEVICE_PLUGIN,
        "kube-prometheus-stack": KUBE_PROMETHEUS_STACK,
        "kueue": KUEUE,
        "cluster-autoscaler": CLUSTER_AUTOSCALER,
        "aws-fsx-csi-driver": FSX_CSI_DRIVER,
        "mlflow": MLFLOW,
        "cloudnative-pg": CLOUDNATIVE_PG,
        "keda": KEDA,
        "keda-add-ons-http": KEDA_HTTP_ADD_ON,
        "lws": LEADER_WORKER_SET,
    }
