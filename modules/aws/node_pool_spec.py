"""A node pool as the stack file declares it (the typed args of `NodePool`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from modules.validation import Checker, TextFormat

_NAME = TextFormat(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$", "use lowercase letters, digits, dashes")
_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")


CapacityType = Literal["on-demand", "spot", "capacity-block", "capacity-reservation"]


@dataclass(frozen=True)
class CapacitySpec:
    """Where a pool's instances come from.

    Args:
        type: ``on-demand`` (default), ``spot``, ``capacity-block`` (EC2 Capacity Blocks
            for ML) or ``capacity-reservation`` (an On-Demand Capacity Reservation).
        reservation_id: the ``cr-...`` id, required for the two reservation types.
    """

    type: CapacityType = "on-demand"
    reservation_id: str | None = None

    @property
    def reserved(self) -> bool:
        return self.type in ("capacity-block", "capacity-reservation")

    def __post_init__(self) -> None:
        check = Checker()
        if self.reserved:
            check.require(
                bool(self.reservation_id and _RESERVATION_ID.match(self.reservation_id)),
                "reservation_id",
                self.reservation_id,
                f"capacity type {self.type} needs its reservation id (cr-0123456789abcdef0)",
            )
        else:
            check.require(
                self.reservation_id is None,
                "reservation_id",
                self.reservation_id,
                "only capacity-block or capacity-reservation take a reservation id",
            )
        check.done()


AmiType = Literal[
    "AL2023_x86_64_NVIDIA",
    "BOTTLEROCKET_x86_64_NVIDIA",
    "AL2023_x86_64_STANDARD",
    "AL2023_ARM_64_STANDARD",
    "BOTTLEROCKET_x86_64",
    "BOTTLEROCKET_ARM_64",
]


@dataclass(frozen=True)
class NodePoolSpec:
    """One EKS managed node group.

    Args:
        name: pool name (lowercase letters, digits, dashes), unique in the stack.
        role: ``system`` (platform services, spread over zones), ``gpu``, ``preprocess``
            or ``cpu-training``.
        instance_type: EC2 instance type; it must be offered in the region.
        min_size: minimum nodes (default 0: an idle pool costs nothing).
        max_size: maximum nodes (default 1).
        desired_size: nodes at creation (default: ``min_size``).
        disk_size_gib: encrypted gp3 root volume size (default 200).
        efa: attach one EFA interface per network card (the type must support EFA).
        placement_group: put nodes in a cluster placement group. Default: on for EFA
            pools, except with a capacity reservation or block (the placement is the
            reservation's, and a group breaks it).
        capacity: on-demand, spot or a reservation (see `CapacitySpec`).
        ami_type: EKS AMI type. Default: ``AL2023_x86_64_NVIDIA`` for GPU types (the
            driver ships in the AMI), ``AL2023_x86_64_STANDARD`` otherwise.
        zone: for EFA pools, the zone to use (EFA traffic does not cross zones); default:
            the first zone, in name order, that offers the type.
        gpu_sharing: ``none``, ``time-slicing`` or ``mig`` for small GPUs (gpu pools only).
        gpu_replicas: time-slicing replicas per GPU (default 1).
        imds_hop_limit: IMDSv2 response hop limit (default 1): pods get AWS credentials
            from EKS Pod Identity, never from the node's role, so one hop keeps IMDS
            reachable from the host but not from containers behind the pod network.
    """

    name: str
    role: Literal["system", "gpu", "preprocess", "cpu-training"]
    instance_type: str
    min_size: int = 0
    max_size: int = 1
    desired_size: int | None = None
    disk_size_gib: int = 200
    efa: bool = False
    placement_group: bool | None = None
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
    ami_type: AmiType | None = None
    zone: str | None = None
    gpu_sharing: Literal["none", "time-slicing", "mig"] = "none"
    gpu_replicas: int = 1
    imds_hop_limit: int = 1

    @property
    def wants_placement_group(self) -> bool:
        if self.placement_group is None:
            return self.efa and not self.capacity.reserved
        return self.placement_group

    @property
    def initial_size(self) -> int:
        return self.min_size if self.desired_size is None else self.desired_size

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("name", self.name, _NAME)
        check.require(self.min_size >= 0, "min_size", self.min_size, "must be 0 or more")
        check.require(self.max_size >= 1, "max_size", self.max_size, "must be at least 1")
        check.require(
            self.min_size <= self.max_size,
            "min_size",
            self.min_size,
            f"must not exceed maxSize ({self.max_size})",
        )
        if self.desired_size is not None:
            check.require(
                self.min_size <= self.desired_size <= self.max_size,
                "desired_size",
                self.desired_size,
                f"must be between minSize ({self.min_size}) and maxSize ({self.max_size})",
            )
        check.require(
            20 <= self.disk_size_gib <= 16384, "disk_size_gib", self.disk_size_gib, "use 20-16384"
        )
        check.require(
            not (self.placement_group and self.capacity.reserved),
            "placement_group",
            self.placement_group,
            "a placement group breaks capacity reservations and blocks; leave it off",
        )
        check.require(
            self.gpu_sharing == "none" or self.role == "gpu",
            "gpu_sharing",
            self.gpu_sharing,
            "GPU sharing applies to gpu pools only",
        )
        check.within("gpu_replicas", self.gpu_replicas, 1, 16)
        check.require(
            self.imds_hop_limit in (1, 2), "imds_hop_limit", self.imds_hop_limit, "use 1 or 2"
        )
        check.require(
            self.role != "system" or self.min_size >= 1,
            "min_size",
            self.min_size,
            "the system pool runs the platform services: keep at least 1 node",
        )
        check.done()
