"""Every rule of the pack, one module per concern; `ALL_RULES` is the pack's content.

Importing this package checks that every entry of the rule catalogue
(policies/catalogue.yaml) has exactly one rule function (`CatalogueError` otherwise).
"""

from __future__ import annotations

from policies.catalogue import check_complete
from policies.model import Rule
from policies.rules import (
    backup,
    custody,
    database,
    encryption,
    exposure,
    features,
    fleet,
    gateway,
    identity,
    kubernetes,
    llm,
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
    """A module's rules in the order it defines them: each `Rule`, and each tuple of
    rules (a table's, e.g. `kubernetes.POD_SPEC_RULES`) in its place."""
    found: list[Rule] = []
    for value in vars(module).values():
        if isinstance(value, Rule):
            found.append(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Rule) for v in value):
            found.extend(value)
    return found


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
        gateway,
        llm,
    )
    for rule in _rules_of(module)
)
RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}
check_complete(ALL_RULES)
