"""The foundation's pure decisions, called directly without mocks."""

from __future__ import annotations

import ipaddress
import json

import pytest

from modules.aws.cluster import kubeconfig, vpc_config
from modules.aws.instance_types import InstanceTypeInfo
from modules.aws.network import plan_subnets
from modules.aws.node_pool import (
    autoscaler_node_template_tags,
    default_ami_type,
    efa_network_interfaces,
    node_pool_profile,
    pool_zones,
)
from modules.aws.node_pool_spec import CapacitySpec, NodePoolSpec
from modules.validation import InvalidArgsError

P5EN = InstanceTypeInfo(
    name="p5en.48xlarge", vcpus=192, memory_mib=2097152, gpu_count=8, gpu_name="H200",
    gpu_memory_mib=144384, efa_supported=True, efa_max_interfaces=16, network_cards=16,
    architectures=("x86_64",), offered_zones=("me-central-1a", "me-central-1c"),
)  # fmt: skip
ZONES = ("me-central-1a", "me-central-1b", "me-central-1c")


@pytest.mark.parametrize(
    ("cidr", "zones"),
    [("10.40.0.0/16", ZONES), ("10.0.0.0/20", ZONES[:2]), ("10.8.0.0/16", ZONES * 2)],
)
def test_subnets_fit_the_vpc_and_never_overlap(cidr: str, zones: tuple[str, ...]) -> None:
    plans = plan_subnets(cidr, zones)
    networks = [ipaddress.IPv4Network(p.cidr) for p in plans]
    vpc = ipaddress.IPv4Network(cidr)
    assert all(n.subnet_of(vpc) for n in networks)
    assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1 :])
    private = [p for p in plans if p.tier == "private"]
    public = [p for p in plans if p.tier == "public"]
    assert [p.zone for p in private] == [p.zone for p in public] == list(zones)
    assert min(ipaddress.IPv4Network(p.cidr).num_addresses for p in private) > max(
        ipaddress.IPv4Network(p.cidr).num_addresses for p in public
    )


def test_efa_pool_gets_one_offering_zone_and_other_pools_all() -> None:
    efa = NodePoolSpec(name="gpu", role="gpu", instance_type=P5EN.name, efa=True)
    assert pool_zones(efa, P5EN, ZONES) == ("me-central-1a",)
    pinned = NodePoolSpec(
        name="gpu", role="gpu", instance_type=P5EN.name, efa=True, zone="me-central-1c"
    )
    assert pool_zones(pinned, P5EN, ZONES) == ("me-central-1c",)
    plain = NodePoolSpec(name="gpu", role="gpu", instance_type=P5EN.name)
    assert pool_zones(plain, P5EN, ZONES) == ("me-central-1a", "me-central-1c")
    assert pool_zones(plain, P5EN, ("me-central-1b",)) == ()


def test_one_efa_interface_per_network_card_first_with_ena() -> None:
    interfaces = efa_network_interfaces(P5EN, "sg-1")
    assert len(interfaces) == 16
    assert (interfaces[0].interface_type, interfaces[0].device_index) == ("efa", 0)  # type: ignore[attr-defined]
    assert {(i.interface_type, i.device_index) for i in interfaces[1:]} == {("efa-only", 1)}  # type: ignore[attr-defined]


def test_profile_labels_taints_and_scale_from_zero_tags() -> None:
    spec = NodePoolSpec(name="h200", role="gpu", instance_type=P5EN.name, efa=True, max_size=4)
    profile = node_pool_profile(spec, P5EN, ("me-central-1a",))
    assert profile.gpus_per_node == 8 and profile.efa_interfaces == 16
    assert profile.accelerator == "nvidia-h200" and profile.fabric == "efa"
    assert [(t.key, t.value) for t in profile.taints] == [
        ("nvidia.com/gpu", "true"),
        ("gpuplatform.ae/fabric", "efa"),
    ]
    tags = autoscaler_node_template_tags("gpu-x", profile)
    assert tags["k8s.io/cluster-autoscaler/gpu-x"] == "owned"
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa"] == "16"
    assert default_ami_type(P5EN) == "AL2023_x86_64_NVIDIA"


def test_endpoint_is_private_unless_cidrs_are_listed() -> None:
    private = vpc_config(["subnet-1"], (), True)
    assert (private.endpoint_public_access, private.public_access_cidrs) == (False, None)  # type: ignore[attr-defined]
    public = vpc_config(["subnet-1"], ("203.0.113.0/24",), True)
    assert public.endpoint_public_access is True  # type: ignore[attr-defined]


def test_kubeconfig_uses_aws_eks_get_token_in_region() -> None:
    config = json.loads(kubeconfig("c", "https://x", "Y2E=", "me-central-1"))
    exec_args = config["users"][0]["user"]["exec"]["args"]
    assert exec_args[exec_args.index("--region") + 1] == "me-central-1"
    assert "token" not in config["users"][0]["user"]


def test_node_pool_spec_collects_every_problem() -> None:
    with pytest.raises(InvalidArgsError) as caught:
        NodePoolSpec(
            name="Bad_Name", role="system", instance_type="m7i.xlarge", min_size=0, max_size=0,
            capacity=CapacitySpec(type="on-demand"), gpu_sharing="mig",
        )  # fmt: skip
    fields = sorted(p.field for p in caught.value.problems)
    assert fields == ["gpu_sharing", "max_size", "min_size", "name"]


def test_reservation_types_need_a_reservation_id() -> None:
    with pytest.raises(InvalidArgsError):
        CapacitySpec(type="capacity-block")
    with pytest.raises(InvalidArgsError):
        CapacitySpec(type="spot", reservation_id="cr-0123456789abcdef0")
    assert CapacitySpec(type="capacity-block", reservation_id="cr-0123456789abcdef0").reserved
