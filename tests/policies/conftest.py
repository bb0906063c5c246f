"""Shared helpers of the policy tests: review a plan document in memory."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from policies.review.evaluate import Review, review_plan
from policies.review.plan import parse_plan


def review(plan: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> Review:
    return review_plan(parse_plan(dict(plan), Path("test-plan.json")), config)


def failing_rules(plan: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> set[str]:
    """Ids of the rules with a violation (mandatory or advisory) on ``plan``."""
    return {f.rule_id for f in review(plan, config).violations}


def messages(
    plan: Mapping[str, Any], rule_id: str, config: Mapping[str, Any] | None = None
) -> list[str]:
    return [f.message for f in review(plan, config).violations if f.rule_id == rule_id]


Plan = dict[str, Any]
Mutation = Callable[[Plan], None]
#: (id, mutation, the one rule it breaks, a fragment of that rule's message)
Case = tuple[str, Mutation, str, str]


def broken_cases(cases: Sequence[Case]) -> pytest.MarkDecorator:
    """Parametrize a test over ``cases`` as ``(mutate, rule_id, fragment)``, by id."""
    return pytest.mark.parametrize(
        ("mutate", "rule_id", "fragment"), [c[1:] for c in cases], ids=[c[0] for c in cases]
    )


def passes_every_rule(plan: Mapping[str, Any]) -> Review:
    """The review of ``plan``, which has no violation and no value it could not check."""
    result = review(plan)
    assert [(f.rule_id, f.message) for f in result.violations] == []
    assert [f for f in result.findings if f.unknown] == []
    return result


def fails_exactly(plan: Plan, mutate: Mutation, rule_id: str, fragment: str) -> None:
    """``plan`` broken by ``mutate`` fails ``rule_id`` alone, with ``fragment`` in one of
    its messages."""
    mutate(plan)
    violations = review(plan).violations
    assert {f.rule_id for f in violations} == {rule_id}
    found = [f.message for f in violations if f.rule_id == rule_id]
    assert any(fragment in message for message in found), found
