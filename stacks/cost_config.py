"""The cost sections of a stack file: on-premises prices and team budgets.

Cloud pools are priced from the dated AWS price snapshot (`stacks.pricing`); an
on-premises site has no price list, so its owner states what a GPU-hour, a vCPU-hour
and a GiB-hour of memory cost there, and the site is priced on the same terms as a
cloud pool (OpenCost's custom pricing, ``make cost``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from modules.validation import Checker


def _price_ok(value: float) -> bool:
    return math.isfinite(value) and value >= 0


@dataclass(frozen=True)
class OnPremPricing:
    """What an hour of the site's capacity costs (config key ``onpremPricing``), in USD.

    Args:
        gpu_hour_usd: one GPU for one hour (amortised hardware, power, cooling, space).
        cpu_hour_usd: one vCPU for one hour.
        memory_gib_hour_usd: one GiB of memory for one hour.
    """

    gpu_hour_usd: float
    cpu_hour_usd: float
    memory_gib_hour_usd: float

    def __post_init__(self) -> None:
        check = Checker()
        for name in ("gpu_hour_usd", "cpu_hour_usd", "memory_gib_hour_usd"):
            value = getattr(self, name)
            check.require(_price_ok(value), name, value, "a price of 0 or more (USD)")
        check.done()


@dataclass(frozen=True)
class TeamBudget:
    """A team's monthly budget (an entry of config key ``budgets``).

    Args:
        team: the team (one of ``teams``).
        monthly_usd: the budget in USD per month; alerts fire at 80% and 100% of it.
    """

    team: str
    monthly_usd: float

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            math.isfinite(self.monthly_usd) and self.monthly_usd > 0,
            "monthly_usd",
            self.monthly_usd,
            "a positive number of USD per month",
        )
        check.done()
