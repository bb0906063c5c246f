"""`uae-state-and-secrets-in-region`: the state backend and secrets provider the program
found (the root stack's `residency` output) are in the UAE; the review's residency
evidence lists them and the account trail, and says what a plan cannot show."""

from __future__ import annotations

from typing import Any

from tests.policies.builder import PlanBuilder, compliant_plan
from tests.policies.conftest import failing_rules, messages, review

RULE = "uae-state-and-secrets-in-region"
UAE_BACKEND = "s3://uae-gpu-platform-state-123456789012-me-central-1?region=me-central-1"
UAE_SECRETS = "awskms://alias/uae-gpu-platform-secrets?region=me-central-1"


def residency(
    secrets_region: str | None = "me-central-1", url: str = UAE_SECRETS
) -> dict[str, Any]:
    return {
        "stateBackend": {"url": UAE_BACKEND, "source": "--backend", "region": "me-central-1"},
        "secretsProvider": {
            "url": url,
            "source": "stacks/Pulumi.test.yaml:3",
            "region": secrets_region,
        },
    }


def with_root_stack(plan: dict[str, Any], outputs: dict[str, Any] | None) -> dict[str, Any]:
    """``plan`` with the root stack resource first, carrying ``outputs``."""
    builder = PlanBuilder()
    builder.add("pulumi:pulumi:Stack", "uae-gpu-platform-test", {}, custom=False, outputs=outputs)
    plan["steps"] = builder.steps + plan["steps"]
    return plan


def test_a_uae_backend_and_secrets_provider_pass_and_are_evidence() -> None:
    plan = with_root_stack(compliant_plan(), {"residency": residency()})
    result = review(plan)
    assert failing_rules(plan) == set()
    (rule,) = [r for r in result.results if r.rule.id == RULE]
    assert rule.evaluated == 1 and rule.passed
    rows = {row.type: row for row in result.evidence}
    assert rows["pulumi:state-backend"].location == "me-central-1"
    assert UAE_BACKEND in rows["pulumi:state-backend"].name
    assert rows["pulumi:secrets-provider"].location == "me-central-1"
    assert "stacks/Pulumi.test.yaml:3" in rows["pulumi:secrets-provider"].name
    assert "verified by `make audit`" in rows["aws:cloudtrail (account trail)"].location


def test_a_foreign_secrets_provider_fails_the_verdict() -> None:
    foreign = "awskms://alias/k?region=eu-west-1"
    plan = with_root_stack(compliant_plan(), {"residency": residency("eu-west-1", foreign)})
    assert failing_rules(plan) == {RULE}
    (message,) = messages(plan, RULE)
    assert f"secrets provider {foreign}" in message and "in eu-west-1" in message
    assert not review(plan).passed


def test_a_passphrase_secrets_provider_fails_the_verdict() -> None:
    plan = with_root_stack(compliant_plan(), {"residency": residency(None, "passphrase")})
    assert "in no UAE region" in messages(plan, RULE)[0]


def test_a_root_stack_without_the_output_cannot_be_checked() -> None:
    plan = with_root_stack(compliant_plan(), None)
    result = review(plan)
    unknown = [f for f in result.findings if f.rule_id == RULE]
    assert [f.unknown for f in unknown] == [True]
    rows = {row.type: row for row in result.evidence}
    assert rows["pulumi:secrets-provider"].location.startswith("not shown in this plan")


def test_the_shipped_plans_show_their_state_and_secrets() -> None:
    from tests.conftest import shipped_plan  # noqa: PLC0415 - builds the plan on demand

    _, document = shipped_plan("smb-cpu")
    result = review(document)
    (rule,) = [r for r in result.results if r.rule.id == RULE]
    assert rule.evaluated == 1 and rule.passed
    rows = {row.type: row for row in result.evidence}
    assert rows["pulumi:secrets-provider"].location == "me-central-1"
    assert "stacks/Pulumi.smb-cpu.yaml:" in rows["pulumi:secrets-provider"].name
