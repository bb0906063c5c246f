"""The network of a private data store (RDS, ElastiCache): a subnet group of the stack's
private subnets and a security group admitting the store's one port from the EKS
cluster's security group only, which the nodes and their pods carry.

One helper for every managed data store of the stack, so that each is reachable the
same way and from nowhere else: no public subnet, no CIDR rule, no other port.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

#: The subnet group kinds of the managed stores (same arguments, different services).
SubnetGroup = aws.rds.SubnetGroup | aws.elasticache.SubnetGroup


@dataclass(frozen=True)
class DataStorePlacement:
    """Where the stack's managed data stores are, and who may reach them (one for every
    store of the stack).

    Args:
        vpc_id: the stack's VPC.
        subnet_ids: its private subnets (no route to an internet gateway).
        client_security_group_id: the only security group admitted on a store's port:
            the EKS cluster security group, which the nodes and their pods carry.
    """

    vpc_id: pulumi.Input[str]
    subnet_ids: Sequence[pulumi.Input[str]]
    client_security_group_id: pulumi.Input[str]


@dataclass(frozen=True)
class StoreAccess:
    """How one kind of store is reached (declared once by the store's module).

    Args:
        port: the store's TCP port.
        protocol: the store's protocol, lowercase (``postgres``, ``redis``): it names
            the ingress rule (``<name>-<protocol>-from-cluster``).
        security_group_description: what the security group is for (shown in EC2).
        rule_description: what the ingress rule admits (shown in EC2).
    """

    port: int
    protocol: str
    security_group_description: str
    rule_description: str


@dataclass(frozen=True)
class PrivateDataStoreNetwork:
    """What a store is placed in: its subnet group and its security group."""

    subnet_group: SubnetGroup
    security_group: aws.ec2.SecurityGroup


def private_data_store_network(
    name: str,
    subnet_group_kind: type[aws.rds.SubnetGroup] | type[aws.elasticache.SubnetGroup],
    identifier: str,
    placement: DataStorePlacement,
    *,
    access: StoreAccess,
    opts: pulumi.ResourceOptions,
) -> PrivateDataStoreNetwork:
    """The subnet group (``subnet_group_kind``: ``aws.rds.SubnetGroup`` or
    ``aws.elasticache.SubnetGroup``; its AWS name ``identifier``, the store's), the
    security group and its one ingress rule, all named ``name`` (the rule
    ``<name>-<protocol>-from-cluster``) with ``opts``."""
    subnets = subnet_group_kind(
        name,
        name=identifier,
        description="Private subnets of the stack's VPC",
        subnet_ids=list(placement.subnet_ids),
        opts=opts,
    )
    group = aws.ec2.SecurityGroup(
        name, vpc_id=placement.vpc_id, description=access.security_group_description, opts=opts
    )
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-{access.protocol}-from-cluster",
        security_group_id=group.id,
        referenced_security_group_id=placement.client_security_group_id,
        ip_protocol="tcp",
        from_port=access.port,
        to_port=access.port,
        description=access.rule_description,
        opts=opts,
    )
    return PrivateDataStoreNetwork(subnet_group=subnets, security_group=group)
