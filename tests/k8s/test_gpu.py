"""GPU Operator values and its configuration objects."""

from __future__ import annotations

import yaml

from modules.k8s.gpu.spec import (
    DCGM_METRICS_CONFIGMAP,
    DCGM_METRICS_FILE,
    DEVICE_PLUGIN_CONFIGMAP,
    dcgm_metrics_csv,
    device_plugin_configs,
    gpu_configmaps,
    gpu_operator_values,
)
from modules.pools import GPU_TAINT_KEY
from tests.k8s.fixtures import G6, IB, MIG, P5EN, SYSTEM
from tests.k8s.programs import registrations, releases

GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def test_eks_amis_bring_driver_and_toolkit_so_the_operator_installs_neither() -> None:
    values = releases(registrations("eks"))["gpu-operator"]["values"]
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is False


def test_on_prem_the_operator_installs_driver_and_toolkit() -> None:
    values = releases(registrations("onprem"))["gpu-operator"]["values"]
    assert values["driver"]["enabled"] is True
    assert values["toolkit"]["enabled"] is True


def test_dcgm_exporter_runs_on_gpu_nodes_with_the_gpu_taint_tolerated() -> None:
    values = gpu_operator_values((SYSTEM, P5EN), install_driver=False, install_toolkit=False)
    # Operands (device plugin, GFD, DCGM exporter) are scheduled by the operator onto
    # nodes with an NVIDIA GPU only; they must tolerate the GPU and fabric taints there.
    assert GPU_TOLERATION in values["daemonsets"]["tolerations"]
    assert {"key": "gpuplatform.ae/fabric", "operator": "Exists", "effect": "NoSchedule"} in values[
        "daemonsets"
    ]["tolerations"]
    # Node feature discovery must label tainted GPU nodes too, or no operand lands there.
    assert GPU_TOLERATION in values["node-feature-discovery"]["worker"]["tolerations"]
    exporter = values["dcgmExporter"]
    assert exporter["enabled"] is True
    assert exporter["serviceMonitor"] == {"enabled": True, "interval": "30s", "honorLabels": True}
    env = {e["name"]: e["value"] for e in exporter["env"]}
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"  # per-pod attribution
    assert env["DCGM_EXPORTER_COLLECTORS"] == f"/etc/dcgm-exporter/{DCGM_METRICS_FILE}"
    assert exporter["config"]["name"] == DCGM_METRICS_CONFIGMAP


def test_controllers_run_on_the_system_pool() -> None:
    values = gpu_operator_values((SYSTEM, P5EN), install_driver=False, install_toolkit=False)
    terms = values["operator"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "gpuplatform.ae/role", "operator": "In", "values": ["system"]}
            ]
        }
    ]
    assert values["node-feature-discovery"]["master"]["nodeSelector"] == {
        "gpuplatform.ae/role": "system"
    }


def test_dcgm_collects_every_metric_the_dashboard_and_alerts_use() -> None:
    fields = {
        line.split(",")[0] for line in dcgm_metrics_csv().splitlines() if not line.startswith("#")
    }
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    } <= fields
    for line in dcgm_metrics_csv().splitlines()[1:]:
        assert line.split(", ")[1] in ("gauge", "counter", "label")


def test_gpu_sharing_is_configured_per_pool() -> None:
    configs = {
        name: yaml.safe_load(text)
        for name, text in device_plugin_configs((SYSTEM, P5EN, G6, MIG)).items()
    }
    assert set(configs) == {"default", "gpu-g6", "gpu-mig"}
    assert configs["default"]["flags"]["migStrategy"] == "none"
    slicing = configs["gpu-g6"]["sharing"]["timeSlicing"]["resources"]
    assert slicing == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert configs["gpu-mig"]["flags"]["migStrategy"] == "single"
    assert G6.gpu_sharing_labels == {"nvidia.com/device-plugin.config": "gpu-g6"}
    assert MIG.gpu_sharing_labels == {
        "nvidia.com/device-plugin.config": "gpu-mig",
        "nvidia.com/mig.config": "all-1g.10gb",
    }
    assert P5EN.gpu_sharing_labels == {}


def test_mig_manager_only_where_a_pool_uses_mig() -> None:
    assert gpu_operator_values((SYSTEM, P5EN), False, False)["migManager"]["enabled"] is False
    assert gpu_operator_values((SYSTEM, IB, MIG), True, True)["migManager"]["enabled"] is True


def test_configmaps_live_in_the_operator_namespace() -> None:
    maps = gpu_configmaps((SYSTEM, G6))
    assert {m["metadata"]["name"] for m in maps} == {
        DEVICE_PLUGIN_CONFIGMAP,
        DCGM_METRICS_CONFIGMAP,
    }
    assert {m["metadata"]["namespace"] for m in maps} == {"gpu-operator"}


def test_a_single_sharing_pool_needs_no_node_label() -> None:
    values = gpu_operator_values((SYSTEM, G6), install_driver=False, install_toolkit=False)
    assert values["devicePlugin"]["config"]["default"] == "gpu-g6"
    mixed = gpu_operator_values((SYSTEM, G6, P5EN), install_driver=False, install_toolkit=False)
    assert mixed["devicePlugin"]["config"]["default"] == "default"


def test_mig_layout_defaults_to_the_profile_only_when_every_gpu_pool_uses_it() -> None:
    assert gpu_operator_values((SYSTEM, MIG), True, True)["migManager"]["config"]["default"] == (
        "all-1g.10gb"
    )
    assert gpu_operator_values((SYSTEM, IB, MIG), True, True)["migManager"]["config"][
        "default"
    ] == ("all-disabled")
