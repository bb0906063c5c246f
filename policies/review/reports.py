"""Writing a `Review` as report.md (for people), report.json and report.sarif (for tools)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel

from policies.model import Rule, urn_name
from policies.review.evaluate import Finding, Review
from policies.review.jsontext import write_json

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
TOOL_NAME = "uae-sovereign-gpu-platform policy review"
# GitHub code scanning ranks alerts by this number (critical >= 9, high >= 7, medium >= 4).
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "3.0"}


def verdict(review: Review) -> str:
    """FAIL (a mandatory rule failed), INCOMPLETE (none failed on what was evaluated, but
    some Kubernetes workloads were not seen: see `Review.unseen`) or PASS."""
    if not review.passed:
        return "FAIL"
    return "PASS" if review.complete else "INCOMPLETE"


def _unseen_json(review: Review) -> list[dict[str, Any]]:
    rules_of: dict[str, list[str]] = {}
    for result in review.results:
        for item in result.not_evaluated:
            rules_of.setdefault(item.urn, []).append(result.rule.id)
    return [
        {"urn": item.urn, "what": item.what, "why": item.why, "rules": rules_of[item.urn]}
        for item in review.unseen
    ]


def to_json(review: Review) -> dict[str, Any]:
    """The machine-readable report (stable keys; see docs/compliance.md)."""
    rules_by_id = {r.rule.id: r.rule for r in review.results}
    rendered = sum(1 for r in review.plan.resources if r.rendered_from)
    return {
        "plan": str(review.plan.path),
        "generatedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "verdict": verdict(review).lower(),
        "summary": {
            "resources": len(review.plan.resources) - rendered,
            "renderedReleases": len(review.plan.seen_releases),
            "renderedObjects": rendered,
            "notEvaluated": len(review.unseen),
            "rules": len(review.results),
            "mandatoryViolations": len(review.mandatory_violations),
            "advisoryViolations": len(review.violations) - len(review.mandatory_violations),
            "cannotCheckDuringPreview": sum(1 for f in review.findings if f.unknown),
            "exemptions": len(review.exemptions),
            "rulesDisabledByConfig": len(review.disabled_rules),
            "rulesDowngradedByConfig": len(review.downgraded_rules),
        },
        "disabledOrDowngraded": [
            {
                "ruleId": change.rule.id,
                "severity": change.rule.severity.value,
                "default": change.rule.enforcement.value,
                "configured": change.configured.value,
                "setBy": change.set_by,
            }
            for change in review.level_changes
        ],
        "rules": [
            {
                "id": r.rule.id,
                "description": r.rule.description,
                "kind": r.rule.kind,
                "severity": r.rule.severity.value,
                "enforcement": r.enforcement.value,
                "evaluated": r.evaluated,
                "passed": r.passed,
                "failed": len(r.failed) + (1 if r.stack_failed else 0),
                "cannotCheck": len(r.unknown),
                "exempted": len(r.exempted),
                "notEvaluated": [item.urn for item in r.not_evaluated],
                "remediation": r.rule.remediation,
                "controls": list(r.rule.controls),
            }
            for r in review.results
        ],
        "notEvaluated": _unseen_json(review),
        "findings": [_finding_json(rules_by_id[f.rule_id], f) for f in review.findings],
        "exemptions": [
            {
                "ruleId": e.rule_id,
                "urn": e.urn,
                "violation": e.message,
                "reason": e.reason,
                "source": e.source,
                "expires": e.expires.isoformat() if e.expires else None,
            }
            for e in review.exemptions
        ],
        "residencyEvidence": [
            {
                "urn": row.urn,
                "type": row.type,
                "name": row.name,
                "location": row.location,
                "zone": row.zone,
                "key": row.key,
            }
            for row in review.evidence
        ],
    }


def _finding_json(rule: Rule, finding: Finding) -> dict[str, Any]:
    return {
        "ruleId": finding.rule_id,
        "kind": "cannot-check" if finding.unknown else "violation",
        "urn": finding.urn,
        "resourceType": finding.resource_type,
        "message": finding.message,
        "enforcement": finding.enforcement.value,
        "severity": rule.severity.value,
        "remediation": rule.remediation,
        "controls": list(rule.controls),
    }


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(review: Review, data: dict[str, Any] | None = None) -> str:
    """The report a compliance reviewer reads (from ``data``, the JSON report, when the
    caller already has it)."""
    data = data if data is not None else to_json(review)
    summary = data["summary"]
    unseen_rules = sum(1 for r in review.results if r.not_evaluated)
    if not review.passed:
        why = f"({summary['mandatoryViolations']} mandatory violation(s))"
    elif not review.complete:
        why = (
            "(no mandatory rule fails on what was evaluated, but "
            f"{summary['notEvaluated']} Helm release(s) or operator resource(s) hold "
            f"workloads that {unseen_rules} Kubernetes rule(s) could not see: see "
            "[What the review could not see](#what-the-review-could-not-see))"
        )
    else:
        why = "(no mandatory rule fails)"
    rendered = (
        f"; plus {summary['renderedObjects']} objects rendered from "
        f"{summary['renderedReleases']} Helm release(s)"
        if summary["renderedReleases"]
        else ""
    )
    lines = [
        f"# Policy review: {review.plan.name}",
        "",
        f"**Verdict: {verdict(review)}** {why}",
        "",
        f"- Plan: `{review.plan.path}` ({summary['resources']} resources{rendered})",
        f"- Rules run: {summary['rules']}",
        f"- Mandatory violations: {summary['mandatoryViolations']}",
        f"- Advisory violations: {summary['advisoryViolations']}",
        f"- Cannot be checked during preview: {summary['cannotCheckDuringPreview']}",
        f"- Exceptions and exemptions applied: {summary['exemptions']}",
        f"- Rules disabled by the pack config: {summary['rulesDisabledByConfig']}",
        f"- Rules downgraded to advisory by the pack config: {summary['rulesDowngradedByConfig']}",
        f"- Helm releases and operator resources whose workloads were not evaluated: "
        f"{summary['notEvaluated']}",
        "",
        "## Rules",
        "",
        "A rule's counts cover only what it evaluated; *Not seen* counts the Helm releases "
        "and operator resources whose workloads it could not evaluate.",
        "",
        "| Rule | Severity | Enforcement | Evaluated | Passed | Failed | Cannot check | Exempted "
        "| Not seen |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rule in data["rules"]:
        passed = f"{rule['passed']}" + (
            f" of {rule['evaluated']} objects; {len(rule['notEvaluated'])} not seen"
            if rule["notEvaluated"]
            else ""
        )
        lines.append(
            f"| `{rule['id']}` | {rule['severity']} | {rule['enforcement']} | {rule['evaluated']} "
            f"| {passed} | {rule['failed']} | {rule['cannotCheck']} | {rule['exempted']} "
            f"| {len(rule['notEvaluated'])} |"
        )
    lines += ["", "## What the review could not see", ""]
    if not data["notEvaluated"]:
        lines.append(
            "Nothing: every Helm release's rendered objects were evaluated, and no operator "
            "resource creates workloads at run time."
        )
    else:
        lines += [
            "The Kubernetes rules below judged only the objects the plan (and any rendered "
            "manifests) contain. These hold workloads they did not evaluate; a pass says "
            "nothing about them. Render the releases (`make review RENDERED=<dir>`, see "
            "docs/compliance.md) to check what Helm installs; workloads an operator "
            "creates at run time need a review of the operator's configuration.",
            "",
            "| What | Why not evaluated | Rules |",
            "| --- | --- | --- |",
        ]
        for item in data["notEvaluated"]:
            rules = ", ".join(f"`{r}`" for r in item["rules"])
            lines.append(f"| {_cell(item['what'])} | {_cell(item['why'])} | {rules} |")
    lines += ["", "## Rules disabled or downgraded by the pack config", ""]
    if not data["disabledOrDowngraded"]:
        lines.append("None: every rule runs at its default level or stricter.")
    else:
        lines += [
            "These rules did not judge the plan at their default level: a disabled rule "
            "was not run at all, a downgraded one cannot fail the review.",
            "",
            "| Rule | Severity | Default | Configured | Set by |",
            "| --- | --- | --- | --- | --- |",
        ]
        for change in data["disabledOrDowngraded"]:
            lines.append(
                f"| `{change['ruleId']}` | {change['severity']} | {change['default']} "
                f"| {change['configured']} | `{change['setBy']}` |"
            )
    lines += ["", "## Violations", ""]
    violations = [f for f in data["findings"] if f["kind"] == "violation"]
    if not violations:
        lines += ["None.", ""]
    for number, finding in enumerate(violations, 1):
        resource = urn_name(finding["urn"]) if finding["urn"] else "(stack)"
        lines += [
            f"### {number}. `{finding['ruleId']}` on {resource}",
            "",
            f"- Resource: `{finding['urn'] or 'the whole stack'}`"
            + (f" ({finding['resourceType']})" if finding["resourceType"] else ""),
            f"- Severity: {finding['severity']}; enforcement: {finding['enforcement']}",
            f"- Problem: {finding['message']}",
            f"- Remediation: {finding['remediation']}",
            f"- Controls: {'; '.join(finding['controls'])}",
            "",
        ]
    unknowns = [f for f in data["findings"] if f["kind"] == "cannot-check"]
    lines += ["## Cannot be checked during preview", ""]
    if not unknowns:
        lines.append("None: every value the rules needed is known in this plan.")
    else:
        lines += ["| Rule | Resource | Why |", "| --- | --- | --- |"]
        for finding in unknowns:
            resource = urn_name(finding["urn"]) if finding["urn"] else "(stack)"
            lines.append(
                f"| `{finding['ruleId']}` | {_cell(resource)} | {_cell(finding['message'])} |"
            )
    lines += ["", "## Exceptions and exemptions", ""]
    if not data["exemptions"]:
        lines += ["None."]
    else:
        lines += [
            "| Rule | Resource | Source | Expires | Reason | Set-aside violation |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for item in data["exemptions"]:
            lines.append(
                f"| `{item['ruleId']}` | {_cell(urn_name(item['urn']))} | {item['source']} "
                f"| {item['expires'] or '-'} | {_cell(item['reason'])} "
                f"| {_cell(item['violation'])} |"
            )
    lines += [
        "",
        "## Residency evidence",
        "",
        "Every resource of the plan with where it lives and the key that encrypts its data.",
        "",
        "| Resource | Type | Region or site | Zone | Encryption key |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in data["residencyEvidence"]:
        lines.append(
            f"| {_cell(row['name'])} | `{row['type']}` | {_cell(row['location'])} "
            f"| {_cell(row['zone'])} | {_cell(row['key'])} |"
        )
    return "\n".join(lines) + "\n"


def to_sarif(review: Review, source_uri: str) -> dict[str, Any]:
    """SARIF 2.1.0 for code scanning: one result per finding, located at ``source_uri``
    (the stack's config file where there is one) with the resource URN as logical location."""
    rules = [r.rule for r in review.results]
    index = {rule.id: i for i, rule in enumerate(rules)}
    results = []
    for finding in review.findings:
        if finding.unknown:
            level = "note"
        elif finding.enforcement == EnforcementLevel.MANDATORY:
            level = "error"
        else:
            level = "warning"
        location: dict[str, Any] = {
            "physicalLocation": {
                "artifactLocation": {"uri": source_uri},
                "region": {"startLine": 1},
            }
        }
        if finding.urn:
            location["logicalLocations"] = [
                {
                    "fullyQualifiedName": finding.urn,
                    "name": urn_name(finding.urn),
                    "kind": "resource",
                }
            ]
        subject = urn_name(finding.urn) if finding.urn else "stack"
        results.append(
            {
                "ruleId": finding.rule_id,
                "ruleIndex": index[finding.rule_id],
                "level": level,
                "message": {"text": f"{subject}: {finding.message}"},
                "locations": [location],
                "partialFingerprints": {
                    "resourceRule/v1": f"{finding.rule_id}|{subject}|{finding.message}"
                },
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "version": "0.1.0",
                        "rules": [
                            {
                                "id": rule.id,
                                "name": rule.id,
                                "shortDescription": {"text": rule.description},
                                "fullDescription": {"text": rule.description},
                                "help": {"text": _help(rule)},
                                "defaultConfiguration": {"level": _level(rule.enforcement)},
                                "properties": {
                                    "tags": ["security", "compliance", *rule.controls],
                                    "security-severity": SECURITY_SEVERITY[rule.severity.value],
                                    "precision": "high",
                                },
                            }
                            for rule in rules
                        ],
                    }
                },
                "automationDetails": {"id": f"policy-review/{review.plan.name}/"},
                "invocations": [_invocation(review, index)],
                "properties": {
                    "verdict": verdict(review).lower(),
                    "disabledRules": review.disabled_rules,
                    "downgradedRules": review.downgraded_rules,
                    "notEvaluated": [item.urn for item in review.unseen],
                },
                "results": results,
            }
        ],
    }


