"""Every rule of the pack, one module per concern; `ALL_RULES` is the pack's content."""

from __future__ import annotations

from policies.model import Rule
from policies.rules import (
    backup,
    custody,
    database,
    encryption,
    exposure,
    features,
    fleet,
    identity,
    kubernetes,
    pipelines,
    residency,
    serving,
    site_link,
    spark,
    stack,
    state,
    tags,
)


def _rules_of(module: object) -> list[Rule]:
    return [value for value in vars(module).values() if isinstance(value, Rule)]


ALL_RULES: tuple[Rule, ...] = tuple(
    rule
    for module in (
        residency,
        encryption,
        exposure,
        identity,
        kubernetes,
        tags,
        stack,
        state,
        database,
        serving,
        fleet,
        site_link,
        custody,
        backup,
        features,
        pipelines,
        spark,
    )
    for rule in _rules_of(module)
)
RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}
