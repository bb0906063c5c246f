"""`make cost STACK=...`: a stack's monthly compute cost at its pools' min and max sizes.

Offline, from the same prices OpenCost is given: AWS pools from the dated price
snapshot (`stacks.pricing`), on-premises pools from the stack's ``onpremPricing``
(per GPU-hour, vCPU-hour and GiB-hour). A month is 730 hours. Storage, network and
control-plane charges are not included (the estimate says so).

Usage: ``python -m stacks.cost STACK``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from modules.k8s.cost.spec import CostInputs, UnitPrices

from .config import PROJECT, StackConfig
from .config_parsing import ConfigError
from .cost_config import OnPremPricing
from .fleet import known_stacks, load_stack
from .pricing import HOURS_PER_MONTH, PriceSnapshot, PricingError, load_snapshot, snapshot_path


@dataclass(frozen=True)
class PoolCost:
    """One pool's hourly price per node and its monthly cost at min and max size."""

    pool: str
    priced_as: str
    usd_per_node_hour: float
    min_size: int
    max_size: int

    @property
    def monthly_min_usd(self) -> float:
        return self.usd_per_node_hour * HOURS_PER_MONTH * self.min_size

    @property
    def monthly_max_usd(self) -> float:
        return self.usd_per_node_hour * HOURS_PER_MONTH * self.max_size


def onprem_node_hour(pricing: OnPremPricing, gpus: int, vcpus: int, memory_gib: int) -> float:
    """An on-premises node's hourly price on the same terms as a cloud instance."""
    return (
        gpus * pricing.gpu_hour_usd
        + vcpus * pricing.cpu_hour_usd
        + memory_gib * pricing.memory_gib_hour_usd
    )


def price_problems(config: StackConfig, snapshot: PriceSnapshot) -> list[str]:
    """A price missing for a pool: one line per pool (empty: every pool is priced)."""
    problems = []
    if config.target == "aws":
        for i, pool in enumerate(config.node_pools):
            if pool.instance_type not in snapshot.instance_types:
                problems.append(
                    f"{PROJECT}:nodePools[{i}].instanceType: got {pool.instance_type!r}; no price "
                    f"in the {snapshot.region} snapshot of {snapshot.retrieved}: run "
                    "`python -m stacks.pricing refresh` (it prices every type the stacks use)"
                )
    elif config.onprem_pricing is None:
        problems.append(
            f"{PROJECT}:onpremPricing: missing; an onprem stack states its prices "
            "(gpuHourUsd, cpuHourUsd, memoryGibHourUsd) so OpenCost and `make cost` can price it"
        )
    return problems


def pool_costs(config: StackConfig, snapshot: PriceSnapshot) -> list[PoolCost]:
    """Every pool of the stack, priced (call after `price_problems` found nothing)."""
    if config.target == "aws":
        return [
            PoolCost(
                pool.name,
                pool.instance_type,
                snapshot.instance_types[pool.instance_type].usd_per_hour,
                pool.min_size,
                pool.max_size,
            )
            for pool in config.node_pools
        ]
    assert config.onprem_pricing is not None
    return [
        PoolCost(
            pool.name,
            f"{pool.gpus_per_node} GPU, {pool.vcpus} vCPU, {pool.memory_gib} GiB",
            onprem_node_hour(
                config.onprem_pricing, pool.gpus_per_node, pool.vcpus, pool.memory_gib
            ),
            pool.min_size,
            pool.max_size,
        )
        for pool in config.onprem_node_pools
    ]


