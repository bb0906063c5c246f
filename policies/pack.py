"""The rules as `pulumi_policy` policies: the one path both the pack and the review take.

`validate_resource` / `validate_stack` adapt a rule to the engine's callback
(``(args, report_violation)``): they build the rule's view of the resources, read the
rule's pack config, apply exemptions (pack-config ones and, for ``k8s-*`` rules, the
object's exception annotation) and report what remains. Exemptions that applied are
recorded in `applied_exemptions` for whoever is listening (the offline review lists
them; inside ``pulumi preview`` nobody is).

Residency cannot be configured away: `level_problem` refuses a level below a ``uae-*``
rule's default, `Settings` refuses regions and countries outside the UAE, and
`ConfigCheckingAnalyzer` applies both to the configuration the engine sends the pack
before it analyzes anything, so a bad config file stops ``pulumi preview`` at load.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]  # no stubs; covered by test_pack_entry
from google.protobuf import json_format
from pulumi.runtime import proto
from pulumi_policy import (
    EnforcementLevel,
    PolicyComplianceFramework,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidation,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import Policy, _PolicyAnalyzerServicer

from policies.k8s import EXCEPTION_ANNOTATION_PREFIX, exception_reason
from policies.model import ResourceView, Rule, StackView, urn_name
from policies.rules import ALL_RULES, RULES_BY_ID
from policies.settings import CONFIG_SCHEMAS, PackConfigError, Settings

PACK_NAME = "uae-sovereign-gpu-platform"
RESIDENCY_PREFIX = "uae-"

# How much an enforcement level enforces; remediate is reported as mandatory.
_STRENGTH = {
    EnforcementLevel.DISABLED: 0,
    EnforcementLevel.ADVISORY: 1,
    EnforcementLevel.MANDATORY: 2,
    EnforcementLevel.REMEDIATE: 2,
}


def is_residency(rule: Rule) -> bool:
    """The ``uae-*`` rules: where data, keys, images and sites may be."""
    return rule.id.startswith(RESIDENCY_PREFIX)


def weakens(rule: Rule, level: EnforcementLevel) -> bool:
    """True when ``level`` enforces less than the rule's default (disabled, or advisory
    for a mandatory rule)."""
    return _STRENGTH[level] < _STRENGTH[rule.enforcement]


def level_problem(rule: Rule, level: EnforcementLevel) -> str | None:
    """Why ``level`` may not be configured for ``rule`` (None when it may).

    Residency rules keep at least their default level: a config file must not be able
    to switch off or soften the rules that keep data in the UAE.
    """
    if not (is_residency(rule) and weakens(rule, level)):
        return None
    how = "disabled" if level == EnforcementLevel.DISABLED else "made advisory"
    return f"{rule.id}: residency rules cannot be {how}; it stays {rule.enforcement.value}"


def engine_config_problems(
    configs: Mapping[str, tuple[EnforcementLevel, Mapping[str, Any]]],
) -> list[str]:
    """Problems of the configuration the engine sends (policy -> (level, properties))."""
    problems: list[str] = []
    for name, (level, properties) in configs.items():
        rule = RULES_BY_ID.get(name)
        if rule is None:
            continue
        problem = level_problem(rule, level)
        if problem:
            problems.append(problem)
        try:
            Settings.from_config(properties)
        except PackConfigError as err:
            problems.append(f"{name}: {err}")
    return problems


class ConfigCheckingAnalyzer(_PolicyAnalyzerServicer):
    """The SDK's analyzer service, refusing pack config that weakens residency.

    The engine hands the pack its configuration (each policy's enforcement level, with
    ``all`` already resolved, and its properties) in ``Configure`` before any analysis;
    an error there stops ``pulumi preview`` / ``pulumi up`` with the message below.
    `pulumi_policy.PolicyPack` offers no hook for this, so the pack's entry installs this
    subclass in its place (``policies/__main__.py``); tests/policies/test_pack_entry.py
    drives it over gRPC, so an SDK change that bypasses it fails there.
    """

    def Configure(  # noqa: N802 (the gRPC method's name)
        self, request: proto.ConfigureAnalyzerRequest, context: grpc.ServicerContext
    ) -> Any:
        configs = {
            name: (
                self._convert_enforcement_level(entry.enforcementLevel),
                json_format.MessageToDict(entry.properties),
            )
            for name, entry in request.policyConfig.items()
        }
        problems = engine_config_problems(configs)
        if problems:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"policy pack {PACK_NAME}: the pack config cannot be used: " + "; ".join(problems),
            )
        return super().Configure(request, context)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class AppliedExemption:
    """A violation that an exemption or exception annotation set aside.

    Args:
        rule_id: the rule whose violation was set aside.
        urn: the resource.
        message: the violation it would have been.
        reason: the recorded reason.
        source: ``annotation`` (on the Kubernetes object) or ``pack config``.
        expires: the exemption's last day (None for annotations).
    """

    rule_id: str
    urn: str
    message: str
    reason: str
    source: str
    expires: dt.date | None = None


_listener: ContextVar[list[AppliedExemption] | None] = ContextVar("exemptions", default=None)


@contextmanager
def recording_exemptions() -> Iterator[list[AppliedExemption]]:
    """Collect every exemption applied inside the block."""
    applied: list[AppliedExemption] = []
    token = _listener.set(applied)
    try:
        yield applied
    finally:
        _listener.reset(token)


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _set_aside(
    rule: Rule, settings: Settings, urn: str, resource: ResourceView | None, message: str
) -> tuple[bool, str]:
    """(True, "") when an exemption covers the violation; else (False, the message to
    report, noting an expired exemption)."""
    log = _listener.get()
    if rule.annotation_exceptions and resource is not None:
        reason = exception_reason(resource, rule.id)
        if reason:
            if log is not None:
                log.append(AppliedExemption(rule.id, urn, message, reason, "annotation"))
            return True, ""
        if reason == "":
            message += f" (annotation {EXCEPTION_ANNOTATION_PREFIX}{rule.id} gives no reason)"
    today = _today()
    for exemption in settings.exemptions:
        if not exemption.matches(urn, urn_name(urn)):
            continue
        if exemption.active(today):
            if log is not None:
                log.append(
                    AppliedExemption(
                        rule.id, urn, message, exemption.reason, "pack config", exemption.expires
                    )
                )
            return True, ""
        message += f" (exemption expired on {exemption.expires.isoformat()})"
    return False, message


def validate_resource(rule: Rule) -> ResourceValidation:
    """The engine callback of a resource rule."""

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource = ResourceView.from_args(args)
        if not rule.applies_to(resource):
            return
        settings = Settings.from_config(args.get_config())
        for message in rule.check_resource(resource, settings):
            exempt, text = _set_aside(rule, settings, resource.urn, resource, message)
            if not exempt:
                report_violation(text, None)

    return validate


def validate_stack(rule: Rule) -> StackValidation:
    """The engine callback of a stack rule."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack = StackView.of(args.resources)
        settings = Settings.from_config(args.get_config())
        index = stack.by_urn()
        for urn, message in rule.check_stack(stack, settings):
            if urn is None:
                report_violation(message, None)
                continue
            exempt, text = _set_aside(rule, settings, urn, index.get(urn), message)
            if not exempt:
                report_violation(text, urn)

    return validate


def config_schema(rule: Rule) -> PolicyConfigSchema:
    keys = (*rule.config_keys, "exemptions")
    return PolicyConfigSchema({key: CONFIG_SCHEMAS[key] for key in keys})


def _framework(rule: Rule) -> PolicyComplianceFramework:
    return PolicyComplianceFramework(
        name="UAE sovereign platform baseline",
        version="1",
        reference="; ".join(rule.controls),
    )


def to_policy(rule: Rule) -> Policy:
    """The `pulumi_policy` policy of one rule, with all its metadata."""
    metadata: dict[str, Any] = {
        "name": rule.id,
        "description": rule.description,
        "enforcement_level": rule.enforcement,
        "config_schema": config_schema(rule),
        "severity": rule.severity,
        "framework": _framework(rule),
        "tags": list(rule.controls),
        "remediation_steps": rule.remediation,
    }
    if rule.kind == "resource":
        return ResourceValidationPolicy(validate=validate_resource(rule), **metadata)
    return StackValidationPolicy(validate=validate_stack(rule), **metadata)


def all_policies() -> list[Policy]:
    return [to_policy(rule) for rule in ALL_RULES]
