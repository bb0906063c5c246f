"""Components on their own, under the recording mocks."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from modules.aws.kms import RegionalKeys, RegionalKeysArgs
from modules.aws.node_pool import NodePool, NodePoolArgs
from modules.aws.node_pool_spec import CapacitySpec, NodePoolSpec
from tests.aws.test_decisions import P5EN
from tests.conftest import RunUnderMocks


def node_pool_program(spec: NodePoolSpec) -> None:
    provider = aws.Provider("aws-me-central-1", region="me-central-1")
    NodePool(
        f"pool-{spec.name}",
        NodePoolArgs(
            spec=spec,
            info=P5EN,
            zones=("me-central-1a",),
            cluster_name="gpu-test",
            cluster_security_group_id="sg-1",
            node_role_arn="arn:aws:iam::123456789012:role/node",
            subnet_ids_by_zone={"me-central-1a": "subnet-a"},
            storage_key_arn="arn:aws:kms:me-central-1:123456789012:key/k",
            tags={"owner": "t"},
        ),
        pulumi.ResourceOptions(provider=provider),
    )


def only(registrations: dict[str, object], type_token: str) -> object:
    (found,) = [r for r in registrations.values() if getattr(r, "type", "") == type_token]
    return found


def test_capacity_block_pool_has_no_placement_group(run_under_mocks: RunUnderMocks) -> None:
    spec = NodePoolSpec(
        name="h200",
        role="gpu",
        instance_type=P5EN.name,
        efa=True,
        capacity=CapacitySpec(type="capacity-block", reservation_id="cr-0123456789abcdef0"),
    )
    registrations = run_under_mocks(lambda: node_pool_program(spec))
    types = {r.type for r in registrations.values()}
    assert "aws:ec2/placementGroup:PlacementGroup" not in types
    template = only(registrations, "aws:ec2/launchTemplate:LaunchTemplate")
    inputs = template.inputs  # type: ignore[attr-defined]
    assert inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"}
    assert len(inputs["networkInterfaces"]) == 16
    group = only(registrations, "aws:eks/nodeGroup:NodeGroup")
    assert group.inputs["capacityType"] == "CAPACITY_BLOCK"  # type: ignore[attr-defined]


def test_spot_pool_with_placement_group_and_explicit_provider(
    run_under_mocks: RunUnderMocks,
) -> None:
    spec = NodePoolSpec(
        name="h200", role="gpu", instance_type=P5EN.name, efa=True, capacity=CapacitySpec("spot")
    )
    registrations = run_under_mocks(lambda: node_pool_program(spec))
    assert "aws:ec2/placementGroup:PlacementGroup" in {r.type for r in registrations.values()}
    group = only(registrations, "aws:eks/nodeGroup:NodeGroup")
    assert group.inputs["capacityType"] == "SPOT"  # type: ignore[attr-defined]
    for reg in registrations.values():
        if reg.custom and reg.type.startswith("aws:"):
            assert "pulumi:providers:aws::aws-me-central-1" in reg.provider, reg.urn


def test_each_run_starts_from_a_clean_runtime(run_under_mocks: RunUnderMocks) -> None:
    def keys() -> None:
        provider = aws.Provider("aws-me-central-1", region="me-central-1")
        RegionalKeys(
            "keys",
            RegionalKeysArgs(name_prefix="t", account_id="123456789012", region="me-central-1"),
            pulumi.ResourceOptions(provider=provider),
        )

    first = run_under_mocks(keys)
    second = run_under_mocks(keys)
    assert sorted(first) == sorted(second)
    assert sum(r.type == "aws:kms/key:Key" for r in second.values()) == 3