def unit_prices(config: StackConfig, snapshot: PriceSnapshot) -> UnitPrices:
    """The prices OpenCost applies to every node of the stack's cluster.

    On premises: the site's own prices. On AWS, OpenCost's custom provider takes one
    price per vCPU-hour, GiB-hour and GPU-hour for the whole cluster, so they are
    derived from the snapshot: the system pool's instance price split evenly between
    its vCPUs and its memory, and the GPU price what remains of the largest GPU
    pool's instance price, per GPU. A GPU node is then priced exactly as AWS lists
    it; other CPU instance types approximately. (Call after `price_problems`.)
    """
    if config.target == "onprem":
        assert config.onprem_pricing is not None
        p = config.onprem_pricing
        return UnitPrices(p.cpu_hour_usd, p.memory_gib_hour_usd, p.gpu_hour_usd, "site prices")
    types = snapshot.instance_types
    system = next(types[p.instance_type] for p in config.node_pools if p.role == "system")
    cpu = system.usd_per_hour / 2 / system.vcpus
    memory = system.usd_per_hour / 2 / system.memory_gib
    gpu_types = [types[p.instance_type] for p in config.node_pools if types[p.instance_type].gpus]
    gpu = 0.0
    if gpu_types:
        big = max(gpu_types, key=lambda t: (t.gpus, t.usd_per_hour))
        gpu = max(big.usd_per_hour - big.vcpus * cpu - big.memory_gib * memory, 0.0) / big.gpus
    source = f"AWS {snapshot.region} snapshot of {snapshot.retrieved}"
    return UnitPrices(cpu, memory, gpu, source + ("" if snapshot.verified else " (unverified)"))


def cost_inputs(config: StackConfig, snapshot: PriceSnapshot, cluster_id: str) -> CostInputs:
    """Cost allocation's inputs for the stack (OpenCost prices, team budgets)."""
    return CostInputs(
        cluster_id=cluster_id,
        prices=unit_prices(config, snapshot),
        budgets=tuple((b.team, b.monthly_usd) for b in config.budgets),
    )


def render(stack: str, costs: Sequence[PoolCost], snapshot: PriceSnapshot, onprem: bool) -> str:
    lines = [f"Monthly compute cost of stack {stack} ({HOURS_PER_MONTH} h/month, USD)", ""]
    header = (
        f"{'pool':<14} {'priced as':<32} {'$/node-h':>10} {'nodes':>7} "
        f"{'min/month':>13} {'max/month':>13}"
    )
    lines += [header, "-" * len(header)]
    for c in costs:
        lines.append(
            f"{c.pool:<14} {c.priced_as:<32} {c.usd_per_node_hour:>10.4f} "
            f"{f'{c.min_size}-{c.max_size}':>7} "
            f"{c.monthly_min_usd:>13,.2f} {c.monthly_max_usd:>13,.2f}"
        )
    low = sum(c.monthly_min_usd for c in costs)
    high = sum(c.monthly_max_usd for c in costs)
    lines += ["-" * len(header), f"{'total':<67} {low:>13,.2f} {high:>13,.2f}", ""]
    if onprem:
        lines.append("Prices: the stack's onpremPricing (per GPU-hour, vCPU-hour, GiB-hour).")
    else:
        lines.append(
            f"Prices: {snapshot.region} snapshot of {snapshot.retrieved}: {snapshot.source}."
        )
        if not snapshot.verified:
            lines.append(
                "WARNING: this snapshot is UNVERIFIED (see its note); refresh it with "
                "`python -m stacks.pricing refresh` before relying on these figures."
            )
    lines.append(
        "Not included: storage, data transfer"
        + ("." if onprem else ", EKS control plane, NAT gateways.")
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help=f"stack name ({', '.join(known_stacks())})")
    options = parser.parse_args(argv)
    config = load_stack(options.stack)
    if config is None:
        print(
            f"error: unknown stack '{options.stack}': no stacks/Pulumi.{options.stack}.yaml "
            f"(stacks: {', '.join(known_stacks())})",
            file=sys.stderr,
        )
        return 2
    if isinstance(config, ConfigError):
        print(f"error: {config.render(options.stack)}", file=sys.stderr)
        return 2
    try:
        snapshot = load_snapshot(snapshot_path(config.region))
    except PricingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    problems = price_problems(config, snapshot)
    if problems:
        print(f"error: {ConfigError(problems).render(options.stack)}", file=sys.stderr)
        return 2
    costs = pool_costs(config, snapshot)
    print(render(options.stack, costs, snapshot, config.target == "onprem"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
