"""The VPC: private subnets for nodes, public ones for NAT and load balancers only,
VPC endpoints so node traffic to AWS stays on the regional network, flow logs."""

from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from modules.component_base import AwsComponent, Outputs

from . import iam
from .logs import encrypted_log_group

# Interface endpoints nodes need to pull images, get credentials (Pod Identity uses
# eks-auth), write logs and talk to EC2/EKS without leaving the region's network.
INTERFACE_ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr", "sts", "logs", "ec2", "eks", "eks-auth")


@dataclass(frozen=True)
class SubnetPlan:
    """One subnet to create: its zone, tier and CIDR block."""

    zone: str
    tier: Literal["private", "public"]
    cidr: str


def plan_subnets(vpc_cidr: str, zones: tuple[str, ...]) -> list[SubnetPlan]:
    """Split the VPC into one large private and one small public subnet per zone.

    The VPC is cut into ``2**bits`` equal blocks (enough for every zone plus one):
    zone *i* gets block *i* as its private subnet (VPC CNI gives every pod a VPC
    address, so the node subnets must be large), and the last block is cut again into
    the public subnets, which hold only NAT gateways and load balancers.
    """
    network = ipaddress.IPv4Network(vpc_cidr)
    bits = math.ceil(math.log2(len(zones) + 1))
    blocks = list(network.subnets(prefixlen_diff=bits))
    public_blocks = list(blocks[-1].subnets(prefixlen_diff=bits))
    plans = [SubnetPlan(zone, "private", str(blocks[i])) for i, zone in enumerate(zones)]
    plans += [SubnetPlan(zone, "public", str(public_blocks[i])) for i, zone in enumerate(zones)]
    return plans


@dataclass(frozen=True)
class NetworkArgs:
    """Args of `Network`.

    Args:
        name_prefix: prefix of the Name tags.
        vpc_cidr: the VPC's IPv4 block.
        zones: the availability zones to span, in order.
        region: the stack's region (endpoint service names are regional).
        account_id: the account (flow-log delivery is limited to it).
        nat_gateway_per_zone: one NAT gateway per zone (else one shared).
        logs_key_arn: CMK for the flow-log group; None defers the flow logs to
            `Network.enable_flow_logs` (a stack whose keys live in a CloudHSM cluster
            inside this VPC gets its logs key only after the VPC exists).
        flow_log_retention_days: flow-log retention.
        cluster_name: EKS cluster name, for the subnet discovery tags.
    """

    name_prefix: str
    vpc_cidr: str
    zones: tuple[str, ...]
    region: str
    account_id: str
    nat_gateway_per_zone: bool
    logs_key_arn: pulumi.Input[str] | None
    flow_log_retention_days: int
    cluster_name: str


