"""The site link: what uae-prod's plan builds (customer gateway, virtual private gateway,
VPN with strong tunnels logged to an encrypted group, routes to the site, and the
cluster security group admitting the site's networks on 443 and nothing wider), the
other shapes of the link under mocks (static routes, a transit gateway, Direct Connect),
the tunnel options against EC2's own model, and every config problem at once."""

from __future__ import annotations

import re
from typing import Any

import boto3
import botocore.session
import pulumi
import pytest
from botocore.stub import Stubber

from modules.aws.site_link import SiteLink, SiteLinkArgs, tunnel_options
from modules.aws.site_link_spec import (
    DH_GROUP_NUMBERS,
    ENCRYPTION_ALGORITHMS,
    IKE_VERSIONS,
    INTEGRITY_ALGORITHMS,
    DirectConnectSpec,
    SiteLinkSpec,
    SiteVpnSpec,
)
from modules.validation import InvalidArgsError
from stacks.config_parsing import ConfigError
from stacks.offline_runtime import Registration, computed_outputs
from tests.conftest import RunUnderMocks, shipped_plan
from tests.stacks.test_fleet_config import NS, parsed, problems_for, shipped

STACK = "uae-prod"
SITE = "10.20.0.0/16"
VPN = "aws:ec2/vpnConnection:VpnConnection"
RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
TUNNEL_KEYS = (
    "IkeVersions",
    "Phase1EncryptionAlgorithms",
    "Phase2EncryptionAlgorithms",
    "Phase1IntegrityAlgorithms",
    "Phase2IntegrityAlgorithms",
    "Phase1DhGroupNumbers",
    "Phase2DhGroupNumbers",
)


