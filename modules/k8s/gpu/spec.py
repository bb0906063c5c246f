"""GPU enablement: the NVIDIA GPU Operator.

The operator runs the device plugin (``nvidia.com/gpu``), GPU feature discovery, the
DCGM exporter and, where a pool uses MIG, the MIG manager, on GPU nodes only (it finds
them through node feature discovery). On EKS the NVIDIA AMIs ship the driver and the
container toolkit, so the operator installs neither; on premises it installs both unless
config says the hosts have them.

GPU sharing is set per pool: the device plugin reads a named configuration from a
ConfigMap, and a node picks its configuration with the label
``nvidia.com/device-plugin.config=<pool>`` (MIG nodes also carry
``nvidia.com/mig.config=<profile>``); `NodePoolProfile.labels` carries those labels, so
the node pool definitions set them. Where every GPU pool shares the same way (a stack
with one time-sliced pool), that configuration is also the default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from modules.k8s import netpol
from modules.k8s.common import (
    Manifest,
    PlatformNamespace,
    metadata,
    pool_taint_tolerations,
    required_node_affinity,
    system_node_selector,
)
from modules.k8s.mirror import mirror_path
from modules.k8s.names import GPU_OPERATOR_NAMESPACE
from modules.k8s.versions import GPU_OPERATOR
from modules.pools import ROLE_LABEL, NodePoolProfile
from modules.validation import Checker, Problem

DEVICE_PLUGIN_CONFIGMAP = "gpuplatform-device-plugin-config"
DEFAULT_DEVICE_PLUGIN_CONFIG = "default"
DCGM_METRICS_CONFIGMAP = "gpuplatform-dcgm-metrics"
DCGM_METRICS_FILE = "dcgm-metrics.csv"

#: DCGM fields the exporter publishes: (field, Prometheus type, help). The exporter's
#: default list lacks SM activity, uncorrected ECC, NVLink traffic and the throttling
#: counters the dashboard and the alerts use, so the platform ships its own list.
DCGM_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "Ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "Ratio of warps resident on an SM."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles device memory is active."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power (in us)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal (in us)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit (uncorrected) volatile ECC errors."),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Rows remapped for uncorrectable errors.",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "NVLink transmitted bytes per second."),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "NVLink received bytes per second."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe transmitted bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe received bytes per second."),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver version."),
)


def dcgm_metrics_csv() -> str:
    """The DCGM exporter's collector list, in its CSV format."""
    lines = ["# DCGM field, Prometheus metric type, help message"]
    lines += [f"{field}, {kind}, {help_text}" for field, kind, help_text in DCGM_FIELDS]
    return "\n".join(lines) + "\n"


def device_plugin_configs(pools: Sequence[NodePoolProfile]) -> dict[str, str]:
    """Device plugin configurations by name: ``default`` (whole GPUs) and one per pool
    that shares its GPUs (time-slicing replicas, or MIG devices as ``nvidia.com/gpu``)."""
    configs = {
        DEFAULT_DEVICE_PLUGIN_CONFIG: {"version": "v1", "flags": {"migStrategy": "none"}},
    }
    for pool in pools:
        if not pool.has_gpus or pool.gpu_sharing == "none":
            continue
        if pool.gpu_sharing == "time-slicing":
            configs[pool.name] = {
                "version": "v1",
                "flags": {"migStrategy": "none"},
                "sharing": {
                    "timeSlicing": {
                        "resources": [{"name": "nvidia.com/gpu", "replicas": pool.gpu_replicas}]
                    }
                },
            }
        else:
            configs[pool.name] = {"version": "v1", "flags": {"migStrategy": "single"}}
    return {name: yaml.safe_dump(config, sort_keys=False) for name, config in configs.items()}


# `privileged`: the operator's node agents (driver and toolkit installers, device plugin,
# DCGM exporter, MIG manager) need host paths, host PID and privileged containers to
# manage the GPUs. No team can run pods here.
GPU_OPERATOR_NS = PlatformNamespace(
    GPU_OPERATOR_NAMESPACE,
    "privileged",
    "GPU Operator node agents need host access and privileged containers",
)


def default_device_plugin_config(pools: Sequence[NodePoolProfile]) -> str:
    """The configuration a GPU node without a config label gets: when every GPU pool
    shares its GPUs the same way (e.g. one time-sliced pool), that pool's, so no node
    label is needed; otherwise whole GPUs, and sharing pools need their node labels."""
    sharing = {p.name for p in pools if p.has_gpus and p.gpu_sharing != "none"}
    gpu_pools = {p.name for p in pools if p.has_gpus}
    if len(sharing) == 1 and sharing == gpu_pools:
        return sharing.pop()
    return DEFAULT_DEVICE_PLUGIN_CONFIG


