"""`OnlineStore`: the ElastiCache replication group the feature store reads online.

A thin component over `spec.OnlineStoreSpec`: a subnet group of the stack's private
subnets, a security group admitting 6379 from the cluster's security group only, and a
replication group encrypted at rest with the stack's key and in transit with TLS, with
the AUTH token (a Pulumi secret) and in-region snapshots. Protected in Pulumi: it holds
the online copy of the features.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from modules.aws.online_store.spec import (
    ENGINE,
    ENGINE_VERSION,
    MAINTENANCE_WINDOW,
    PARAMETER_FAMILY,
    REDIS_PORT,
    SNAPSHOT_WINDOW,
    OnlineStoreSpec,
)
from modules.aws.private_data_store import (
    DataStorePlacement,
    StoreAccess,
    private_data_store_network,
)
from modules.component_base import AwsComponent, Outputs

#: The online store is reached on Redis's port (TLS) from the EKS cluster only.
ACCESS = StoreAccess(
    REDIS_PORT,
    "redis",
    "Feature store online store: Redis from the EKS cluster only",
    "Redis (TLS) from the cluster's nodes and pods",
)


@dataclass(frozen=True)
class OnlineStoreArgs:
    """Args of `OnlineStore`.

    Args:
        name_prefix: stem of the AWS names (``<prefix>-features``).
        spec: the validated settings.
        placement: the stack's VPC, its private subnets, and the one security group
            admitted on 6379 (`DataStorePlacement`).
        storage_key_arn: the stack's CMK for data at rest (and the snapshots).
        auth_token: the Redis AUTH token (a Pulumi secret; config ``featuresRedisAuthToken``).
    """

    name_prefix: str
    spec: OnlineStoreSpec
    placement: DataStorePlacement
    storage_key_arn: pulumi.Input[str]
    auth_token: pulumi.Input[str]


class OnlineStore(AwsComponent[OnlineStoreArgs]):
    """ElastiCache for Redis OSS for Feast's online store."""

    group: aws.elasticache.ReplicationGroup

    def declare(self, name: str, args: OnlineStoreArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)
        identifier = f"{args.name_prefix}-features"
        spec = args.spec
        network = private_data_store_network(
            name, aws.elasticache.SubnetGroup, identifier, args.placement, access=ACCESS, opts=child
        )
        parameters = aws.elasticache.ParameterGroup(
            name,
            name=identifier,
            family=PARAMETER_FAMILY,
            description="Feature store: evict nothing (features must not vanish silently)",
            # An online store that is full must fail writes (materialisation fails and is
            # seen), not evict features that predictions then silently miss.
            parameters=[
                aws.elasticache.ParameterGroupParameterArgs(
                    name="maxmemory-policy", value="noeviction"
                )
            ],
            opts=child,
        )
        self.group = aws.elasticache.ReplicationGroup(
            name,
            replication_group_id=identifier,
            description="Feast online store (features of the models served on the platform)",
            engine=ENGINE,
            engine_version=ENGINE_VERSION,
            node_type=spec.node_type,
            num_cache_clusters=spec.cache_clusters,
            automatic_failover_enabled=spec.failover,
            multi_az_enabled=spec.failover,
            port=REDIS_PORT,
            parameter_group_name=parameters.name,
            subnet_group_name=network.subnet_group.name,
            security_group_ids=[network.security_group.id],
            at_rest_encryption_enabled=True,
            kms_key_id=args.storage_key_arn,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            auth_token=args.auth_token,
            auth_token_update_strategy="ROTATE",
            snapshot_retention_limit=spec.snapshot_retention_days,
            snapshot_window=SNAPSHOT_WINDOW,
            maintenance_window=MAINTENANCE_WINDOW,
            final_snapshot_identifier=f"{identifier}-final",
            auto_minor_version_upgrade=True,
            apply_immediately=False,
            opts=pulumi.ResourceOptions(
                parent=self, protect=True, additional_secret_outputs=["authToken"]
            ),
        )
        return {"primary_endpoint": self.group.primary_endpoint_address}
