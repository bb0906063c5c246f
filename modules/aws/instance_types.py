"""What the EC2 catalog says about an instance type, in the shape the node pools use.

Filled from the ``aws.ec2.get_instance_type`` and ``get_instance_type_offerings``
data sources (answered by AWS in a real run, by moto's copy of AWS's catalog in the
offline plan and the tests), never from a hand-written table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class InstanceTypeInfo:
    """One EC2 instance type.

    Args:
        name: e.g. ``p5en.48xlarge``.
        vcpus: default vCPUs.
        memory_mib: memory in MiB.
        gpu_count: NVIDIA GPUs (0 when none).
        gpu_name: GPU model as AWS names it (``H200``, ``L4``), or ``None``.
        gpu_memory_mib: memory of one GPU in MiB.
        efa_supported: whether the type supports Elastic Fabric Adapter.
        efa_max_interfaces: EFA interfaces the type accepts.
        network_cards: network cards (each can carry one EFA interface).
        architectures: supported CPU architectures (``x86_64``, ``arm64``).
        offered_zones: zones of the region that offer the type, sorted.
    """

    name: str
    vcpus: int
    memory_mib: int
    gpu_count: int
    gpu_name: str | None
    gpu_memory_mib: int
    efa_supported: bool
    efa_max_interfaces: int
    network_cards: int
    architectures: tuple[str, ...]
    offered_zones: tuple[str, ...]

    @property
    def accelerator_label(self) -> str | None:
        """Node label value for the GPU model, e.g. ``nvidia-h200``."""
        return f"nvidia-{self.gpu_name.lower()}" if self.gpu_name else None


def offered_zones(
    instance_type: str, opts: pulumi.InvokeOptions, location_type: str = "availability-zone"
) -> tuple[str, ...]:
    """The region's zones (or, with ``location_type="region"``, the region itself) that
    offer ``instance_type``; empty when none do, including for a type that does not exist."""
    result = aws.ec2.get_instance_type_offerings(
        location_type=location_type,
        filters=[{"name": "instance-type", "values": [instance_type]}],
        opts=opts,
    )
    return tuple(sorted(set(result.locations)))


def lookup(instance_type: str, opts: pulumi.InvokeOptions) -> InstanceTypeInfo | None:
    """Catalog data of ``instance_type`` in the provider's region; ``None`` when the
    region does not offer it (a misspelt name included: AWS lists no offering for it).

    Args:
        instance_type: EC2 instance type name.
        opts: invoke options carrying the region-pinned provider.
    """
    if not offered_zones(instance_type, opts, location_type="region"):
        return None
    zones = offered_zones(instance_type, opts)
    info = aws.ec2.get_instance_type(instance_type=instance_type, opts=opts)
    nvidia = [g for g in (info.gpuses or []) if g.manufacturer == "NVIDIA"]
    return InstanceTypeInfo(
        name=instance_type,
        vcpus=int(info.default_vcpus),
        memory_mib=int(info.memory_size),
        gpu_count=sum(int(g.count) for g in nvidia),
        gpu_name=nvidia[0].name if nvidia else None,
        gpu_memory_mib=int(nvidia[0].memory_size) if nvidia else 0,
        efa_supported=bool(info.efa_supported),
        efa_max_interfaces=int(info.efa_maximum_interfaces or 0),
        network_cards=int(info.maximum_network_cards or 1),
        architectures=tuple(info.supported_architectures or ()),
        offered_zones=zones,
    )
