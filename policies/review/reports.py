"""Writing a `Review` as report.md (for people), report.json and report.sarif (for tools)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel

from policies.model import Rule, urn_name
from policies.review.evaluate import Finding, Review

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
TOOL_NAME = "uae-sovereign-gpu-platform policy review"
# GitHub code scanning ranks alerts by this number (critical >= 9, high >= 7, medium >= 4).
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "3.0"}


def verdict(review: Review) -> str:
    return "PASS" if review.passed else "FAIL"


def to_json(review: Review) -> dict[str, Any]:
    """The machine-readable report (stable keys; see docs/compliance.md)."""
    return {
        "plan": str(review.plan.path),
        "generatedAt": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "verdict": verdict(review).lower(),
        "summary": {
            "resources": len(review.plan.resources),
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
                "remediation": r.rule.remediation,
                "controls": list(r.rule.controls),
            }
            for r in review.results
        ],
        "findings": [_finding_json(review, f) for f in review.findings],
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


def _finding_json(review: Review, finding: Finding) -> dict[str, Any]:
    rule = next(r.rule for r in review.results if r.rule.id == finding.rule_id)
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


def to_markdown(review: Review) -> str:
    """The report a compliance reviewer reads."""
    data = to_json(review)
    summary = data["summary"]
    lines = [
        f"# Policy review: {review.plan.name}",
        "",
        f"**Verdict: {verdict(review)}** "
        + (
            "(no mandatory rule fails)"
            if review.passed
            else f"({summary['mandatoryViolations']} mandatory violation(s))"
        ),
        "",
        f"- Plan: `{review.plan.path}` ({summary['resources']} resources)",
        f"- Rules run: {summary['rules']}",
        f"- Mandatory violations: {summary['mandatoryViolations']}",
        f"- Advisory violations: {summary['advisoryViolations']}",
        f"- Cannot be checked during preview: {summary['cannotCheckDuringPreview']}",
        f"- Exceptions and exemptions applied: {summary['exemptions']}",
        f"- Rules disabled by the pack config: {summary['rulesDisabledByConfig']}",
        f"- Rules downgraded to advisory by the pack config: {summary['rulesDowngradedByConfig']}",
        "",
        "## Rules",
        "",
        "| Rule | Severity | Enforcement | Evaluated | Passed | Failed | Cannot check | Exempted |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rule in data["rules"]:
        lines.append(
            f"| `{rule['id']}` | {rule['severity']} | {rule['enforcement']} | {rule['evaluated']} "
            f"| {rule['passed']} | {rule['failed']} | {rule['cannotCheck']} | {rule['exempted']} |"
        )
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
                    "disabledRules": review.disabled_rules,
                    "downgradedRules": review.downgraded_rules,
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
    return invocation


def _help(rule: Rule) -> str:
    return f"{rule.remediation}\nControls: {'; '.join(rule.controls)}"


def _level(enforcement: EnforcementLevel) -> str:
    return "error" if enforcement == EnforcementLevel.MANDATORY else "warning"


def write_reports(review: Review, out_dir: Path, source_uri: str) -> list[Path]:
    """Write report.md, report.json and report.sarif into ``out_dir``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "report.md", out_dir / "report.json", out_dir / "report.sarif"]
    paths[0].write_text(to_markdown(review), encoding="utf-8")
    paths[1].write_text(json.dumps(to_json(review), indent=2) + "\n", encoding="utf-8")
    paths[2].write_text(json.dumps(to_sarif(review, source_uri), indent=2) + "\n", encoding="utf-8")
    return paths
