"""Running the pack's policies over a plan, exactly as the engine would call them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel, StackValidationArgs
from pulumi_policy.proxy import UnknownValueError

from policies import stackconfig
from policies.model import ResourceView, Rule, StackView, TypesIn
from policies.pack import (
    AppliedExemption,
    level_problem,
    recording_exemptions,
    validate_resource,
    validate_stack,
    weakens,
)
from policies.review.evidence import EvidenceRow, evidence_rows
from policies.review.plan import Plan, resource_args, stack_resources
from policies.review.rendered import Unseen, unseen
from policies.rules import ALL_RULES, RULES_BY_ID
from policies.settings import PackConfigError, Settings

LEVELS = {level.value: level for level in EnforcementLevel}


@dataclass(frozen=True)
class Finding:
    """A violation, or a check that could not run during preview.

    Args:
        rule_id: the rule.
        urn: the resource (None for a stack-wide finding).
        message: what is wrong, in the rule's words.
        enforcement: the enforcement level in force (mandatory, advisory).
        unknown: True when the value needed is not known until the update runs.
    """

    rule_id: str
    urn: str | None
    message: str
    enforcement: EnforcementLevel
    unknown: bool = False

    @property
    def resource_type(self) -> str:
        return (
            self.urn.split("::")[2].rsplit("$", 1)[-1]
            if self.urn and self.urn.count("::") >= 3
            else ""
        )


@dataclass
class RuleResult:
    """What one rule found over the plan.

    Args:
        not_evaluated: for a rule that judges Kubernetes objects, the Helm releases and
            operator resources whose workloads it could not see (`policies.review.rendered`).
    """

    rule: Rule
    enforcement: EnforcementLevel
    evaluated: int = 0
    failed: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    exempted: set[str] = field(default_factory=set)
    stack_failed: bool = False
    not_evaluated: tuple[Unseen, ...] = ()

    @property
    def passed(self) -> int:
        """Evaluated resources with no violation, no unknown and no exemption."""
        return max(self.evaluated - len(self.failed | self.unknown | self.exempted), 0)


@dataclass(frozen=True)
class LevelChange:
    """A rule the pack config disabled, or downgraded below its default level.

    Args:
        rule: the rule.
        configured: the level in force (disabled or advisory).
        set_by: the config entry that set it: the rule's own id, or ``all``.
    """

    rule: Rule
    configured: EnforcementLevel
    set_by: str


@dataclass(frozen=True)
class Review:
    """The outcome of reviewing one plan.

    Args:
        level_changes: every rule the pack config disabled or downgraded, so that a
            report never passes a plan over a rule nobody sees was turned off.
    """

    plan: Plan
    results: tuple[RuleResult, ...]
    findings: tuple[Finding, ...]
    exemptions: tuple[AppliedExemption, ...]
    evidence: tuple[EvidenceRow, ...]
    level_changes: tuple[LevelChange, ...] = ()

    @property
    def disabled_rules(self) -> list[str]:
        return [c.rule.id for c in self.level_changes if c.configured == EnforcementLevel.DISABLED]

    @property
    def downgraded_rules(self) -> list[str]:
        return [c.rule.id for c in self.level_changes if c.configured != EnforcementLevel.DISABLED]

    @property
    def violations(self) -> list[Finding]:
        return [f for f in self.findings if not f.unknown]

    @property
    def mandatory_violations(self) -> list[Finding]:
        return [f for f in self.violations if f.enforcement == EnforcementLevel.MANDATORY]

    @property
    def passed(self) -> bool:
        """No mandatory rule failed on what was evaluated."""
        return not self.mandatory_violations

    @property
    def unseen(self) -> list[Unseen]:
        """What some rule could not evaluate, each once."""
        found: dict[str, Unseen] = {}
        for result in self.results:
            for item in result.not_evaluated:
                found.setdefault(item.urn, item)
        return list(found.values())

    @property
    def complete(self) -> bool:
        """Every rule saw everything in its scope."""
        return not any(result.not_evaluated for result in self.results)


def load_policy_config(path: Path | None) -> dict[str, Any]:
    """A pack config file (the ``--policy-pack-config`` format); `PackConfigError` if bad."""
    if path is None:
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise PackConfigError(f"{path}: cannot read it ({err.strerror})") from err
    except json.JSONDecodeError as err:
        raise PackConfigError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}") from err
    if not isinstance(config, Mapping):
        raise PackConfigError(f"{path}: expected an object of rule id -> settings")
    problems = policy_config_problems(config)
    if problems:
        raise PackConfigError(f"{path}: " + "; ".join(problems))
    return dict(config)


def policy_config_problems(config: Mapping[str, Any]) -> list[str]:
    """Every problem of a pack config: unknown rules and keys, bad values, and levels or
    settings that would weaken residency (see `policies.pack.level_problem`)."""
    problems = []
    for key, value in config.items():
        if key != "all" and key not in RULES_BY_ID:
            problems.append(f"unknown rule {key!r}")
        elif isinstance(value, str):
            if value not in LEVELS:
                problems.append(
                    f"{key}: enforcement level {value!r} is not one of {', '.join(LEVELS)}"
                )
        elif isinstance(value, Mapping) and key != "all":
            level = value.get("enforcementLevel")
            if level is not None and level not in LEVELS:
                problems.append(
                    f"{key}.enforcementLevel: {level!r} is not one of {', '.join(LEVELS)}"
                )
            try:
                Settings.from_config(value)
            except PackConfigError as err:
                problems.append(f"{key}: {err}")
            unused = sorted(
                set(value) - {"enforcementLevel", "exemptions", *RULES_BY_ID[key].config_keys}
            )
            if unused:
                problems.append(f"{key}: the rule does not read {', '.join(unused)}")
        else:
            problems.append(f"{key}: expected an enforcement level or an object")
    weakened_by_all = []
    for rule in ALL_RULES:
        level, set_by = _resolved_level(rule, config)
        if level is None or set_by == "default" or not level_problem(rule, level):
            continue
        if set_by == "all":
            weakened_by_all.append(rule.id)
        else:
            problems.append(str(level_problem(rule, level)))
    if weakened_by_all:
        problems.append(
            f'all: "{config["all"]}" would also apply to the residency rules '
            f"{', '.join(weakened_by_all)}, which cannot be disabled or made advisory; give "
            "each of them its own entry with its default level to keep `all` for the others"
        )
    return problems


def _resolved_level(rule: Rule, config: Mapping[str, Any]) -> tuple[EnforcementLevel | None, str]:
    """The level in force and the entry that set it (the rule's id, ``all`` or
    ``default``), resolved the way the Pulumi CLI does: the rule's own entry, else
    ``all``, else the rule's default. None for a level that is not one."""
    own = config.get(rule.id)
    if isinstance(own, str):
        return LEVELS.get(own), rule.id
    if isinstance(own, Mapping) and own.get("enforcementLevel"):
        return LEVELS.get(str(own["enforcementLevel"])), rule.id
    if isinstance(config.get("all"), str):
        return LEVELS.get(config["all"]), "all"
    return rule.enforcement, "default"


