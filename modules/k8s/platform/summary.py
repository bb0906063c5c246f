"""What the plan summary prints about the Kubernetes layer (pure functions of the args)."""

from __future__ import annotations

from modules.k8s.cost.spec import OPENCOST
from modules.k8s.fabric.spec import fabric_plugins
from modules.k8s.pki.spec import CERT_MANAGER
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.serving.spec import KSERVE, KSERVE_CRD, METRICS_SERVER
from modules.k8s.trainer.spec import KUBEFLOW_TRAINER
from modules.k8s.versions import (
    CLOUDNATIVE_PG,
    CLUSTER_AUTOSCALER,
    EFA_DEVICE_PLUGIN,
    FSX_CSI_DRIVER,
    GPU_OPERATOR,
    KUBE_PROMETHEUS_STACK,
    KUEUE,
    MLFLOW,
    NETWORK_OPERATOR,
    Chart,
)


def pool_plugins(args: KubernetesPlatformArgs) -> dict[str, list[str]]:
    """Pool name -> the platform's pods and node agents that land on that pool."""
    onprem = args.onprem
    result: dict[str, list[str]] = {}
    for pool in args.pools:
        plugins = ["node-exporter"]
        if args.gpu_pools:
            # Node feature discovery labels every node; the GPU agents follow its labels.
            plugins.append("node-feature-discovery-worker")
        if args.eks is not None and args.eks.fsx is not None:
            plugins.append("fsx-csi-node")
        if pool.role == "system":
            plugins += [
                "prometheus",
                "alertmanager",
                "grafana",
                "kube-state-metrics",
                "prometheus-operator",
                "kueue-controller",
            ]
            if args.trainer.enabled:
                plugins += ["trainer-controller", "jobset-controller"]
            if args.cost is not None:
                plugins.append("opencost")
            if args.gpu_pools:
                plugins += ["gpu-operator", "node-feature-discovery-master"]
            if args.pools_with_fabric("infiniband") and args.infiniband is not None:
                plugins.append("network-operator")
            if args.serving is not None:
                plugins += ["cert-manager", "kserve-controller"]
                if args.serving.install_metrics_server:
                    plugins.append("metrics-server")
            if args.eks is not None:
                plugins.append("cluster-autoscaler")
                if args.eks.fsx is not None:
                    plugins.append("fsx-csi-controller")
            # -- tracking (MLflow) --
            if args.tracking_enabled:
                plugins.append("mlflow-server")
                if args.eks is None:
                    plugins += ["cloudnative-pg-operator", "postgresql (mlflow-db)"]
        if pool.has_gpus:
            if onprem is not None and onprem.install_gpu_driver:
                plugins.append("nvidia-driver")
            if onprem is not None and onprem.install_container_toolkit:
                plugins.append("nvidia-container-toolkit")
            plugins += ["nvidia-device-plugin", "gpu-feature-discovery", "dcgm-exporter"]
            if pool.gpu_sharing == "mig":
                plugins.append("mig-manager")
        plugins += fabric_plugins(pool, args.infiniband)
        result[pool.name] = plugins
    return result


def installed_charts(args: KubernetesPlatformArgs) -> dict[str, Chart]:
    """Helm release name -> the pinned chart, for the charts this stack installs."""
    charts = {
        "cert-manager": CERT_MANAGER,
        "kube-prometheus-stack": KUBE_PROMETHEUS_STACK,
        "kueue": KUEUE,
    }
    if args.trainer.enabled:
        charts["kubeflow-trainer"] = KUBEFLOW_TRAINER
    if args.gpu_pools:
        charts["gpu-operator"] = GPU_OPERATOR
    if args.cost is not None:
        charts["opencost"] = OPENCOST
    if args.eks is not None:
        charts["cluster-autoscaler"] = CLUSTER_AUTOSCALER
        if args.pools_with_fabric("efa"):
            charts["aws-efa-k8s-device-plugin"] = EFA_DEVICE_PLUGIN
        if args.eks.fsx is not None:
            charts["aws-fsx-csi-driver"] = FSX_CSI_DRIVER
    if args.infiniband is not None and args.pools_with_fabric("infiniband"):
        charts["network-operator"] = NETWORK_OPERATOR
    # -- tracking (MLflow) --
    if args.tracking_enabled:
        charts["mlflow"] = MLFLOW
        if args.eks is None:
            charts["cloudnative-pg"] = CLOUDNATIVE_PG
    if args.serving is not None:
        charts |= {"kserve-crd": KSERVE_CRD, "kserve": KSERVE}
        if args.serving.install_metrics_server:
            charts["metrics-server"] = METRICS_SERVER
    return charts