def default_mig_config(pools: Sequence[NodePoolProfile]) -> str:
    """The MIG layout of nodes without a ``nvidia.com/mig.config`` label: the profile,
    when every GPU pool uses the same one; else MIG stays off (``all-disabled``)."""
    profiles = {
        p.mig_strategy_profile if p.gpu_sharing == "mig" else None for p in pools if p.has_gpus
    }
    if len(profiles) == 1:
        (profile,) = profiles
        if profile:
            return profile
    return "all-disabled"


def gpu_configmaps(pools: Sequence[NodePoolProfile]) -> list[Manifest]:
    """The device plugin configurations and the DCGM exporter's metric list."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(DEVICE_PLUGIN_CONFIGMAP, GPU_OPERATOR_NAMESPACE),
            "data": device_plugin_configs(pools),
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(DCGM_METRICS_CONFIGMAP, GPU_OPERATOR_NAMESPACE),
            "data": {DCGM_METRICS_FILE: dcgm_metrics_csv()},
        },
    ]


#: Accelerators the CC manager can switch: the Hopper GPUs of its CC_CAPABLE_DEVICE_IDS
#: (GPU Operator v25.10.1 values.yaml: 0x2330 H100 SXM5 80GB, 0x2331 H100 PCIe, 0x2322
#: and 0x2324 H800, 0x2339 and 0x233d H100/H200 variants), by the pools' accelerator label.
CC_CAPABLE_ACCELERATORS = ("nvidia-h100", "nvidia-h200", "nvidia-h800")
#: The node label the CC manager reads: the mode it puts the node's GPUs in.
CC_MODE_NODE_LABEL = "nvidia.com/cc.mode"


@dataclass(frozen=True)
class ConfidentialComputingSpec:
    """Confidential computing on premises (config key
    ``uae-gpu-platform:confidentialComputing``): the GPU Operator's CC manager runs on
    the listed pools' nodes and puts the GPUs of each node labelled
    ``nvidia.com/cc.mode=on`` in confidential-computing mode (nodes without the label
    stay ``off``). The site labels the nodes, as it labels their pool.

    Args:
        pools: the GPU pools whose nodes may run in CC mode (Hopper GPUs, on hosts with
            AMD SEV-SNP or Intel TDX, which node feature discovery reports).
    """

    pools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check = Checker()
        check.require(bool(self.pools), "pools", [], "name at least one GPU pool")
        check.done()


def confidential_computing_problems(
    spec: ConfidentialComputingSpec | None, pools: Sequence[NodePoolProfile]
) -> list[Problem]:
    """Each pool named exists, has GPUs, and they are ones the CC manager can switch."""
    if spec is None:
        return []
    check = Checker()
    by_name = {p.name: p for p in pools}
    for i, name in enumerate(spec.pools):
        pool = by_name.get(name)
        key = f"confidential_computing.pools[{i}]"
        if pool is None:
            check.require(False, key, name, f"one of the GPU pools: {', '.join(by_name)}")
            continue
        check.require(
            pool.has_gpus and pool.accelerator in CC_CAPABLE_ACCELERATORS,
            key,
            name,
            f"a pool of {', '.join(CC_CAPABLE_ACCELERATORS)} GPUs (the CC manager's "
            f"capable devices); {name} has {pool.accelerator or 'no GPUs'}",
        )
    return check.problems


#: The GPU Operator's images (chart v25.10.1's values.yaml, vendored), by the values key
#: that names each as ``<repository>/<image>:<version>`` -> (upstream repository, image,
#: version); the operator's and validator's version is the chart's appVersion (the
#: release), the driver's gets the node OS appended by the operator
#: (``580.105.08-ubuntu22.04``). The NFD subchart's image is apart (`NFD_IMAGE`).
GPU_OPERATOR_IMAGES: dict[str, tuple[str, str, str]] = {
    "operator": ("nvcr.io/nvidia", "gpu-operator", GPU_OPERATOR.version),
    "validator": ("nvcr.io/nvidia", "gpu-operator", GPU_OPERATOR.version),
    "operator.initContainer": ("nvcr.io/nvidia", "cuda", "13.0.1-base-ubi9"),
    "driver": ("nvcr.io/nvidia", "driver", "580.105.08"),
    "driver.manager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.9.1"),
    "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.18.1"),
    "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.1"),
    "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.1"),
    "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.4.2-4.7.0-distroless"),
    "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.13.1"),
    "ccManager": ("nvcr.io/nvidia/cloud-native", "k8s-cc-manager", "v0.1.1"),
}
#: Node Feature Discovery, the chart's subchart v0.18.2 (its image's tag: that appVersion).
NFD_IMAGE = ("registry.k8s.io/nfd/node-feature-discovery", "v0.18.2")


def gpu_operator_repositories(
    install_driver: bool, install_toolkit: bool, uses_mig: bool, cc: bool
) -> list[str]:
    """The mirror's repositories the operator pulls from with these components on."""
    off = {"driver", "driver.manager"} if not install_driver else set()
    off |= {"toolkit"} if not install_toolkit else set()
    off |= {"migManager"} if not uses_mig else set()
    off |= {"ccManager"} if not cc else set()
    paths = [
        mirror_path(f"{r}/{i}") for key, (r, i, _) in GPU_OPERATOR_IMAGES.items() if key not in off
    ]
    return list(dict.fromkeys([*paths, mirror_path(NFD_IMAGE[0])]))


