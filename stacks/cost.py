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
from modules.k8s.gateway.spec import LlmGatewaySpec

from .config import PROJECT, StackConfig
from .config_parsing import ConfigError
from .cost_config import OnPremPricing
from .fleet import known_stacks, load_stack
from .pricing import HOURS_PER_MONTH, PriceSnapshot, PricingError, load_snapshot, snapshot_path


@dataclass(frozen=True)
class PoolCost:
    """One pool's hourly price per node (None: withheld, no real price) and its size.

    Args:
        pool: the pool's name.
        priced_as: what the price is for (an instance type, or the site's node shape).
        usd_per_node_hour: a real price, or None when the snapshot has none for the type.
        min_size: fewest nodes.
        max_size: most nodes.
        gpus_per_node: GPUs per node (0 for CPU pools).
    """

    pool: str
    priced_as: str
    usd_per_node_hour: float | None
    min_size: int
    max_size: int
    gpus_per_node: int = 0

    @property
    def monthly_min_usd(self) -> float | None:
        if self.usd_per_node_hour is None:
            return None
        return self.usd_per_node_hour * HOURS_PER_MONTH * self.min_size

    @property
    def monthly_max_usd(self) -> float | None:
        if self.usd_per_node_hour is None:
            return None
        return self.usd_per_node_hour * HOURS_PER_MONTH * self.max_size

    @property
    def node_hours(self) -> tuple[int, int]:
        """Node-hours per month at min and max size."""
        return HOURS_PER_MONTH * self.min_size, HOURS_PER_MONTH * self.max_size

    @property
    def gpu_hours(self) -> tuple[int, int]:
        """GPU-hours per month at min and max size."""
        low, high = self.node_hours
        return low * self.gpus_per_node, high * self.gpus_per_node


def onprem_node_hour(pricing: OnPremPricing, gpus: int, vcpus: int, memory_gib: int) -> float:
    """An on-premises node's hourly price on the same terms as a cloud instance."""
    return (
        gpus * pricing.gpu_hour_usd
        + vcpus * pricing.cpu_hour_usd
        + memory_gib * pricing.memory_gib_hour_usd
    )


def withheld_pools(config: StackConfig, snapshot: PriceSnapshot) -> list[str]:
    """The AWS pools whose instance type has no real price in the snapshot (unverified
    snapshot, or no price from its source): their dollar figures are withheld."""
    if config.target != "aws":
        return []
    return [p.name for p in config.node_pools if snapshot.price(p.instance_type) is None]


def price_problems(
    config: StackConfig, snapshot: PriceSnapshot, *, budgets: bool = True
) -> list[str]:
    """What keeps the stack from being costed: one line each (empty: fine).

    An AWS pool's instance type must be in the snapshot (its shape sizes quotas and
    node-hours); a type there without a real price is not a problem by itself (its
    figures are withheld), but budgets need real prices for every pool (left out with
    ``budgets=False``: `make cost` reports withheld figures rather than refusing)."""
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
    # Types missing from the snapshot are reported above; these are there, unpriced.
    withheld = [
        p.name
        for p in config.node_pools
        if config.target == "aws"
        and p.instance_type in snapshot.instance_types
        and snapshot.price(p.instance_type) is None
    ]
    if budgets and config.budgets and withheld:
        problems.append(
            f"{PROJECT}:budgets: the {snapshot.region} snapshot has no verified price for "
            f"pool(s) {', '.join(withheld)}, and a budget needs real prices: run "
            "`make prices-refresh` (AWS credentials), or remove the budgets"
        )
    return problems


def pool_costs(config: StackConfig, snapshot: PriceSnapshot) -> list[PoolCost]:
    """Every pool of the stack, priced where a real price exists (call after
    `price_problems` found nothing)."""
    if config.target == "aws":
        return [
            PoolCost(
                pool.name,
                pool.instance_type,
                snapshot.price(pool.instance_type),
                pool.min_size,
                pool.max_size,
                snapshot.instance_types[pool.instance_type].gpus,
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
            pool.gpus_per_node,
        )
        for pool in config.onprem_node_pools
    ]