def _level(rule: Rule, config: Mapping[str, Any]) -> EnforcementLevel:
    level, _ = _resolved_level(rule, config)
    assert level is not None, "policy_config_problems rejects unknown levels first"
    return level


def level_changes(config: Mapping[str, Any]) -> list[LevelChange]:
    """The rules ``config`` disables or sets below their default level."""
    changes = []
    for rule in ALL_RULES:
        level, set_by = _resolved_level(rule, config)
        if level is not None and set_by != "default" and weakens(rule, level):
            changes.append(LevelChange(rule, level, set_by))
    return changes


def _rule_config(rule: Rule, config: Mapping[str, Any]) -> dict[str, Any] | None:
    own = config.get(rule.id)
    if isinstance(own, Mapping):
        return {k: v for k, v in own.items() if k != "enforcementLevel"} or None
    return None


# Objects a chart renders that the Kubernetes rules judge: a workload with a pod spec
# and a load-balanced Service. A rule that judges any of them would judge a release's
# rendered objects too, so a release it did not see is in its scope.
_RENDERED_PROBES = (
    ResourceView(
        "kubernetes:apps/v1:Deployment",
        "urn:pulumi:probe::probe::kubernetes:apps/v1:Deployment::probe",
        "probe",
        {
            "metadata": {"name": "probe", "namespace": "probe"},
            "spec": {"template": {"spec": {"containers": [{"name": "probe", "image": "p:1"}]}}},
        },
    ),
    ResourceView(
        "kubernetes:core/v1:Service",
        "urn:pulumi:probe::probe::kubernetes:core/v1:Service::prometheus",
        "prometheus",
        {
            "metadata": {"name": "prometheus", "namespace": "monitoring"},
            "spec": {"type": "LoadBalancer"},
        },
    ),
)


def judges_kubernetes_objects(rule: Rule) -> bool:
    """Whether ``rule`` judges the kind of objects Helm charts render (its scope then
    includes every Helm release's objects, seen or not)."""
    return rule.kind == "resource" and any(rule.applies_to(probe) for probe in _RENDERED_PROBES)


