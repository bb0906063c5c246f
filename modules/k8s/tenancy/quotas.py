"""How a team's quotas map onto node pools.

One rule, used by Kueue (admission) and by the namespace's ResourceQuota (the hard
ceiling), so the two can never disagree:

* on every GPU pool a team is guaranteed ``gpu_quota`` GPUs, with the matching slice of
  the node's allocatable vCPUs and memory (a GPU job's CPU and memory are bounded by the
  node shape);
* on every CPU pool (``preprocess``, ``cpu-training``) it is guaranteed ``cpu_quota``
  vCPUs and ``memory_quota_gib`` GiB;
* it may borrow ``borrow_limit_percent`` more of each from idle quota of other teams;
* the namespace may request at most the sum over pools of guaranteed plus borrowable.

The ``system`` pool is not a queue target: platform services run there.

Guarantees must be reachable: Kueue admits work up to a team's nominal quota, so a
quota the pool cannot hold at its ``max_size`` admits jobs that stay Pending forever.
`quota_problems` refuses a team's guarantee, and the sum of all teams' guarantees, on
any pool beyond its capacity at maximum size. A node's capacity is what it has less
the platform's reserve (`reserved_vcpus`, `reserved_memory_gib`): 5% of its vCPUs
(at least one) and 5% of its memory (at least 3 GiB), each rounded up to whole units.
That covers the kubelet's and the container runtime's kube-/system-reserved share
and eviction threshold (on EKS's AMIs about 0.1 vCPU and 1-2 GiB on these sizes) and
the platform's DaemonSets on every node (VPC CNI, kube-proxy, EKS Pod Identity agent,
CSI node drivers, node exporter, and on GPU nodes the GPU Operator's device plugin,
DCGM exporter and feature discovery; about 0.5 vCPU and 1 GiB of requests together).
Training pods request exactly this allocatable share
(`modules.k8s.trainer.training_job.manifests`), so a job that asks for whole nodes fits
both the quota and the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from modules.pools import NodePoolProfile
from modules.validation import Problem

GPU_RESOURCE = "nvidia.com/gpu"
#: Resources every ClusterQueue covers, in the order Kueue requires each flavor to list them.
COVERED_RESOURCES = ("cpu", "memory", GPU_RESOURCE)


class TeamQuotas(Protocol):
    """What the rule reads of a team: its name and quotas (`modules.k8s.tenancy.spec.
    TeamSpec` provides them). A Protocol rather than `TeamSpec` itself, because the team's
    namespace objects in `spec` use this rule: neither module imports the other back."""

    @property
    def name(self) -> str: ...

    @property
    def gpu_quota(self) -> int: ...

    @property
    def cpu_quota(self) -> int: ...

    @property
    def memory_quota_gib(self) -> int: ...

    @property
    def borrow_limit_percent(self) -> int: ...


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


def reserved_vcpus(pool: NodePoolProfile) -> int:
    """vCPUs of each node kept for the kubelet, system daemons and the platform's
    DaemonSets: 5% rounded up, at least one."""
    return max(1, math.ceil(0.05 * pool.vcpus))


def reserved_memory_gib(pool: NodePoolProfile) -> int:
    """GiB of each node's memory kept for kube-/system-reserved memory, the eviction
    threshold and the platform's DaemonSets: 5% rounded up, at least 3 GiB."""
    return max(3, math.ceil(0.05 * pool.memory_gib))


def allocatable_vcpus(pool: NodePoolProfile) -> int:
    """vCPUs of one node that workloads may request (at least one)."""
    return max(1, pool.vcpus - reserved_vcpus(pool))


def allocatable_memory_gib(pool: NodePoolProfile) -> int:
    """GiB of one node's memory that workloads may request (at least one)."""
    return max(1, pool.memory_gib - reserved_memory_gib(pool))


def pool_capacity(pool: NodePoolProfile) -> FlavorQuota:
    """What the pool offers workloads at its maximum size."""
    return FlavorQuota(
        pool=pool.name,
        cpu=pool.max_size * allocatable_vcpus(pool),
        memory_gib=pool.max_size * allocatable_memory_gib(pool),
        gpus=pool.max_size * gpu_units_per_node(pool),
    )


