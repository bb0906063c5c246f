"""Who gets into the EKS cluster and how the fleet's site reaches it: the identity
section's team access entries and the site link (`modules.aws.identity`,
`modules.aws.site_link`), declared with the rest of the AWS foundation."""

from __future__ import annotations

import pulumi

from modules.aws.cluster import EksCluster
from modules.aws.identity import TeamAccess, TeamAccessArgs
from modules.aws.network import Network
from modules.aws.site_link import SiteLink, SiteLinkArgs

from .config import StackConfig


def build_access_and_link(
    config: StackConfig,
    *,
    name: str,
    cluster: EksCluster,
    network: Network,
    cluster_security_group_id: pulumi.Input[str],
    logs_key_arn: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> None:
    """Team access entries (``identity``) and the site link (``siteLink``), if declared."""
    if config.identity is not None:
        TeamAccess(
            "team-access",
            TeamAccessArgs(cluster_name=cluster.cluster.name, spec=config.identity),
            opts,
        )
    if config.site_link is not None:
        SiteLink(
            "site-link",
            SiteLinkArgs(
                spec=config.site_link,
                name_prefix=name,
                vpc_id=network.vpc.id,
                vpc_cidr=config.network.vpc_cidr,
                private_subnet_ids=[s.id for s in network.private_subnets.values()],
                private_route_table_ids=[t.id for t in network.private_route_tables],
                cluster_security_group_id=cluster_security_group_id,
                logs_key_arn=logs_key_arn,
                # Tunnel logs are network evidence: kept as long as the flow logs.
                log_retention_days=config.network.flow_log_retention_days,
            ),
            opts,
        )