def unit_prices(config: StackConfig, snapshot: PriceSnapshot) -> UnitPrices | None:
    """The prices OpenCost applies to every node of the stack's cluster, or None when
    a price they need is withheld (then OpenCost gets no prices at all).

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
    if withheld_pools(config, snapshot):
        return None
    types = snapshot.instance_types
    system = next(types[p.instance_type] for p in config.node_pools if p.role == "system")
    system_price = snapshot.price(system.instance_type)
    assert system_price is not None  # withheld_pools found none
    cpu = system_price / 2 / system.vcpus
    memory = system_price / 2 / system.memory_gib
    gpu_types = [types[p.instance_type] for p in config.node_pools if types[p.instance_type].gpus]
    gpu = 0.0
    if gpu_types:
        big = max(gpu_types, key=lambda t: (t.gpus, snapshot.price(t.instance_type) or 0.0))
        big_price = snapshot.price(big.instance_type) or 0.0
        gpu = max(big_price - big.vcpus * cpu - big.memory_gib * memory, 0.0) / big.gpus
    source = f"AWS {snapshot.region} on-demand, {snapshot.citation()}"
    return UnitPrices(cpu, memory, gpu, source)


def cost_inputs(config: StackConfig, snapshot: PriceSnapshot, cluster_id: str) -> CostInputs | None:
    """Cost allocation's inputs for the stack (OpenCost prices, team budgets), or None
    when prices are withheld: the cluster then gets no OpenCost, whose dollar figures
    would not be real (budgets are refused by `price_problems` in that case)."""
    prices = unit_prices(config, snapshot)
    if prices is None:
        return None
    return CostInputs(
        cluster_id=cluster_id,
        prices=prices,
        budgets=tuple((b.team, b.monthly_usd) for b in config.budgets),
    )


def _usd(value: float | None) -> str:
    return "withheld" if value is None else f"{value:,.2f}"


def render(stack: str, costs: Sequence[PoolCost], snapshot: PriceSnapshot, onprem: bool) -> str:
    """The `make cost` report: dollars only where every figure is a real price,
    node-hours and GPU-hours always."""
    lines = [f"Monthly compute cost of stack {stack} ({HOURS_PER_MONTH} h/month, USD)", ""]
    header = (
        f"{'pool':<14} {'priced as':<32} {'$/node-h':>10} {'nodes':>7} "
        f"{'min/month':>13} {'max/month':>13}"
    )
    lines += [header, "-" * len(header)]
    for c in costs:
        rate = "withheld" if c.usd_per_node_hour is None else f"{c.usd_per_node_hour:.5f}"
        lines.append(
            f"{c.pool:<14} {c.priced_as:<32} {rate:>10} "
            f"{f'{c.min_size}-{c.max_size}':>7} "
            f"{_usd(c.monthly_min_usd):>13} {_usd(c.monthly_max_usd):>13}"
        )
    withheld = [c.pool for c in costs if c.usd_per_node_hour is None]
    low = sum(c.monthly_min_usd or 0.0 for c in costs)
    high = sum(c.monthly_max_usd or 0.0 for c in costs)
    total_low, total_high = (None, None) if withheld else (low, high)
    lines += [
        "-" * len(header),
        f"{'total':<67} {_usd(total_low):>13} {_usd(total_high):>13}",
        "",
    ]
    capacity = (
        f"{'pool':<14} {'node-h min/month':>18} {'node-h max/month':>18} "
        f"{'GPU-h min':>12} {'GPU-h max':>12}"
    )
    lines += [capacity, "-" * len(capacity)]
    for c in costs:
        (nl, nh), (gl, gh) = c.node_hours, c.gpu_hours
        lines.append(f"{c.pool:<14} {nl:>18,} {nh:>18,} {gl:>12,} {gh:>12,}")
    lines.append("")
    if onprem:
        lines.append("Prices: the stack's onpremPricing (per GPU-hour, vCPU-hour, GiB-hour).")
    elif snapshot.verified:
        lines.append(
            f"Prices: AWS {snapshot.region} on-demand (Linux, shared tenancy), from "
            f"{snapshot.citation()}."
        )
    else:
        lines.append(
            f"Prices: the {snapshot.region} snapshot is NOT verified (no cited source): "
            "every dollar figure is withheld."
        )
    if withheld:
        lines.append(
            f"Withheld: no real price for pool(s) {', '.join(withheld)}; node-hours and "
            "GPU-hours only, until `make prices-refresh` (AWS credentials) writes verified "
            "prices."
        )
    lines.append(
        "Not included: storage, data transfer"
        + ("." if onprem else ", EKS control plane, NAT gateways, VPN or Direct Connect.")
    )
    return "\n".join(lines)


def render_llm_gateway(spec: LlmGatewaySpec) -> str:
    """The LLM gateway's part of `make cost`: per team and model, the price per million
    tokens the stack file sets (its chargeback price), and the most a team's monthly
    token budget can cost (every token at its dearest allowed price)."""
    header = (
        f"{'team':<14} {'model':<24} {'$/M input':>10} {'$/M output':>11} "
        f"{'tokens/month':>15} {'max $/month':>13}"
    )
    lines = ["LLM gateway: price per million tokens, per team (USD)", "", header]
    lines.append("-" * len(header))
    for team in spec.teams:
        prices = [spec.price(model) for model in team.models]
        dearest = max(
            max(p.input_usd_per_million_tokens, p.output_usd_per_million_tokens) for p in prices
        )
        for index, price in enumerate(prices):
            budget = f"{team.tokens_per_month:,}" if index == 0 else ""
            ceiling = f"{team.tokens_per_month / 1e6 * dearest:,.2f}" if index == 0 else ""
            lines.append(
                f"{team.team if index == 0 else '':<14} {price.model:<24} "
                f"{price.input_usd_per_million_tokens:>10.4f} "
                f"{price.output_usd_per_million_tokens:>11.4f} {budget:>15} {ceiling:>13}"
            )
    lines += [
        "",
        "Prices: the stack's llmGateway.prices (its chargeback rates per million tokens, set "
        "in the stack file; not cloud prices). Tokens/month: each team's budget (30-day "
        "windows). The serving pools' compute is in the table above; what the teams "
        "actually spent is on the cost dashboard.",
    ]
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
    problems = price_problems(config, snapshot, budgets=False)
    if problems:
        print(f"error: {ConfigError(problems).render(options.stack)}", file=sys.stderr)
        return 2
    costs = pool_costs(config, snapshot)
    print(render(options.stack, costs, snapshot, config.target == "onprem"))
    if config.llm_gateway is not None:
        print()
        print(render_llm_gateway(config.llm_gateway))
    return 0


if __name__ == "__main__":
    sys.exit(main())