def of_type(type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(STACK)
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


def _cluster_security_group() -> str:
    """The EKS cluster security group: the cluster's own output, as the plan computes it."""
    (cluster,) = of_type("aws:eks/cluster:Cluster")
    outputs = computed_outputs(cluster.type, cluster.name, cluster.inputs, "me-central-1")
    return str(outputs["vpcConfig"]["clusterSecurityGroupId"])


def test_the_site_reaches_the_api_on_443_and_nothing_wider() -> None:
    cluster_sg = _cluster_security_group()
    on_cluster = [r.inputs for r in of_type(RULE) if r.inputs["securityGroupId"] == cluster_sg]
    # The only rule on the cluster group: the site's network, TCP 443.
    assert on_cluster == [
        {
            "cidrIpv4": SITE,
            "description": f"EKS API from the site network {SITE} over the site link",
            "fromPort": 443,
            "ipProtocol": "tcp",
            "securityGroupId": cluster_sg,
            "toPort": 443,
        }
    ]
    # The cluster group is the one EKS gives the API's interfaces (and the nodes).
    refs = [r.inputs.get("referencedSecurityGroupId") for r in of_type(RULE)]
    assert cluster_sg in refs  # e.g. the tracking database admits the cluster's group


def test_the_vpn_joins_the_sites_device_to_the_vpc_with_strong_logged_tunnels() -> None:
    (vpc,) = of_type("aws:ec2/vpc:Vpc")
    (customer,) = of_type("aws:ec2/customerGateway:CustomerGateway")
    (gateway,) = of_type("aws:ec2/vpnGateway:VpnGateway")
    (vpn,) = of_type(VPN)
    assert customer.inputs["ipAddress"] == "198.51.100.10" and customer.inputs["bgpAsn"] == "65010"
    assert customer.inputs["type"] == "ipsec.1"
    assert gateway.inputs["vpcId"] == vpc.id and gateway.inputs["amazonSideAsn"] == "64512"
    assert vpn.inputs["customerGatewayId"] == customer.id
    assert vpn.inputs["vpnGatewayId"] == gateway.id
    assert vpn.inputs["type"] == "ipsec.1" and vpn.inputs["staticRoutesOnly"] is False  # BGP
    groups = {g.id: g for g in of_type("aws:cloudwatch/logGroup:LogGroup")}
    keys = {k.name.removeprefix("keys-"): k for k in of_type("aws:kms/key:Key")}
    for tunnel in ("tunnel1", "tunnel2"):
        assert vpn.inputs[f"{tunnel}IkeVersions"] == ["ikev2"]
        assert vpn.inputs[f"{tunnel}Phase1EncryptionAlgorithms"] == ["AES256-GCM-16"]
        assert vpn.inputs[f"{tunnel}Phase2IntegrityAlgorithms"] == ["SHA2-384", "SHA2-512"]
        assert vpn.inputs[f"{tunnel}Phase1DhGroupNumbers"] == [19, 20, 21]
        logging = vpn.inputs[f"{tunnel}LogOptions"]["cloudwatchLogOptions"]
        assert logging["logEnabled"] is True
        group = groups[logging["logGroupArn"].split(":log-group:", 1)[1]]
        logs_key = keys["logs"]
        key_arn = computed_outputs(logs_key.type, logs_key.name, logs_key.inputs, "me-central-1")
        assert group.inputs["kmsKeyId"] == key_arn["arn"]  # the stack's logs CMK
        assert group.inputs["retentionInDays"] == 365 and group.protect


def test_routes_to_the_site_propagate_into_every_private_route_table() -> None:
    (gateway,) = of_type("aws:ec2/vpnGateway:VpnGateway")
    private = {t.id for t in of_type("aws:ec2/routeTable:RouteTable") if "-private-" in t.name}
    propagations = of_type("aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation")
    assert {p.inputs["routeTableId"] for p in propagations} == private and len(private) == 3
    assert {p.inputs["vpnGatewayId"] for p in propagations} == {gateway.id}


def test_the_tunnel_options_are_ec2_values_and_exclude_the_weak_ones() -> None:
    """EC2's model (botocore) lists each option's valid values; ours are among them, and
    none of the weak ones AWS would otherwise accept."""
    shape = (
        botocore.session.get_session()
        .get_service_model("ec2")
        .shape_for("VpnTunnelOptionsSpecification")
    )

    def valid(member: str) -> set[str]:
        text = re.sub("<[^>]+>", "", shape.members[member].documentation)
        return {v.strip() for v in text.split("Valid values:")[1].split("|")}

    ours = {
        "IKEVersions": IKE_VERSIONS,
        "Phase1EncryptionAlgorithms": ENCRYPTION_ALGORITHMS,
        "Phase2EncryptionAlgorithms": ENCRYPTION_ALGORITHMS,
        "Phase1IntegrityAlgorithms": INTEGRITY_ALGORITHMS,
        "Phase2IntegrityAlgorithms": INTEGRITY_ALGORITHMS,
        "Phase1DHGroupNumbers": DH_GROUP_NUMBERS,
        "Phase2DHGroupNumbers": DH_GROUP_NUMBERS,
    }
    for member, values in ours.items():
        assert {str(v) for v in values} <= valid(member), member
    assert "ikev1" in valid("IKEVersions") and "ikev1" not in IKE_VERSIONS
    assert {"SHA1"} & valid("Phase1IntegrityAlgorithms") and "SHA1" not in INTEGRITY_ALGORITHMS
    assert "2" in valid("Phase1DHGroupNumbers") and 2 not in DH_GROUP_NUMBERS
    # The request the provider makes is one EC2's model accepts (botocore checks it).
    client = boto3.client(
        "ec2", region_name="me-central-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    options = tunnel_options("add", "arn:aws:logs:me-central-1:123456789012:log-group:g")
    tunnel: dict[str, Any] = {
        "IKEVersions": [{"Value": v} for v in options["tunnel1_ike_versions"]],
        "Phase1EncryptionAlgorithms": [
            {"Value": v} for v in options["tunnel1_phase1_encryption_algorithms"]
        ],
        "Phase2EncryptionAlgorithms": [
            {"Value": v} for v in options["tunnel1_phase2_encryption_algorithms"]
        ],
        "Phase1IntegrityAlgorithms": [
            {"Value": v} for v in options["tunnel1_phase1_integrity_algorithms"]
        ],
        "Phase2IntegrityAlgorithms": [
            {"Value": v} for v in options["tunnel1_phase2_integrity_algorithms"]
        ],
        "Phase1DHGroupNumbers": [{"Value": v} for v in options["tunnel1_phase1_dh_group_numbers"]],
        "Phase2DHGroupNumbers": [{"Value": v} for v in options["tunnel1_phase2_dh_group_numbers"]],
        "StartupAction": options["tunnel1_startup_action"],
    }
    request = {
        "CustomerGatewayId": "cgw-0123456789abcdef0",
        "Type": "ipsec.1",
        "VpnGatewayId": "vgw-0123456789abcdef0",
        "Options": {"StaticRoutesOnly": False, "TunnelOptions": [tunnel, tunnel]},
    }
    stubber = Stubber(client)
    stubber.add_response("create_vpn_connection", {}, request)
    with stubber:
        client.create_vpn_connection(**request)
    stubber.assert_no_pending_responses()


def _link(**vpn: Any) -> SiteLinkSpec:
    return SiteLinkSpec(
        site_cidrs=(SITE,), vpn=SiteVpnSpec(customer_gateway_ip="198.51.100.10", **vpn)
    )


def _component(run_under_mocks: RunUnderMocks, spec: SiteLinkSpec) -> dict[str, list[Registration]]:
    def program() -> None:
        SiteLink(
            "site-link",
            SiteLinkArgs(
                spec=spec,
                name_prefix="gpu-test",
                vpc_id="vpc-1",
                vpc_cidr="10.40.0.0/16",
                private_subnet_ids=["subnet-a", "subnet-b"],
                private_route_table_ids=["rtb-a", "rtb-b"],
                cluster_security_group_id="sg-cluster",
                logs_key_arn="arn:aws:kms:me-central-1:123456789012:key/logs",
                log_retention_days=365,
            ),
            pulumi.ResourceOptions(
                provider=pulumi.ProviderResource(
                    "aws", "aws-me-central-1", {"region": "me-central-1"}
                )
            ),
        )

    by_type: dict[str, list[Registration]] = {}
    for registration in run_under_mocks(program).values():
        by_type.setdefault(registration.type.rsplit(":", 1)[-1], []).append(registration)
    return by_type


def test_static_routes_to_a_virtual_private_gateway(run_under_mocks: RunUnderMocks) -> None:
    made = _component(run_under_mocks, _link(routing="static"))
    (vpn,) = made["VpnConnection"]
    assert vpn.inputs["staticRoutesOnly"] is True
    assert [r.inputs["destinationCidrBlock"] for r in made["VpnConnectionRoute"]] == [SITE]
    assert len(made["VpnGatewayRoutePropagation"]) == 2  # static routes propagate too
    assert "VpcAttachment" not in made and "GatewayAssociation" not in made


def test_a_transit_gateway_with_static_routes(run_under_mocks: RunUnderMocks) -> None:
    made = _component(
        run_under_mocks,
        _link(
            attach_to="transit-gateway",
            transit_gateway_id="tgw-0123456789abcdef0",
            transit_gateway_route_table_id="tgw-rtb-0123456789abcdef0",
            routing="static",
        ),
    )
    (vpn,) = made["VpnConnection"]
    assert (
        vpn.inputs["transitGatewayId"] == "tgw-0123456789abcdef0"
        and "vpnGatewayId" not in vpn.inputs
    )
    (attachment,) = made["VpcAttachment"]
    assert attachment.inputs["subnetIds"] == ["subnet-a", "subnet-b"]
    routes = {
        (r.inputs["routeTableId"], r.inputs["destinationCidrBlock"])
        for r in made["Route"]
        if "transitGatewayId" in r.inputs
    }
    assert routes == {("rtb-a", SITE), ("rtb-b", SITE)}
    (tgw_route,) = [r for r in made["Route"] if "transitGatewayRouteTableId" in r.inputs]
    assert tgw_route.inputs["transitGatewayRouteTableId"] == "tgw-rtb-0123456789abcdef0"
    assert "VpnGateway" not in made


def test_direct_connect_associates_the_gateway_and_advertises_only_the_vpc(
    run_under_mocks: RunUnderMocks,
) -> None:
    spec = SiteLinkSpec(
        site_cidrs=(SITE, "192.168.10.0/24"),
        direct_connect=DirectConnectSpec(gateway_id="5f294f92-bafb-4011-916d-9b0bec736b4e"),
    )
    made = _component(run_under_mocks, spec)
    (association,) = made["GatewayAssociation"]
    (gateway,) = made["VpnGateway"]
    assert association.inputs["dxGatewayId"] == "5f294f92-bafb-4011-916d-9b0bec736b4e"
    assert association.inputs["associatedGatewayId"] == gateway.id
    assert association.inputs["allowedPrefixes"] == ["10.40.0.0/16"]
    assert "VpnConnection" not in made and "CustomerGateway" not in made
    rules = made["SecurityGroupIngressRule"]
    # Registered concurrently under the mocks: their order is not fixed.
    assert sorted(
        (r.inputs["cidrIpv4"], r.inputs["fromPort"], r.inputs["toPort"]) for r in rules
    ) == sorted(
        [
            (SITE, 443, 443),
            ("192.168.10.0/24", 443, 443),
        ]
    )


def test_a_site_link_reports_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as raised:
        SiteVpnSpec(
            customer_gateway_ip="10.1.2.3",
            bgp_asn=64512,
            attach_to="transit-gateway",
            routing="static",
        )
    fields = [p.field for p in raised.value.problems]
    assert fields == [
        "customer_gateway_ip",
        "amazon_side_asn",
        "transit_gateway_id",
        "transit_gateway_route_table_id",
    ]
    with pytest.raises(InvalidArgsError) as raised:
        SiteLinkSpec(
            site_cidrs=("8.8.8.0/24", "10.20.0.0/16", "10.20.5.0/24"),
            vpn=SiteVpnSpec(customer_gateway_ip="198.51.100.10"),
            direct_connect=DirectConnectSpec(gateway_id="5f294f92-bafb-4011-916d-9b0bec736b4e"),
        )
    text = str(raised.value)
    assert "declare exactly one of vpn and directConnect" in text
    assert "site_cidrs[0]: got '8.8.8.0/24'; an RFC 1918 IPv4 block" in text
    assert "site_cidrs[2]: got '10.20.5.0/24'; overlaps siteCidrs[1]" in text
    with pytest.raises(InvalidArgsError, match="gateway_id: got 'dx-1'"):
        DirectConnectSpec(gateway_id="dx-1")


def test_config_problems_about_the_link_are_named_with_their_keys() -> None:
    link = {"siteCidrs": ["10.40.8.0/24"], "vpn": {"customerGatewayIp": "198.51.100.10"}}
    with pytest.raises(ConfigError) as raised:
        parsed(STACK, siteLink=link, fleetWorker=None)
    problems = "\n".join(raised.value.problems)
    assert f"{NS}siteLink: got 'siteLink'; a site link joins a fleet worker" in problems
    assert (
        f"{NS}siteLink.siteCidrs: got '10.40.8.0/24'; overlaps the VPC (10.40.0.0/16)" in problems
    )
    with pytest.raises(ConfigError) as raised:
        parsed(
            STACK,
            siteLink={
                "siteCidrs": [SITE],
                "vpn": {"customerGatewayIp": "198.51.100.10", "bgpAsn": 0},
            },
        )
    assert raised.value.problems == [f"{NS}siteLink.vpn.bgpAsn: got 0; an ASN from 1 to 2147483647"]
    with pytest.raises(ConfigError) as raised:
        parsed(
            "onprem-ib",
            siteLink={"siteCidrs": [SITE], "vpn": {"customerGatewayIp": "198.51.100.10"}},
        )
    assert f"{NS}siteLink: got 'siteLink'; only for target aws" in "\n".join(raised.value.problems)


def test_a_site_link_needs_an_on_premises_manager() -> None:
    configs = shipped()
    assert problems_for(STACK, configs) == []
    configs["onprem-ib"] = parsed(
        "uae-dev", fleet={"workers": [{"stack": STACK}], "burstTeams": []}
    )
    problems = problems_for(STACK, configs)
    assert f"{NS}siteLink: the manager onprem-ib is not an on-premises site" in "\n".join(problems)
