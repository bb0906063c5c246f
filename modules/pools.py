"""What every layer needs to know about a node pool, independent of who created it.

The AWS foundation builds a `NodePoolProfile` for each pool it creates (from the
instance-type catalog); an on-premises stack declares its pools in config. The
Kubernetes layer reads profiles to decide which plugins, flavors and quotas a pool
gets, and the workloads read them to request what a node offers. Labels and taints
are derived here once, so the three layers cannot disagree about them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Fabric = Literal["efa", "infiniband", "none"]
PoolRole = Literal["system", "gpu", "preprocess", "cpu-training"]
GpuSharing = Literal["none", "time-slicing", "mig"]

LABEL_PREFIX = "gpuplatform.ae"
POOL_LABEL = f"{LABEL_PREFIX}/pool"
ROLE_LABEL = f"{LABEL_PREFIX}/role"
FABRIC_LABEL = f"{LABEL_PREFIX}/fabric"
ACCELERATOR_LABEL = f"{LABEL_PREFIX}/accelerator"
GPU_TAINT_KEY = "nvidia.com/gpu"
# The GPU Operator's device plugin picks its per-node configuration (time-slicing
# replicas, MIG devices) by this label; the MIG manager applies the MIG layout by the other.
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
FABRIC_TAINT_KEY = f"{LABEL_PREFIX}/fabric"


@dataclass(frozen=True)
class Taint:
    """A Kubernetes node taint (`key=value:effect`)."""

    key: str
    value: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


@dataclass(frozen=True)
class NodePoolProfile:
    """A node pool as the Kubernetes layer and the workloads see it.

    Args:
        name: pool name, unique in the stack (e.g. ``gpu-p5en``); used in labels.
        role: what the pool is for: ``system`` (platform services), ``gpu``,
            ``preprocess`` or ``cpu-training``.
        instance_type: EC2 instance type, or ``None`` for on-premises nodes.
        vcpus: vCPUs per node.
        memory_gib: memory per node in GiB.
        gpus_per_node: NVIDIA GPUs per node (0 for CPU pools).
        accelerator: GPU model label value, e.g. ``nvidia-h200`` (``None`` for CPU pools).
        gpu_memory_gib: memory of one GPU in GiB (0 for CPU pools).
        fabric: the RDMA fabric between nodes: ``efa``, ``infiniband`` or ``none``.
        efa_interfaces: EFA devices per node (the instance type's network cards).
        rdma_resource: extended resource name of the RDMA device plugin on
            InfiniBand pools (e.g. ``rdma/ib``), ``None`` elsewhere.
        rdma_per_node: how many of ``rdma_resource`` one pod may request.
        min_size: minimum node count (0 lets an idle pool cost nothing).
        max_size: maximum node count.
        gpu_sharing: ``none``, ``time-slicing`` or ``mig`` for small GPUs.
        gpu_replicas: time-slicing replicas per GPU (when ``gpu_sharing`` is time-slicing).
        mig_strategy_profile: MIG profile name (when ``gpu_sharing`` is mig), e.g. ``all-1g.10gb``.
        zones: availability zones (or on-prem racks) the pool's nodes live in.
    """

    name: str
    role: PoolRole
    instance_type: str | None
    vcpus: int
    memory_gib: int
    gpus_per_node: int = 0
    accelerator: str | None = None
    gpu_memory_gib: int = 0
    fabric: Fabric = "none"
    efa_interfaces: int = 0
    rdma_resource: str | None = None
    rdma_per_node: int = 0
    min_size: int = 0
    max_size: int = 1
    gpu_sharing: GpuSharing = "none"
    gpu_replicas: int = 1
    mig_strategy_profile: str | None = None
    zones: tuple[str, ...] = field(default_factory=tuple)

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def labels(self) -> dict[str, str]:
        """Node labels every layer selects on (pool, role, fabric, accelerator, and the
        GPU sharing configuration where the pool shares its GPUs)."""
        labels = {POOL_LABEL: self.name, ROLE_LABEL: self.role, FABRIC_LABEL: self.fabric}
        if self.accelerator:
            labels[ACCELERATOR_LABEL] = self.accelerator
        return labels | self.gpu_sharing_labels

    @property
    def gpu_sharing_labels(self) -> dict[str, str]:
        """Labels selecting the pool's GPU sharing configuration (empty when none)."""
        if not self.has_gpus or self.gpu_sharing == "none":
            return {}
        labels = {DEVICE_PLUGIN_CONFIG_LABEL: self.name}
        if self.gpu_sharing == "mig" and self.mig_strategy_profile:
            labels[MIG_CONFIG_LABEL] = self.mig_strategy_profile
        return labels

    @property
    def taints(self) -> tuple[Taint, ...]:
        """GPU nodes repel non-GPU pods; fabric nodes also repel pods that did not ask
        for the fabric, so EFA/IB pools and plain pools cannot be mixed by accident."""
        taints: list[Taint] = []
        if self.has_gpus:
            taints.append(Taint(GPU_TAINT_KEY, "true"))
        if self.fabric != "none":
            taints.append(Taint(FABRIC_TAINT_KEY, self.fabric))
        return tuple(taints)
