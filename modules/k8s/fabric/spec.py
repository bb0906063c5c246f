"""Fabric: the RDMA network between GPU nodes.

* EKS: the AWS EFA device plugin advertises ``vpc.amazonaws.com/efa`` on EFA pools only:
  its DaemonSet selects ``gpuplatform.ae/fabric=efa`` (instead of the chart's own list
  of instance types, so a new EFA instance family needs no chart change) and tolerates
  the GPU and fabric taints. Its image comes from the EKS add-on registry of the stack's
  own region.
* On premises: the NVIDIA Network Operator with a NicClusterPolicy that runs the RDMA
  shared device plugin on InfiniBand pools only (advertising the resource named in
  config, e.g. ``rdma/ib``), optionally the DOCA-OFED driver container, and optionally
  an IPoIB secondary network (Multus, IPoIB CNI, NVIDIA IPAM) attached per team.

Which fabric a pool has is `NodePoolProfile.fabric`; the workloads read the same field to
set their NCCL environment.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any

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
from modules.k8s.names import NETWORK_OPERATOR_NAMESPACE, secondary_network_name, team_namespace
from modules.k8s.versions import (
    DOCA_OFED_DRIVER_VERSION,
    EKS_ADDON_REGISTRIES,
    NETWORK_OPERATOR_COMPONENT_TAG,
    NETWORK_OPERATOR_IMAGE_REPOSITORY,
)
from modules.pools import FABRIC_LABEL, NodePoolProfile
from modules.validation import Checker, TextFormat

_RESOURCE_NAME = TextFormat(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-zA-Z0-9]([-_a-zA-Z0-9]*)$",
    "use <prefix>/<name>, e.g. rdma/ib",
)
_HEX_ID = TextFormat(r"^[0-9a-f]{4}$", "4 lowercase hex digits")
_INTERFACE = re.compile(r"^[a-zA-Z0-9_.-]{1,15}$")
_INTERFACE_NAME = TextFormat(_INTERFACE.pattern, "an interface name")
_SECONDARY_INTERFACE = TextFormat(_INTERFACE.pattern, "an interface name such as ib0")

IB_POOL_NAME = "ib-pool"
MELLANOX_API = "mellanox.com/v1alpha1"


@dataclass(frozen=True)
class InfinibandSpec:
    """InfiniBand on an on-premises cluster (config key ``uae-gpu-platform:infiniband``).

    Args:
        resource_name: extended resource of the RDMA shared device plugin, as
            ``<prefix>/<name>`` (default ``rdma/ib``); every InfiniBand pool's
            ``rdma_resource`` must be this name.
        hca_vendor_ids: PCI vendor ids of the HCAs to expose (default ``15b3``: NVIDIA
            Mellanox).
        hca_device_ids: PCI device ids to narrow the selection (default: any).
        interface_names: network interfaces to expose (default: any matching HCA).
        max_pods_per_hca: how many pods may share one HCA (default 63).
        install_ofed_driver: run the DOCA-OFED driver container (default false: the
            hosts have the driver installed).
        secondary_network: attach an IPoIB secondary network to team pods (default false).
        secondary_network_interface: the IPoIB parent interface (default ``ib0``).
        secondary_network_cidr: IPv4 range the secondary network hands out addresses
            from (default ``192.168.100.0/22``).
        secondary_network_block_size: addresses reserved per node (default 64).
    """

    resource_name: str = "rdma/ib"
    hca_vendor_ids: tuple[str, ...] = ("15b3",)
    hca_device_ids: tuple[str, ...] = ()
    interface_names: tuple[str, ...] = ()
    max_pods_per_hca: int = 63
    install_ofed_driver: bool = False
    secondary_network: bool = False
    secondary_network_interface: str = "ib0"
    secondary_network_cidr: str = "192.168.100.0/22"
    secondary_network_block_size: int = 64

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("resource_name", self.resource_name, _RESOURCE_NAME)
        check.require(
            bool(self.hca_vendor_ids), "hca_vendor_ids", self.hca_vendor_ids, "name a vendor"
        )
        for field in ("hca_vendor_ids", "hca_device_ids"):
            for i, value in enumerate(getattr(self, field)):
                check.matches(f"{field}[{i}]", value, _HEX_ID)
        for i, value in enumerate(self.interface_names):
            check.matches(f"interface_names[{i}]", value, _INTERFACE_NAME)
        check.within("max_pods_per_hca", self.max_pods_per_hca, 1, 1000)
        check.matches(
            "secondary_network_interface",
            self.secondary_network_interface,
            _SECONDARY_INTERFACE,
        )
        try:
            network = ipaddress.IPv4Network(self.secondary_network_cidr, strict=True)
            check.require(
                network.prefixlen <= 28,
                "secondary_network_cidr",
                self.secondary_network_cidr,
                "use a /28 or larger range",
            )
            block_ok = 4 <= self.secondary_network_block_size <= network.num_addresses
        except ValueError:
            check.require(
                False,
                "secondary_network_cidr",
                self.secondary_network_cidr,
                "expected an IPv4 CIDR such as 192.168.100.0/22",
            )
            block_ok = True
        check.require(
            block_ok,
            "secondary_network_block_size",
            self.secondary_network_block_size,
            "use 4 up to the size of secondary_network_cidr",
        )
        check.done()

    @property
    def resource_prefix(self) -> str:
        return self.resource_name.split("/", 1)[0]

    @property
    def resource_short_name(self) -> str:
        return self.resource_name.split("/", 1)[1]


def efa_image_registry(region: str) -> str | None:
    """The in-region EKS add-on registry, or ``None`` where none is known."""
    return EKS_ADDON_REGISTRIES.get(region)


def efa_device_plugin_values(region: str) -> dict[str, Any]:
    """Values of the EFA device plugin chart: on EFA pools only."""
    values: dict[str, Any] = {
        "nodeSelector": {FABRIC_LABEL: "efa"},
        # The chart requires nodes to match these labels; select by our fabric label.
        "supportedInstanceLabels": {"keys": [FABRIC_LABEL], "values": ["efa"]},
        "tolerations": pool_taint_tolerations(),
    }
    registry = efa_image_registry(region)
    if registry is not None:
        values["image"] = {"repository": f"{registry}/eks/aws-efa-k8s-device-plugin"}
    return values


# `privileged`: the operator's node agents load drivers (DOCA-OFED), install CNI binaries
# on the host and register device plugins through host paths.
NETWORK_OPERATOR_NS = PlatformNamespace(
    NETWORK_OPERATOR_NAMESPACE,
    "privileged",
    "Network Operator node agents install drivers and CNI plugins on the host",
)


def network_operator_values(registry: str | None = None) -> dict[str, Any]:
    """Values of the Network Operator chart (keys checked against its values.yaml at
    v26.4.1): the operator on the system pool and no second node feature discovery (the
    GPU Operator's labels the Mellanox NICs as well). The chart has deployed no
    NicClusterPolicy since 2024 (upstream commit 8fc96f20 removed ``deployCR``); the
    platform writes its own (`nic_cluster_policy`). With ``registry`` the operator's
    image and its driver init container's come from that mirror, under their upstream
    repository paths."""
    operator: dict[str, Any] = {"nodeSelector": system_node_selector()}
    if registry is not None:
        operator["repository"] = f"{registry}/{mirror_path(NETWORK_OPERATOR_CHART_REPOSITORY)}"
        operator["ofedDriver"] = {
            "initContainer": {
                "repository": f"{registry}/{mirror_path(NETWORK_OPERATOR_IMAGE_REPOSITORY)}"
            }
        }
    return {
        "nfd": {"enabled": False},
        "sriovNetworkOperator": {"enabled": False},
        "operator": operator,
    }


#: The operator's own image repository (the chart's ``operator.repository``).
NETWORK_OPERATOR_CHART_REPOSITORY = "nvcr.io/nvidia/cloud-native"


def network_operator_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """The operator and the NVIDIA IPAM controller reach DNS and the API server; the
    node agents (device plugin, Multus, IPoIB CNI, the driver) use the host's network,
    which NetworkPolicies do not govern. No admission webhook is enabled."""
    return netpol.baseline(NETWORK_OPERATOR_NAMESPACE, network)


def _repository(registry: str | None) -> str:
    """Where the NicClusterPolicy's components come from: the mirror, or NVIDIA's."""
    if registry is None:
        return NETWORK_OPERATOR_IMAGE_REPOSITORY
    return f"{registry}/{mirror_path(NETWORK_OPERATOR_IMAGE_REPOSITORY)}"


def _image(name: str, registry: str | None = None) -> dict[str, str]:
    return {
        "image": name,
        "repository": _repository(registry),
        "version": NETWORK_OPERATOR_COMPONENT_TAG,
    }


def rdma_shared_device_plugin_config(spec: InfinibandSpec) -> str:
    """The RDMA shared device plugin's configuration (JSON)."""
    selectors: dict[str, list[str]] = {"vendors": list(spec.hca_vendor_ids)}
    if spec.hca_device_ids:
        selectors["deviceIDs"] = list(spec.hca_device_ids)
    if spec.interface_names:
        selectors["ifNames"] = list(spec.interface_names)
    return json.dumps(
        {
            "configList": [
                {
                    "resourceName": spec.resource_short_name,
                    "resourcePrefix": spec.resource_prefix,
                    "rdmaHcaMax": spec.max_pods_per_hca,
                    "selectors": selectors,
                }
            ]
        },
        indent=2,
    )


def nic_cluster_policy(spec: InfinibandSpec, registry: str | None = None) -> Manifest:
    """The NicClusterPolicy: RDMA device plugin (and driver, secondary network) on
    InfiniBand pools only; every component's image from ``registry`` where given (the
    add-ons' mirror, under NVIDIA's repository path)."""
    policy: dict[str, Any] = {
        "nodeAffinity": required_node_affinity(FABRIC_LABEL, ["infiniband"]),
        "tolerations": pool_taint_tolerations(),
        "rdmaSharedDevicePlugin": {
            **_image("k8s-rdma-shared-dev-plugin", registry),
            "config": rdma_shared_device_plugin_config(spec),
        },
    }
    if spec.install_ofed_driver:
        policy["ofedDriver"] = {
            "image": "doca-driver",
            "repository": _repository(registry),
            "version": DOCA_OFED_DRIVER_VERSION,
            "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1},
        }
    if spec.secondary_network:
        policy["secondaryNetwork"] = {
            "cniPlugins": _image("plugins", registry),
            "multus": _image("multus-cni", registry),
            "ipoib": _image("ipoib-cni", registry),
        }
        policy["nvIpam"] = {**_image("nvidia-k8s-ipam", registry), "enableWebhook": False}
    return {
        "apiVersion": MELLANOX_API,
        "kind": "NicClusterPolicy",
        "metadata": metadata("nic-cluster-policy"),
        "spec": policy,
    }


def ib_ip_pool(spec: InfinibandSpec) -> Manifest:
    """The NVIDIA IPAM pool of the IPoIB secondary network, on InfiniBand nodes."""
    return {
        "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
        "kind": "IPPool",
        "metadata": metadata(IB_POOL_NAME, NETWORK_OPERATOR_NAMESPACE),
        "spec": {
            "subnet": spec.secondary_network_cidr,
            "perNodeBlockSize": spec.secondary_network_block_size,
            "nodeSelector": required_node_affinity(FABRIC_LABEL, ["infiniband"])[
                "requiredDuringSchedulingIgnoredDuringExecution"
            ],
        },
    }


def ipoib_network(team: str, spec: InfinibandSpec) -> Manifest:
    """An IPoIB network in the team's namespace (the operator writes the
    NetworkAttachmentDefinition of the same name there)."""
    return {
        "apiVersion": MELLANOX_API,
        "kind": "IPoIBNetwork",
        "metadata": metadata(secondary_network_name(team)),
        "spec": {
            "networkNamespace": team_namespace(team),
            "master": spec.secondary_network_interface,
            "ipam": json.dumps({"type": "nv-ipam", "poolName": IB_POOL_NAME}),
        },
    }


def fabric_plugins(pool: NodePoolProfile, spec: InfinibandSpec | None) -> list[str]:
    """The fabric agents that land on ``pool`` (for the plan summary)."""
    if pool.fabric == "efa":
        return ["aws-efa-k8s-device-plugin"]
    if pool.fabric == "infiniband":
        plugins = ["rdma-shared-device-plugin"]
        if spec is not None and spec.install_ofed_driver:
            plugins.append("doca-ofed-driver")
        if spec is not None and spec.secondary_network:
            plugins += ["multus", "ipoib-cni", "nv-ipam"]
        return plugins
    return []
