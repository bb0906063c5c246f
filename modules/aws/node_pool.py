"""One EKS managed node group with its launch template: GPU pools (EFA, placement
group, capacity reservations) and CPU pools alike.

The decisions are pure functions over catalog data (`pool_zones`,
`efa_network_interfaces`, `autoscaler_node_template_tags`, `node_pool_profile`) that
the tests call directly; `NodePool` only turns them into resources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs
from modules.pools import NodePoolProfile

from .instance_types import InstanceTypeInfo
from .node_pool_spec import NodePoolSpec

_EKS_TAINT_EFFECT = {
    "NoSchedule": "NO_SCHEDULE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
}
_CAPACITY_TYPE = {
    "on-demand": "ON_DEMAND",
    "spot": "SPOT",
    "capacity-reservation": "ON_DEMAND",
    "capacity-block": "CAPACITY_BLOCK",
}


def pool_zones(
    spec: NodePoolSpec, info: InstanceTypeInfo, vpc_zones: tuple[str, ...]
) -> tuple[str, ...]:
    """The zones a pool's nodes go to: the VPC's zones that offer the type.

    EFA traffic does not cross zones, so an EFA pool gets one zone: ``spec.zone`` when
    set, else the first offering zone in name order. Empty when no VPC zone offers it.
    """
    zones = tuple(z for z in vpc_zones if z in info.offered_zones)
    if spec.efa and zones:
        return (spec.zone,) if spec.zone in zones else zones[:1]
    return zones


def efa_network_interfaces(
    info: InstanceTypeInfo, security_group_id: pulumi.Input[str]
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One EFA interface per network card of the type.

    The first (card 0, device 0) is an EFA with ENA, carrying the node's IP traffic;
    the others are EFA-only (device 1 on their card): RDMA without extra IP addresses.
    """
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=0 if card == 0 else 1,
            interface_type="efa" if card == 0 else "efa-only",
            security_groups=[security_group_id],
            delete_on_termination="true",
        )
        for card in range(min(info.network_cards, info.efa_max_interfaces))
    ]


def node_pool_profile(
    spec: NodePoolSpec, info: InstanceTypeInfo, zones: tuple[str, ...]
) -> NodePoolProfile:
    """The pool as the Kubernetes layer and the workloads see it."""
    return NodePoolProfile(
        name=spec.name,
        role=spec.role,
        instance_type=info.name,
        vcpus=info.vcpus,
        memory_gib=info.memory_mib // 1024,
        gpus_per_node=info.gpu_count,
        accelerator=info.accelerator_label,
        gpu_memory_gib=info.gpu_memory_mib // 1024,
        fabric="efa" if spec.efa else "none",
        efa_interfaces=min(info.network_cards, info.efa_max_interfaces) if spec.efa else 0,
        min_size=spec.min_size,
        max_size=spec.max_size,
        gpu_sharing=spec.gpu_sharing,
        gpu_replicas=spec.gpu_replicas,
        zones=zones,
    )


def autoscaler_node_template_tags(cluster_name: str, profile: NodePoolProfile) -> dict[str, str]:
    """Auto Scaling group tags that let Cluster Autoscaler scale the pool up from zero.

    With no node to look at, the autoscaler learns a pool's labels, taints and extended
    resources (GPUs, EFA devices) from these ``node-template`` tags.
    """
    prefix = "k8s.io/cluster-autoscaler/node-template"
    tags = {
        "k8s.io/cluster-autoscaler/enabled": "true",
        f"k8s.io/cluster-autoscaler/{cluster_name}": "owned",
    }
    tags |= {f"{prefix}/label/{k}": v for k, v in profile.labels.items()}
    tags |= {f"{prefix}/taint/{t.key}": f"{t.value}:{t.effect}" for t in profile.taints}
    if profile.gpus_per_node:
        tags[f"{prefix}/resources/nvidia.com/gpu"] = str(profile.gpus_per_node)
    if profile.efa_interfaces:
        tags[f"{prefix}/resources/vpc.amazonaws.com/efa"] = str(profile.efa_interfaces)
    return tags


def default_ami_type(info: InstanceTypeInfo) -> str:
    """EKS AMI type for the type: NVIDIA AL2023 (driver included) for GPU types."""
    arm = "arm64" in info.architectures and "x86_64" not in info.architectures
    if info.gpu_count:
        return "AL2023_ARM_64_NVIDIA" if arm else "AL2023_x86_64_NVIDIA"
    return "AL2023_ARM_64_STANDARD" if arm else "AL2023_x86_64_STANDARD"


