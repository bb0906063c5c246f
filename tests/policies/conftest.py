"""Shared helpers of the policy tests: review a plan document in memory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
