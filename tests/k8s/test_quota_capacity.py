"""Quotas the pools can honour: guarantees beyond a pool's maximum size are refused."""

from __future__ import annotations

from modules.k8s.tenancy.quotas import (
    allocatable_memory_gib,
    allocatable_vcpus,
    pool_capacity,
    quota_problems,
    team_flavor_quotas,
)
from modules.k8s.tenancy.spec import TeamSpec
from modules.k8s.trainer.training_job.manifests import cpu_request_millicores, memory_request_mib
from modules.pools import NodePoolProfile
from tests.k8s.fixtures import CPU, G6, SYSTEM
from tests.support.pools import P5EN


def test_capacity_is_max_size_times_the_node_less_the_platform_reserve() -> None:
    assert pool_capacity(P5EN).gpus == 32
    assert pool_capacity(P5EN).cpu == 4 * (192 - 10)
    assert pool_capacity(P5EN).memory_gib == 4 * (2048 - 103)
    assert pool_capacity(G6).gpus == 2 * 4 * 4  # time-sliced: 4 GPUs x 4 replicas per node
    small = NodePoolProfile("small", "preprocess", "m7i.large", vcpus=2, memory_gib=8, max_size=1)
    # The reserve is at least one vCPU and 3 GiB, however small the node.
    assert (allocatable_vcpus(small), allocatable_memory_gib(small)) == (1, 5)


def test_guarantees_within_capacity_pass() -> None:
    teams = [TeamSpec("a", gpu_quota=16), TeamSpec("b", gpu_quota=16)]
    assert quota_problems(teams, (SYSTEM, P5EN)) == []


def test_a_team_asking_beyond_the_pool_is_refused_with_team_pool_asked_and_available() -> None:
    (problem,) = quota_problems([TeamSpec("sandbox", gpu_quota=400)], (SYSTEM, P5EN))
    assert problem.field == "teams[sandbox].gpu_quota"
    assert problem.value == 400
    assert problem.expected.startswith(
        "pool gpu-p5en can hold at most 32 GPUs (maxSize 4 x 8 GPUs, 182 vCPUs, 1945 GiB per "
        "node after the platform's reserve of 10 vCPUs and 103 GiB)"
    )


def test_the_sum_of_guarantees_on_a_pool_must_fit() -> None:
    teams = [TeamSpec("a", gpu_quota=24), TeamSpec("b", gpu_quota=16), TeamSpec("c")]
    (problem,) = quota_problems(teams, (SYSTEM, P5EN))
    assert problem.field == "teams" and problem.value == 40
    assert "guarantees on pool gpu-p5en add up to 40 GPUs (a 24, b 16)" in problem.expected
    assert "can hold at most 32" in problem.expected


def test_cpu_pools_check_vcpus_and_memory() -> None:
    team = TeamSpec("etl", cpu_quota=200, memory_quota_gib=300)  # CPU: 4 x 30 vCPUs, 4 x 60 GiB
    problems = quota_problems([team], (SYSTEM, CPU))
    assert [(p.field, p.value) for p in problems] == [
        ("teams[etl].cpu_quota", 200),
        ("teams[etl].memory_quota_gib", 300),
    ]
    assert "can hold at most 120 vCPUs" in problems[0].expected
    assert "can hold at most 240 GiB of memory" in problems[1].expected


def test_a_whole_node_job_fits_the_quota_of_its_gpus() -> None:
    # The job requests a node's allocatable share; the quota of that node's GPUs is the
    # same share, so Kueue admits exactly what the node can run.
    for pool in (P5EN, CPU):
        per_node = TeamSpec(
            "t",
            gpu_quota=pool.gpus_per_node,
            cpu_quota=allocatable_vcpus(pool),
            memory_quota_gib=allocatable_memory_gib(pool),
        )
        (quota,) = team_flavor_quotas(per_node, (pool,))
        assert cpu_request_millicores(pool) == quota.cpu * 1000
        assert memory_request_mib(pool) == quota.memory_gib * 1024
