"""The rule tests' twins: a plan that passes every rule, and copies of it broken one
property at a time, each failing exactly one rule with a message that says why.

A test module with such a plan and its cases gets both tests from `twin_tests`:

    test_the_plan_passes_every_rule, test_the_broken_plan_fails_exactly_the_rule = (
        twin_tests(make_plan, CASES)
    )
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from policies.review.evaluate import Review
from tests.policies.conftest import review

Plan = dict[str, Any]
Mutation = Callable[[Plan], None]
#: (id, mutation, the one rule it breaks, a fragment of that rule's message)
Case = tuple[str, Mutation, str, str]


def passes_every_rule(plan: Mapping[str, Any]) -> Review:
    """The review of ``plan``, which has no violation and no value it could not check."""
    result = review(plan)
    assert [(f.rule_id, f.message) for f in result.violations] == []
    assert [f for f in result.findings if f.unknown] == []
    assert result.passed
    return result


def fails_exactly(plan: Plan, mutate: Mutation, rule_id: str, fragment: str) -> None:
    """``plan`` broken by ``mutate`` fails ``rule_id`` alone, with ``fragment`` in one of
    its messages."""
    mutate(plan)
    violations = review(plan).violations
    assert {f.rule_id for f in violations} == {rule_id}
    found = [f.message for f in violations if f.rule_id == rule_id]
    assert any(fragment in message for message in found), found


def twin_tests(
    make_plan: Callable[[], Plan], cases: Sequence[Case]
) -> tuple[Callable[[], None], Callable[[Mutation, str, str], None]]:
    """(the test that ``make_plan()`` passes every rule, the test of every case, by id)."""

    def passes() -> None:
        passes_every_rule(make_plan())

    @pytest.mark.parametrize(
        ("mutate", "rule_id", "fragment"), [c[1:] for c in cases], ids=[c[0] for c in cases]
    )
    def fails(mutate: Mutation, rule_id: str, fragment: str) -> None:
        fails_exactly(make_plan(), mutate, rule_id, fragment)

    return passes, fails


def breaking_caught(shipped: Plan, mutate: Mutation, rule_id: str) -> None:
    """A copy of a shipped plan broken by ``mutate`` fails ``rule_id`` besides what the
    plan failed already (advisories), and fails the review."""
    before = {f.rule_id for f in review(shipped).violations}
    assert rule_id not in before
    plan = copy.deepcopy(shipped)
    mutate(plan)
    assert {f.rule_id for f in review(plan).violations} - before == {rule_id}
    assert not review(plan).passed
