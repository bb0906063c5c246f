"""How a team's quotas map onto node pools.

One rule, used by Kueue (admission) and by the namespace's ResourceQuota (the hard
ceiling), so the two can never disagree:

* on every GPU pool a team is guaranteed ``gpu_quota`` GPUs, with the matching slice of
  the node's vCPUs and memory (a GPU job's CPU and memory are bounded by the node shape);
* on every CPU pool (``preprocess``, ``cpu-training``) it is guaranteed ``cpu_quota``
  vCPUs and ``memory_quota_gib`` GiB;
* it may borrow ``borrow_limit_percent`` more of each from idle quota of other teams;
* the namespace may request at most the sum over pools of guaranteed plus borrowable.

The ``system`` pool is not a queue target: platform services run there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modules.pools import NodePoolProfile

if TYPE_CHECKING:
    from modules.k8s.tenancy import TeamSpec

GPU_RESOURCE = "nvidia.com/gpu"
#: Resources every ClusterQueue covers, in the order Kueue requires each flavor to list them.
COVERED_RESOURCES = ("cpu", "memory", GPU_RESOURCE)


@dataclass(frozen=True)
class FlavorQuota:
    """A team's guaranteed share of one pool (one Kueue flavor)."""

    pool: str
    cpu: int
    memory_gib: int
    gpus: int


def queue_pools(pools: Sequence[NodePoolProfile]) -> list[NodePoolProfile]:
    """Pools that are Kueue flavors, CPU pools first: Kueue tries flavors in order, so a
    CPU-only job is placed on a CPU pool before it could use a GPU pool's CPUs."""
    cpu = sorted((p for p in pools if p.role != "system" and not p.has_gpus), key=lambda p: p.name)
    gpu = sorted((p for p in pools if p.role != "system" and p.has_gpus), key=lambda p: p.name)
    return cpu + gpu


def gpu_units_per_node(pool: NodePoolProfile) -> int:
    """How many ``nvidia.com/gpu`` a node advertises (time-slicing multiplies them)."""
    if pool.gpu_sharing == "time-slicing":
        return pool.gpus_per_node * pool.gpu_replicas
    return pool.gpus_per_node


def team_flavor_quotas(team: TeamSpec, pools: Sequence[NodePoolProfile]) -> list[FlavorQuota]:
    """The team's guaranteed quota on each queue pool, in flavor order."""
    quotas = []
    for pool in queue_pools(pools):
        if pool.has_gpus:
            units = gpu_units_per_node(pool)
            quotas.append(
                FlavorQuota(
                    pool=pool.name,
                    cpu=team.gpu_quota * pool.vcpus // units,
                    memory_gib=team.gpu_quota * pool.memory_gib // units,
                    gpus=team.gpu_quota,
                )
            )
        else:
            quotas.append(FlavorQuota(pool.name, team.cpu_quota, team.memory_quota_gib, gpus=0))
    return quotas


def borrowable(amount: int, borrow_limit_percent: int) -> int:
    """What may be borrowed on top of ``amount`` (rounded down)."""
    return amount * borrow_limit_percent // 100


def namespace_ceiling(team: TeamSpec, pools: Sequence[NodePoolProfile]) -> FlavorQuota:
    """The most the team's namespace may request at once: guaranteed plus borrowable,
    summed over all queue pools (the ResourceQuota's hard limits)."""
    cpu = memory = gpus = 0
    pct = team.borrow_limit_percent
    for quota in team_flavor_quotas(team, pools):
        cpu += quota.cpu + borrowable(quota.cpu, pct)
        memory += quota.memory_gib + borrowable(quota.memory_gib, pct)
        gpus += quota.gpus + borrowable(quota.gpus, pct)
    return FlavorQuota("namespace", cpu, memory, gpus)