@dataclass(frozen=True)
class NodePoolArgs:
    """Args of `NodePool`.

    Args:
        spec: the pool as the stack file declares it.
        info: catalog data of its instance type (validated against ``spec`` already).
        zones: the zones it uses (from `pool_zones`).
        cluster_name: the EKS cluster.
        cluster_security_group_id: the cluster security group (EFA interfaces need it
            explicitly, and it allows all traffic between members, as EFA requires).
        node_role_arn: the node IAM role.
        subnet_ids_by_zone: private subnet id of each VPC zone.
        storage_key_arn: CMK for the root volumes.
        tags: tags for instances, volumes and interfaces the launch template creates
            (provider default tags do not reach them).
    """

    spec: NodePoolSpec
    info: InstanceTypeInfo
    zones: tuple[str, ...]
    cluster_name: str
    cluster_security_group_id: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    subnet_ids_by_zone: Mapping[str, pulumi.Input[str]]
    storage_key_arn: pulumi.Input[str]
    tags: Mapping[str, str]


class NodePool(AwsComponent[NodePoolArgs]):
    """A managed node group, its launch template and, for EFA, a placement group."""

    profile: NodePoolProfile
    node_group: aws.eks.NodeGroup
    launch_template: aws.ec2.LaunchTemplate

    def declare(self, name: str, args: NodePoolArgs) -> Outputs:
        spec, info = args.spec, args.info
        self.profile = node_pool_profile(spec, info, args.zones)
        child = pulumi.ResourceOptions(parent=self)

        placement = None
        if spec.wants_placement_group:
            group = aws.ec2.PlacementGroup(name, strategy="cluster", opts=child)
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name)

        self.launch_template = aws.ec2.LaunchTemplate(
            name,
            description=f"{spec.name}: {info.name} nodes",
            update_default_version=True,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=spec.imds_hop_limit,
                instance_metadata_tags="disabled",
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda",
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=spec.disk_size_gib,
                        volume_type="gp3",
                        encrypted="true",
                        kms_key_id=args.storage_key_arn,
                        delete_on_termination="true",
                    ),
                )
            ],
            network_interfaces=(
                efa_network_interfaces(info, args.cluster_security_group_id) if spec.efa else None
            ),
            placement=placement,
            capacity_reservation_specification=(
                aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                    capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                        capacity_reservation_id=spec.capacity.reservation_id
                    )
                )
                if spec.capacity.reserved
                else None
            ),
            instance_market_options=(
                aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
                if spec.capacity.type == "capacity-block"
                else None
            ),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type=kind, tags={**args.tags, "gpuplatform.ae/pool": spec.name}
                )
                for kind in ("instance", "volume", "network-interface")
            ],
            opts=child,
        )

        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_group_name=f"{args.cluster_name}-{spec.name}",
            node_role_arn=args.node_role_arn,
            subnet_ids=[args.subnet_ids_by_zone[z] for z in args.zones],
            instance_types=[info.name],
            ami_type=spec.ami_type or default_ami_type(info),
            capacity_type=_CAPACITY_TYPE[spec.capacity.type],
            scaling_config={
                "min_size": spec.min_size,
                "max_size": spec.max_size,
                "desired_size": spec.initial_size,
            },
            launch_template={
                "id": self.launch_template.id,
                "version": self.launch_template.latest_version.apply(str),
            },
            labels=self.profile.labels,
            taints=[
                {"key": t.key, "value": t.value, "effect": _EKS_TAINT_EFFECT[t.effect]}
                for t in self.profile.taints
            ],
            update_config={"max_unavailable": 1},
            # EKS node auto repair replaces nodes whose GPUs or kubelet go unhealthy.
            node_repair_config={"enabled": True},
            tags={
                "k8s.io/cluster-autoscaler/enabled": "true",
                "gpuplatform.ae/pool": spec.name,
            },
            # The autoscaler owns the node count once the pool exists.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["scalingConfig.desiredSize"]),
        )

        # Managed node group tags do not reach its Auto Scaling group; the autoscaler
        # reads the group's own tags, so they are set on it directly.
        asg_name = self.node_group.resources.apply(_autoscaling_group_name)
        template_tags = autoscaler_node_template_tags(args.cluster_name, self.profile)
        for index, (key, value) in enumerate(sorted(template_tags.items())):
            aws.autoscaling.Tag(
                f"{name}-asg-tag-{index}",
                autoscaling_group_name=asg_name,
                tag={"key": key, "value": value, "propagate_at_launch": False},
                opts=child,
            )

        return {"node_group_name": self.node_group.node_group_name, "zones": list(args.zones)}


def _autoscaling_group_name(resources: Sequence[aws.eks.outputs.NodeGroupResource] | None) -> str:
    """The name of the Auto Scaling group EKS created for a managed node group."""
    for resource in resources or []:
        for group in resource.autoscaling_groups or []:
            if group.name:
                return group.name
    raise ValueError("the node group reports no Auto Scaling group")
