"""The site link's AWS side (`modules.aws.site_link_spec` says what and why): the
customer gateway and VPN connection or the Direct Connect gateway association, the
routes back to the site, and the cluster security group rule that lets the site's
networks reach the private API endpoint on 443."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from .logs import encrypted_log_group
from .site_link_spec import (
    DH_GROUP_NUMBERS,
    ENCRYPTION_ALGORITHMS,
    IKE_VERSIONS,
    INTEGRITY_ALGORITHMS,
    SiteLinkSpec,
    SiteVpnSpec,
)

API_PORT = 443


def tunnel_options(startup_action: str, log_group_arn: pulumi.Input[str]) -> dict[str, Any]:
    """The keyword arguments of `aws.ec2.VpnConnection` for both tunnels: IKEv2, strong
    algorithms only, tunnel activity logged to the encrypted log group."""
    options: dict[str, Any] = {}
    for tunnel in ("tunnel1", "tunnel2"):
        options |= {
            f"{tunnel}_ike_versions": list(IKE_VERSIONS),
            f"{tunnel}_phase1_encryption_algorithms": list(ENCRYPTION_ALGORITHMS),
            f"{tunnel}_phase2_encryption_algorithms": list(ENCRYPTION_ALGORITHMS),
            f"{tunnel}_phase1_integrity_algorithms": list(INTEGRITY_ALGORITHMS),
            f"{tunnel}_phase2_integrity_algorithms": list(INTEGRITY_ALGORITHMS),
            f"{tunnel}_phase1_dh_group_numbers": list(DH_GROUP_NUMBERS),
            f"{tunnel}_phase2_dh_group_numbers": list(DH_GROUP_NUMBERS),
            f"{tunnel}_startup_action": startup_action,
            f"{tunnel}_log_options": aws.ec2.VpnConnectionTunnel1LogOptionsArgs(
                cloudwatch_log_options=aws.ec2.VpnConnectionTunnel1LogOptionsCloudwatchLogOptionsArgs(
                    log_enabled=True, log_group_arn=log_group_arn, log_output_format="json"
                )
            )
            if tunnel == "tunnel1"
            else aws.ec2.VpnConnectionTunnel2LogOptionsArgs(
                cloudwatch_log_options=aws.ec2.VpnConnectionTunnel2LogOptionsCloudwatchLogOptionsArgs(
                    log_enabled=True, log_group_arn=log_group_arn, log_output_format="json"
                )
            ),
        }
    return options


@dataclass(frozen=True)
class SiteLinkArgs:
    """Args of `SiteLink`.

    Args:
        spec: the validated link (`SiteLinkSpec`).
        name_prefix: prefix of the Name tags.
        vpc_id: the stack's VPC.
        vpc_cidr: its IPv4 block (what a Direct Connect association advertises).
        private_subnet_ids: the VPC's private subnets (a transit gateway attaches there).
        private_route_table_ids: their route tables (routes back to the site).
        cluster_security_group_id: the EKS cluster security group.
        logs_key_arn: CMK of the tunnel log group.
        log_retention_days: tunnel log retention.
    """

    spec: SiteLinkSpec
    name_prefix: str
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    private_subnet_ids: Sequence[pulumi.Input[str]]
    private_route_table_ids: Sequence[pulumi.Input[str]]
    cluster_security_group_id: pulumi.Input[str]
    logs_key_arn: pulumi.Input[str]
    log_retention_days: int


class SiteLink(AwsComponent[SiteLinkArgs]):
    """The VPN or Direct Connect side of the link, routes to the site, and the API rule."""

    api_rules: list[aws.vpc.SecurityGroupIngressRule]
    vpn_connection: aws.ec2.VpnConnection | None

    def declare(self, name: str, args: SiteLinkArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        # The site's networks reach the private API endpoint, on 443 only.
        self.api_rules = [
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-api-{i}",
                security_group_id=args.cluster_security_group_id,
                cidr_ipv4=cidr,
                ip_protocol="tcp",
                from_port=API_PORT,
                to_port=API_PORT,
                description=f"EKS API from the site network {cidr} over the site link",
                opts=child,
            )
            for i, cidr in enumerate(spec.site_cidrs)
        ]
        self.vpn_connection = None
        if spec.vpn is not None:
            self._vpn(name, args, spec.vpn)
        else:
            assert spec.direct_connect is not None  # SiteLinkSpec requires one
            gateway = self._vpn_gateway(name, args, spec.direct_connect.amazon_side_asn)
            aws.directconnect.GatewayAssociation(
                name,
                dx_gateway_id=spec.direct_connect.gateway_id,
                associated_gateway_id=gateway.id,
                # Advertise the VPC to the site, nothing wider.
                allowed_prefixes=[args.vpc_cidr],
                opts=child,
            )
        return {"site_cidrs": list(spec.site_cidrs)}

    def _vpn_gateway(self, name: str, args: SiteLinkArgs, asn: int) -> aws.ec2.VpnGateway:
        """A virtual private gateway on the VPC whose routes (BGP-learned or the VPN's
        static ones) propagate into every private route table."""
        gateway = aws.ec2.VpnGateway(
            name,
            vpc_id=args.vpc_id,
            amazon_side_asn=str(asn),
            tags={"Name": f"{args.name_prefix}-site"},
            opts=pulumi.ResourceOptions(parent=self),
        )
        for i, table in enumerate(args.private_route_table_ids):
            aws.ec2.VpnGatewayRoutePropagation(
                f"{name}-propagation-{i}",
                vpn_gateway_id=gateway.id,
                route_table_id=table,
                opts=pulumi.ResourceOptions(parent=self),
            )
        return gateway

    def _vpn(self, name: str, args: SiteLinkArgs, vpn: SiteVpnSpec) -> None:
        child = pulumi.ResourceOptions(parent=self)
        customer = aws.ec2.CustomerGateway(
            name,
            bgp_asn=str(vpn.bgp_asn),
            ip_address=vpn.customer_gateway_ip,
            type="ipsec.1",
            tags={"Name": f"{args.name_prefix}-site"},
            opts=child,
        )
        logs = encrypted_log_group(
            f"{name}-tunnels",
            f"/gpuplatform/{args.name_prefix}/site-vpn",
            args.logs_key_arn,
            args.log_retention_days,
            self,
        )
        static = vpn.routing == "static"
        target: dict[str, Any] = {}
        attachment: aws.ec2transitgateway.VpcAttachment | None = None
        if vpn.attach_to == "vpn-gateway":
            target["vpn_gateway_id"] = self._vpn_gateway(name, args, vpn.amazon_side_asn).id
        else:
            target["transit_gateway_id"] = vpn.transit_gateway_id
            attachment = aws.ec2transitgateway.VpcAttachment(
                name,
                transit_gateway_id=str(vpn.transit_gateway_id),
                vpc_id=args.vpc_id,
                subnet_ids=list(args.private_subnet_ids),
                tags={"Name": f"{args.name_prefix}-site"},
                opts=child,
            )
            # The VPC's way back to the site: through the transit gateway.
            for i, table in enumerate(args.private_route_table_ids):
                for j, cidr in enumerate(args.spec.site_cidrs):
                    aws.ec2.Route(
                        f"{name}-site-{i}-{j}",
                        route_table_id=table,
                        destination_cidr_block=cidr,
                        transit_gateway_id=vpn.transit_gateway_id,
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment]),
                    )
        self.vpn_connection = connection = aws.ec2.VpnConnection(
            name,
            customer_gateway_id=customer.id,
            type="ipsec.1",
            static_routes_only=static,
            tags={"Name": f"{args.name_prefix}-site"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[logs]),
            **target,
            **tunnel_options(vpn.startup_action, logs.arn),
        )
        if not static:
            return
        for j, cidr in enumerate(args.spec.site_cidrs):
            if vpn.attach_to == "vpn-gateway":
                aws.ec2.VpnConnectionRoute(
                    f"{name}-site-{j}",
                    vpn_connection_id=connection.id,
                    destination_cidr_block=cidr,
                    opts=child,
                )
            else:
                aws.ec2transitgateway.Route(
                    f"{name}-site-{j}",
                    destination_cidr_block=cidr,
                    transit_gateway_attachment_id=connection.transit_gateway_attachment_id,
                    transit_gateway_route_table_id=str(vpn.transit_gateway_route_table_id),
                    opts=child,
                )