def _invocation(review: Review, index: dict[str, int]) -> dict[str, Any]:
    """The run's invocation: the rules the pack config disabled or downgraded, as rule
    configuration overrides and as notifications a reader sees."""
    overrides, notifications = [], []
    for change in review.level_changes:
        descriptor: dict[str, Any] = {"id": change.rule.id}
        if change.rule.id in index:
            descriptor["index"] = index[change.rule.id]
        disabled = change.configured == EnforcementLevel.DISABLED
        overrides.append(
            {
                "descriptor": descriptor,
                "configuration": {"enabled": False} if disabled else {"level": "warning"},
            }
        )
        what = "disabled" if disabled else "downgraded to advisory"
        notifications.append(
            {
                "associatedRule": descriptor,
                "level": "warning",
                "message": {
                    "text": f"{change.rule.id} ({change.rule.severity.value}) was {what} by "
                    f"the pack config entry `{change.set_by}`; its default is "
                    f"{change.rule.enforcement.value}"
                },
            }
        )
    invocation: dict[str, Any] = {"executionSuccessful": True}
    if overrides:
        invocation["ruleConfigurationOverrides"] = overrides
        invocation["toolConfigurationNotifications"] = notifications
    unseen = _unseen_json(review)
    if unseen:
        # What the rules could not see is part of the run's outcome, not a finding.
        invocation["toolExecutionNotifications"] = [
            {
                "level": "warning",
                "message": {
                    "text": f"not evaluated by {', '.join(item['rules'])}: {item['what']}: "
                    f"{item['why']}"
                },
                "locations": [
                    {
                        "logicalLocations": [
                            {
                                "fullyQualifiedName": item["urn"],
                                "name": urn_name(item["urn"]),
                                "kind": "resource",
                            }
                        ]
                    }
                ],
            }
            for item in unseen
        ]
    return invocation


def _help(rule: Rule) -> str:
    return f"{rule.remediation}\nControls: {'; '.join(rule.controls)}"


def _level(enforcement: EnforcementLevel) -> str:
    return "error" if enforcement == EnforcementLevel.MANDATORY else "warning"


def write_reports(review: Review, out_dir: Path, source_uri: str) -> list[Path]:
    """Write report.md, report.json and report.sarif into ``out_dir``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "report.md", out_dir / "report.json", out_dir / "report.sarif"]
    data = to_json(review)
    paths[0].write_text(to_markdown(review, data), encoding="utf-8")
    write_json(paths[1], data)
    write_json(paths[2], to_sarif(review, source_uri))
    return paths