class Network(AwsComponent[NetworkArgs]):
    """VPC, subnets, routing, NAT, VPC endpoints and encrypted flow logs."""

    vpc: aws.ec2.Vpc
    private_subnets: dict[str, aws.ec2.Subnet]
    public_subnets: dict[str, aws.ec2.Subnet]
    private_route_tables: list[aws.ec2.RouteTable]

    def declare(self, name: str, args: NetworkArgs) -> Outputs:
        self._name, self._args = name, args
        child = pulumi.ResourceOptions(parent=self)
        self.vpc = aws.ec2.Vpc(
            name,
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": args.name_prefix},
            opts=child,
        )
        # CIS: the default security group allows nothing.
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default", vpc_id=self.vpc.id, ingress=[], egress=[], opts=child
        )
        self.private_subnets, self.public_subnets = {}, {}
        for plan in plan_subnets(args.vpc_cidr, args.zones):
            elb_role = "internal-elb" if plan.tier == "private" else "elb"
            subnet = aws.ec2.Subnet(
                f"{name}-{plan.tier}-{plan.zone}",
                vpc_id=self.vpc.id,
                availability_zone=plan.zone,
                cidr_block=plan.cidr,
                map_public_ip_on_launch=False,
                tags={
                    "Name": f"{args.name_prefix}-{plan.tier}-{plan.zone}",
                    f"kubernetes.io/role/{elb_role}": "1",
                    f"kubernetes.io/cluster/{args.cluster_name}": "shared",
                },
                opts=child,
            )
            target = self.private_subnets if plan.tier == "private" else self.public_subnets
            target[plan.zone] = subnet
        self.private_route_tables = private_route_tables = self._routing(name, args)
        self._endpoints(name, args, private_route_tables)
        if args.logs_key_arn is not None:
            self.enable_flow_logs(args.logs_key_arn)
        return {
            "vpc_id": self.vpc.id,
            "private_subnet_ids": [s.id for s in self.private_subnets.values()],
        }

    def _routing(self, name: str, args: NetworkArgs) -> list[aws.ec2.RouteTable]:
        child = pulumi.ResourceOptions(parent=self)
        igw = aws.ec2.InternetGateway(name, vpc_id=self.vpc.id, opts=child)
        public_rt = aws.ec2.RouteTable(f"{name}-public", vpc_id=self.vpc.id, opts=child)
        _default_route(f"{name}-public", public_rt, child, gateway_id=igw.id)
        nat_zones = args.zones if args.nat_gateway_per_zone else args.zones[:1]
        nats: dict[str, aws.ec2.NatGateway] = {}
        for zone, subnet in self.public_subnets.items():
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}",
                subnet_id=subnet.id,
                route_table_id=public_rt.id,
                opts=child,
            )
            if zone in nat_zones:
                eip = aws.ec2.Eip(f"{name}-nat-{zone}", domain="vpc", opts=child)
                nats[zone] = aws.ec2.NatGateway(
                    f"{name}-{zone}",
                    allocation_id=eip.allocation_id,
                    subnet_id=subnet.id,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                )
        tables = []
        for zone, subnet in self.private_subnets.items():
            table = aws.ec2.RouteTable(f"{name}-private-{zone}", vpc_id=self.vpc.id, opts=child)
            nat = nats.get(zone, nats[nat_zones[0]])
            _default_route(f"{name}-private-{zone}", table, child, nat_gateway_id=nat.id)
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}", subnet_id=subnet.id, route_table_id=table.id, opts=child
            )
            tables.append(table)
        return tables

    def _endpoints(
        self, name: str, args: NetworkArgs, private_route_tables: list[aws.ec2.RouteTable]
    ) -> None:
        child = pulumi.ResourceOptions(parent=self)
        gateway = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[t.id for t in private_route_tables],
            opts=child,
        )
        endpoint_sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints",
            vpc_id=self.vpc.id,
            description="HTTPS from inside the VPC to the interface endpoints",
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-endpoints-https",
            security_group_id=endpoint_sg.id,
            cidr_ipv4=args.vpc_cidr,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="HTTPS from the VPC",
            opts=child,
        )
        subnet_ids = [s.id for s in self.private_subnets.values()]

        def interface_endpoint(
            resource_name: str, service: str, opts: pulumi.ResourceOptions, **more: Any
        ) -> None:
            """An interface endpoint of ``service`` in the private subnets, behind the
            endpoints' security group, answering under the service's own DNS name."""
            aws.ec2.VpcEndpoint(
                resource_name,
                vpc_id=self.vpc.id,
                service_name=f"com.amazonaws.{args.region}.{service}",
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=subnet_ids,
                security_group_ids=[endpoint_sg.id],
                opts=opts,
                **more,
            )

        # S3 also gets an interface endpoint whose private DNS answers inside the VPC:
        # pods then reach S3 at VPC addresses, which their default-deny egress policy
        # allows (VPC CIDR on 443); the gateway endpoint's public S3 ranges it does not.
        interface_endpoint(
            f"{name}-s3-interface",
            "s3",
            pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
            dns_options=aws.ec2.VpcEndpointDnsOptionsArgs(
                private_dns_only_for_inbound_resolver_endpoint=False
            ),
        )
        for service in INTERFACE_ENDPOINT_SERVICES:
            interface_endpoint(f"{name}-{service.replace('.', '-')}", service, child)

    def enable_flow_logs(self, logs_key_arn: pulumi.Input[str]) -> None:
        """Flow logs of all traffic into a log group encrypted with ``logs_key_arn``."""
        name, args = self._name, self._args
        child = pulumi.ResourceOptions(parent=self)
        log_group = encrypted_log_group(
            f"{name}-flow-logs",
            f"/gpuplatform/{args.name_prefix}/vpc-flow-logs",
            logs_key_arn,
            args.flow_log_retention_days,
            self,
        )
        delivery = iam.role(
            f"{name}-flow-logs",
            json.dumps(iam.service_trust("vpc-flow-logs.amazonaws.com", args.account_id)),
            self,
            description="VPC Flow Logs delivery to its encrypted log group",
            inline_policies={
                "deliver": iam.json_document(iam.flow_log_delivery, log_group.arn),
            },
        )
        aws.ec2.FlowLog(
            name,
            vpc_id=self.vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=log_group.arn,
            iam_role_arn=delivery.arn,
            max_aggregation_interval=60,
            opts=child,
        )


def _default_route(
    table_name: str,
    table: aws.ec2.RouteTable,
    opts: pulumi.ResourceOptions,
    *,
    gateway_id: pulumi.Input[str] | None = None,
    nat_gateway_id: pulumi.Input[str] | None = None,
) -> aws.ec2.Route:
    """The route of everything outside the VPC (``0.0.0.0/0``) in ``table`` (named
    ``table_name``): to the internet gateway, or to a NAT gateway."""
    return aws.ec2.Route(
        f"{table_name}-default",
        route_table_id=table.id,
        destination_cidr_block="0.0.0.0/0",
        gateway_id=gateway_id,
        nat_gateway_id=nat_gateway_id,
        opts=opts,
    )
