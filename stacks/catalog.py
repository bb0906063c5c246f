"""Checks of the stack config against AWS's catalog for the region.

They run after the static checks and before any cloud resource is declared: is each
pool's instance type offered in the VPC's zones, does it have EFA where EFA is asked
for, GPUs where the pool is a GPU pool, the zone an EFA pool is pinned to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from modules.aws.instance_types import InstanceTypeInfo
from modules.aws.node_pool import node_pool_profile, pool_zones
from modules.k8s.spark.spec import sizing_problems
from modules.k8s.tenancy.quotas import quota_problems
from modules.validation import Problem

from .config import PROJECT, StackConfig
from .config_parsing import stack_key

Lookup = Callable[[str], InstanceTypeInfo | None]


def catalog_problems(
    config: StackConfig, vpc_zones: tuple[str, ...], catalog: Mapping[str, InstanceTypeInfo | None]
) -> list[str]:
    """Every pool problem the region's catalog reveals, one line each.

    Args:
        config: the (statically valid) stack config.
        vpc_zones: the zones the VPC spans.
        catalog: instance type name -> its catalog data, ``None`` for unknown types.
    """
    problems: list[str] = []
    for index, pool in enumerate(config.node_pools):
        key = f"{PROJECT}:nodePools[{index}]"

        def fail(field: str, value: object, expected: str, key: str = key) -> None:
            problems.append(Problem(field, value, expected).describe(f"{key}.{field}"))

        info = catalog.get(pool.instance_type)
        if info is None:
            fail(
                "instanceType",
                pool.instance_type,
                f"{config.region} does not offer this instance type (check the spelling)",
            )
            continue
        if not pool_zones(pool, info, vpc_zones):
            offered = ", ".join(info.offered_zones) or "none"
            fail(
                "instanceType",
                pool.instance_type,
                f"not offered in the VPC's zones ({', '.join(vpc_zones)}); "
                f"zones offering it: {offered}",
            )
        if pool.efa and not info.efa_supported:
            fail(
                "efa",
                True,
                f"{pool.instance_type} does not support EFA; set efa: false or pick an EFA type",
            )
        if pool.zone is not None and pool.zone not in info.offered_zones:
            fail(
                "zone",
                pool.zone,
                f"{pool.instance_type} is offered in: {', '.join(info.offered_zones) or 'no zone'}",
            )
        if pool.role == "gpu" and not info.gpu_count:
            fail(
                "instanceType",
                pool.instance_type,
                "a gpu pool needs an instance type with NVIDIA GPUs",
            )
        if pool.role != "gpu" and info.gpu_count:
            fail(
                "role", pool.role, f"{pool.instance_type} has GPUs: declare the pool with role gpu"
            )
    if not problems:
        problems += _quota_problems(config, vpc_zones, catalog)
    return problems


def _quota_problems(
    config: StackConfig, vpc_zones: tuple[str, ...], catalog: Mapping[str, InstanceTypeInfo | None]
) -> list[str]:
    """Team guarantees the pools cannot honour at their maximum size (node shapes from
    the catalog; see `modules.k8s.tenancy.quotas.quota_problems`)."""
    profiles = []
    for spec in config.node_pools:
        info = catalog[spec.instance_type]
        assert info is not None  # unknown types were reported above
        profiles.append(node_pool_profile(spec, info, pool_zones(spec, info, vpc_zones)))
    problems = quota_problems(config.teams, profiles)
    if config.spark.enabled:  # each Spark job's driver fits one node of its pool
        problems += sizing_problems(config.spark, profiles)
    return [p.describe(f"{PROJECT}:{stack_key(p.field)}") for p in problems]