def review_plan(plan: Plan, config: Mapping[str, Any] | None = None) -> Review:
    """Every enabled rule over ``plan``, with the findings, exemptions, evidence and the
    rules the config disabled or downgraded; `PackConfigError` for an unusable config."""
    config = config or {}
    problems = policy_config_problems(config)
    if problems:
        raise PackConfigError("; ".join(problems))
    results: list[RuleResult] = []
    findings_of: dict[str, list[Finding]] = {}
    with stackconfig.loaded(plan.config), recording_exemptions() as exemptions:
        for rule in ALL_RULES:
            level = _level(rule, config)
            if level == EnforcementLevel.DISABLED:
                continue
            if level == EnforcementLevel.REMEDIATE:
                level = EnforcementLevel.MANDATORY  # the engine reports remediations as mandatory
            results.append(RuleResult(rule, level))
            findings_of[rule.id] = []
        resource_results = [r for r in results if r.rule.kind == "resource"]
        _run_resource_rules(plan, resource_results, config, findings_of)
        for result in results:
            if result.rule.kind == "stack":
                _run_stack_rule(
                    plan, result.rule, _rule_config(result.rule, config), result, findings_of
                )
        rows = evidence_rows(plan)
    invisible = tuple(unseen(plan))
    for result in results:
        if judges_kubernetes_objects(result.rule):
            result.not_evaluated = invisible
    by_id = {result.rule.id: result for result in results}
    for exemption in exemptions:
        by_id[exemption.rule_id].exempted.add(exemption.urn)
    # Rule order, then plan order within a rule: the order the reports list findings in.
    findings = [finding for result in results for finding in findings_of[result.rule.id]]
    position = {result.rule.id: number for number, result in enumerate(results)}
    applied = sorted(exemptions, key=lambda exemption: position[exemption.rule_id])
    return Review(
        plan,
        tuple(results),
        tuple(findings),
        tuple(applied),
        tuple(rows),
        tuple(level_changes(config)),
    )


def _run_resource_rules(
    plan: Plan,
    results: list[RuleResult],
    config: Mapping[str, Any],
    findings_of: dict[str, list[Finding]],
) -> None:
    """Every resource rule over every analyzable resource, one resource at a time.

    The engine's arguments for a resource are built once and handed to every rule (with
    the rule's own config where the pack config gives one), so the resource's inputs
    are wrapped and read once, and nothing of a resource is kept after its turn.
    """
    configured = {r.rule.id: _rule_config(r.rule, config) for r in results}
    validators = {r.rule.id: validate_resource(r.rule) for r in results}
    # The resource whose turn it is: each rule's report function (made once) files
    # what the engine reports under it.
    current = [""]

    def reporter(result: RuleResult) -> Callable[[str, str | None], None]:
        found = findings_of[result.rule.id]

        def report(message: str, urn: str | None = None) -> None:
            result.failed.add(current[0])
            found.append(Finding(result.rule.id, current[0], message, result.enforcement))

        return report

    reports = {r.rule.id: reporter(r) for r in results}
    of_type: dict[str, list[RuleResult]] = {}
    for resource in plan.analyzable():
        current[0] = resource.urn
        args = resource_args(plan, resource, None)
        view = ResourceView.from_args(args)
        candidates = of_type.get(resource.type)
        if candidates is None:
            candidates = of_type[resource.type] = _may_apply(results, resource.type)
        for result in candidates:
            rule = result.rule
            if not rule.applies_to(view):
                continue
            result.evaluated += 1
            rule_config = configured[rule.id]
            rule_args = args if rule_config is None else resource_args(plan, resource, rule_config)
            try:
                validators[rule.id](rule_args, reports[rule.id])
            except UnknownValueError as err:
                result.unknown.add(resource.urn)
                findings_of[rule.id].append(
                    Finding(
                        rule.id,
                        resource.urn,
                        f"cannot be checked during preview: {err.message}",
                        EnforcementLevel.ADVISORY,
                        unknown=True,
                    )
                )


def _may_apply(results: list[RuleResult], kind: str) -> list[RuleResult]:
    """The rules that may judge a resource of type ``kind``: those whose `applies_to`
    names types only when ``kind`` is one, and every other (asked per resource)."""
    return [
        result
        for result in results
        if not isinstance(result.rule.applies_to, TypesIn) or kind in result.rule.applies_to.types
    ]


def _run_stack_rule(
    plan: Plan,
    rule: Rule,
    rule_config: Mapping[str, Any] | None,
    result: RuleResult,
    findings_of: dict[str, list[Finding]],
) -> None:
    findings = findings_of[rule.id]
    resources = stack_resources(plan)
    stack = StackView.of(resources)
    subjects = (
        stack.of_type(*rule.applies_to.types)
        if isinstance(rule.applies_to, TypesIn)
        else (view for view in stack.resources if rule.applies_to(view))
    )
    result.evaluated = sum(1 for _ in subjects)

    def report(message: str, urn: str | None = None) -> None:
        if urn:
            result.failed.add(urn)
        else:
            result.stack_failed = True
        findings.append(Finding(rule.id, urn, message, result.enforcement))

    try:
        validate_stack(rule)(
            StackValidationArgs(resources, dict(rule_config) if rule_config else None), report
        )
    except UnknownValueError as err:
        findings.append(
            Finding(
                rule.id,
                None,
                f"cannot be checked during preview: {err.message}",
                EnforcementLevel.ADVISORY,
                unknown=True,
            )
        )
