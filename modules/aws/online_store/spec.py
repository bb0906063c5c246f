"""Typed settings of the feature store's online store on AWS (pure: no Pulumi calls).

ElastiCache for Redis OSS, in the stack's region and private subnets, reachable only
from the EKS cluster's security group, encrypted at rest with the stack's KMS key and in
transit with TLS (required, not preferred), with an AUTH token that is a Pulumi secret,
automatic failover across zones, and daily snapshots kept in the region.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.validation import Checker, TextFormat

REDIS_PORT = 6379
#: Redis OSS 7.1, the newest Redis OSS engine ElastiCache offers; its parameter family.
ENGINE = "redis"
ENGINE_VERSION = "7.1"
PARAMETER_FAMILY = "redis7"
#: ElastiCache node types of the burstable and general-purpose families
#: (``cache.t4g.small``, ``cache.m7g.large`` ...).
_NODE_TYPE = TextFormat(
    r"^cache\.[a-z][a-z0-9]*\.[a-z0-9]+$",
    "an ElastiCache node type such as cache.t4g.small",
)
#: The daily snapshot and weekly maintenance windows (UTC; 23:00-00:00 is 03:00-04:00 in
#: the UAE, outside business hours), kept apart as ElastiCache requires.
SNAPSHOT_WINDOW = "23:00-00:00"
MAINTENANCE_WINDOW = "fri:01:00-fri:02:00"


@dataclass(frozen=True)
class OnlineStoreSpec:
    """ElastiCache settings (config key ``uae-gpu-platform:features``, AWS part).

    Args:
        node_type: cache node type (default ``cache.t4g.small``: a few hundred thousand
            customers' features fit in its 1.37 GiB).
        replicas: read replicas beside the primary (default 1; 1 or more gives automatic
            failover to another zone).
        snapshot_retention_days: daily snapshots kept, in the region (default 7, 1 to 35).
    """

    node_type: str = "cache.t4g.small"
    replicas: int = 1
    snapshot_retention_days: int = 7

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("node_type", self.node_type, _NODE_TYPE)
        check.require(
            0 <= self.replicas <= 5, "replicas", self.replicas, "use 0 to 5 read replicas"
        )
        check.within(
            "snapshot_retention_days",
            self.snapshot_retention_days,
            1,
            35,
            "0 would turn snapshots off",
        )
        check.done()

    @property
    def cache_clusters(self) -> int:
        """Nodes in the replication group: the primary and its replicas."""
        return 1 + self.replicas

    @property
    def failover(self) -> bool:
        """Automatic failover and Multi-AZ need at least one replica."""
        return self.replicas >= 1


def auth_token_problem(token: str) -> str | None:
    """What is wrong with an ElastiCache AUTH token, or ``None``.

    ElastiCache takes 16 to 128 printable ASCII characters without ``@``, ``"`` or ``/``
    (and no spaces); Feast's Redis connection string also splits on ``,``.
    """
    if not 16 <= len(token) <= 128:
        return f"the token has {len(token)} characters; use 16 to 128"
    bad = sorted({c for c in token if not (33 <= ord(c) <= 126) or c in '@"/,'})
    if bad:
        return f'the token contains {"".join(bad)!r}; use printable ASCII without @, ", / and ,'
    return None


def connection_string(host: str, token_env: str = "REDIS_AUTH_TOKEN") -> str:
    """Feast's Redis ``connection_string`` for the group's primary endpoint over TLS; the
    token is read from the environment when Feast loads ``feature_store.yaml``."""
    return f"{host}:{REDIS_PORT},ssl=true,password=${{{token_env}}}"