def _mirrored(values: dict[str, Any], registry: str) -> None:
    """Point every image of ``values`` at ``registry`` (the chart's own image names and
    versions kept), pulled at each start."""
    for key, (repository, _, _) in GPU_OPERATOR_IMAGES.items():
        node = values
        for part in key.split("."):
            node = node.setdefault(part, {})
        node["repository"] = f"{registry}/{mirror_path(repository)}"
        node["imagePullPolicy"] = "Always"
    nfd = values.setdefault("node-feature-discovery", {})
    # Its tag stays the subchart's appVersion (`NFD_IMAGE`): ``tag`` is not a key of its
    # values.yaml (only a comment there).
    nfd["image"] = {
        "repository": f"{registry}/{mirror_path(NFD_IMAGE[0])}",
        "pullPolicy": "Always",
    }


def gpu_operator_values(
    pools: Sequence[NodePoolProfile],
    install_driver: bool,
    install_toolkit: bool,
    scrape_interval_seconds: int = 30,
    cc_pools: Sequence[str] = (),
    *,
    registry: str | None = None,
) -> dict[str, Any]:
    """Values of the GPU Operator chart.

    Node agents tolerate the GPU and fabric taints (they must run on those nodes and only
    there: the operator schedules them on nodes with an NVIDIA GPU). Controllers run on
    the system pool. The DCGM exporter maps GPUs to pods (``pod``/``namespace`` labels)
    and is scraped through its ServiceMonitor, keeping those labels (``honorLabels``).
    With ``registry`` (on AWS the stack's ECR) every image comes from that mirror
    (`GPU_OPERATOR_IMAGES`, `NFD_IMAGE`).
    """
    uses_mig = any(p.has_gpus and p.gpu_sharing == "mig" for p in pools)
    values: dict[str, Any] = {
        "operator": {
            "affinity": {"nodeAffinity": required_node_affinity(ROLE_LABEL, ["system"])},
        },
        "daemonsets": {
            "tolerations": pool_taint_tolerations(),
            "priorityClassName": "system-node-critical",
        },
        "nfd": {"enabled": True},
        "node-feature-discovery": {
            "master": {"nodeSelector": system_node_selector()},
            "gc": {"nodeSelector": system_node_selector()},
            "worker": {"tolerations": pool_taint_tolerations()},
        },
        "driver": {"enabled": install_driver},
        "toolkit": {"enabled": install_toolkit},
        "devicePlugin": {
            "enabled": True,
            "config": {
                "create": False,
                "name": DEVICE_PLUGIN_CONFIGMAP,
                "default": default_device_plugin_config(pools),
            },
        },
        "gfd": {"enabled": True},
        "mig": {"strategy": "single"},
        "migManager": {"enabled": uses_mig, "config": {"default": default_mig_config(pools)}},
        "dcgmExporter": {
            "enabled": True,
            "config": {"name": DCGM_METRICS_CONFIGMAP},
            "env": [
                {"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                {
                    "name": "DCGM_EXPORTER_COLLECTORS",
                    "value": f"/etc/dcgm-exporter/{DCGM_METRICS_FILE}",
                },
            ],
            "serviceMonitor": {
                "enabled": True,
                "interval": f"{scrape_interval_seconds}s",
                "honorLabels": True,
            },
        },
    }
    if cc_pools:
        # The CC manager DaemonSet (on nodes NFD labels nvidia.com/cc.capable: Hopper
        # GPUs on an SEV-SNP or TDX host) sets each node's GPUs to the mode its
        # nvidia.com/cc.mode label asks for; "off" for nodes without one, so only the
        # nodes the site labels switch (a mode change resets the GPUs).
        values["ccManager"] = {"enabled": True, "defaultMode": "off"}
    if registry is not None:
        _mirrored(values, registry)
    return values


#: The DCGM exporter's metrics port (its ServiceMonitor scrapes it).
DCGM_EXPORTER_PORT = 9400


def gpu_operator_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """The operator and its node agents (device plugin, feature discovery, validator,
    MIG manager) reach DNS and the API server; Prometheus scrapes the DCGM exporter.
    Nothing else: a driver container that would download packages from outside the
    site is refused (use the nodes' driver, or a precompiled driver image)."""
    ns = GPU_OPERATOR_NAMESPACE
    return [*netpol.baseline(ns, network), netpol.allow_scrape(ns, netpol.tcp(DCGM_EXPORTER_PORT))]