def team_flavor_quotas(team: TeamQuotas, pools: Sequence[NodePoolProfile]) -> list[FlavorQuota]:
    """The team's guaranteed quota on each queue pool, in flavor order."""
    quotas = []
    for pool in queue_pools(pools):
        if pool.has_gpus:
            units = gpu_units_per_node(pool)
            quotas.append(
                FlavorQuota(
                    pool=pool.name,
                    cpu=team.gpu_quota * allocatable_vcpus(pool) // units,
                    memory_gib=team.gpu_quota * allocatable_memory_gib(pool) // units,
                    gpus=team.gpu_quota,
                )
            )
        else:
            quotas.append(FlavorQuota(pool.name, team.cpu_quota, team.memory_quota_gib, gpus=0))
    return quotas


def borrowable(amount: int, borrow_limit_percent: int) -> int:
    """What may be borrowed on top of ``amount`` (rounded down)."""
    return amount * borrow_limit_percent // 100


def namespace_ceiling(team: TeamQuotas, pools: Sequence[NodePoolProfile]) -> FlavorQuota:
    """The most the team's namespace may request at once: guaranteed plus borrowable,
    summed over all queue pools (the ResourceQuota's hard limits)."""
    cpu = memory = gpus = 0
    pct = team.borrow_limit_percent
    for quota in team_flavor_quotas(team, pools):
        cpu += quota.cpu + borrowable(quota.cpu, pct)
        memory += quota.memory_gib + borrowable(quota.memory_gib, pct)
        gpus += quota.gpus + borrowable(quota.gpus, pct)
    return FlavorQuota("namespace", cpu, memory, gpus)


def quota_problems(teams: Sequence[TeamQuotas], pools: Sequence[NodePoolProfile]) -> list[Problem]:
    """Guarantees the pools cannot honour at their maximum size, one problem each.

    A team's guarantee on a pool (GPUs on GPU pools, whose vCPU and memory slices follow
    from them; vCPUs and memory on CPU pools) must fit the pool's capacity
    (`pool_capacity`), and so must the sum of every team's guarantee there. Problems
    name the team's key (``teams[<name>].gpu_quota``), the pool, what was asked and what
    is available.
    """
    problems: list[Problem] = []
    # (resource field, FlavorQuota attribute, unit, applies to GPU pools?)
    resources = (
        ("gpu_quota", "gpus", "GPUs", True),
        ("cpu_quota", "cpu", "vCPUs", False),
        ("memory_quota_gib", "memory_gib", "GiB of memory", False),
    )
    quotas = {team.name: team_flavor_quotas(team, pools) for team in teams}
    for index, pool in enumerate(queue_pools(pools)):
        capacity = pool_capacity(pool)
        sizing = _sizing(pool)
        for field, attribute, unit, on_gpu_pools in resources:
            if pool.has_gpus != on_gpu_pools:
                continue
            available = getattr(capacity, attribute)
            asked = {name: getattr(q[index], attribute) for name, q in quotas.items()}
            for name, amount in asked.items():
                if amount > available:
                    problems.append(
                        Problem(
                            f"teams[{name}].{field}",
                            amount,
                            f"pool {pool.name} can hold at most {available} {unit} "
                            f"({sizing}); lower the quota or raise the pool's maxSize",
                        )
                    )
            total = sum(asked.values())
            if total > available and all(a <= available for a in asked.values()):
                shares = ", ".join(f"{n} {a}" for n, a in asked.items() if a)
                problems.append(
                    Problem(
                        "teams",
                        total,
                        f"the teams' guarantees on pool {pool.name} add up to "
                        f"{total} {unit} ({shares}); the pool can hold at most {available} "
                        f"({sizing}); lower the quotas or raise the pool's maxSize",
                    )
                )
    return problems


def _sizing(pool: NodePoolProfile) -> str:
    per_node = [f"{allocatable_vcpus(pool)} vCPUs", f"{allocatable_memory_gib(pool)} GiB"]
    if pool.has_gpus:
        units = gpu_units_per_node(pool)
        if units > pool.gpus_per_node:
            gpus = f"{units} GPU slices ({pool.gpus_per_node} GPUs x {pool.gpu_replicas} replicas)"
        else:
            gpus = f"{units} GPUs"
        per_node.insert(0, gpus)
    return (
        f"maxSize {pool.max_size} x {', '.join(per_node)} per node after the platform's "
        f"reserve of {reserved_vcpus(pool)} vCPUs and {reserved_memory_gib(pool)} GiB"
    )
