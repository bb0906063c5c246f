"""The terminal summary of a review: bounded, whatever the size of the plan.

The report files carry every finding; the terminal gets the verdict, the counts per
rule and the first few violations of each, and where the full list is. Its length
depends on the number of rules shown, never on the number of violations.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pulumi_policy import EnforcementLevel

from policies.model import urn_name
from policies.review.evaluate import Finding, Review
from policies.review.reports import verdict

#: Violations shown per rule, and rules shown with their violations.
EXAMPLES_PER_RULE = 3
RULES_SHOWN = 8


def _shorten(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _by_rule(findings: list[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.rule_id, []).append(finding)
    return grouped


def _rule_blocks(title: str, findings: list[Finding], examples: int) -> Iterator[str]:
    grouped = _by_rule(findings)
    if not grouped:
        return
    yield f"  {title} ({len(findings)} in {len(grouped)} rule(s)):"
    ranked = sorted(grouped.items(), key=lambda item: -len(item[1]))
    for rule_id, found in ranked[:RULES_SHOWN]:
        yield f"    {rule_id}: {len(found)}"
        for finding in found[:examples]:
            where = urn_name(finding.urn) if finding.urn else "stack"
            yield "      " + _shorten(f"{where}: {finding.message}")
        if len(found) > examples:
            yield f"      ... and {len(found) - examples} more"
    if len(ranked) > RULES_SHOWN:
        rest = ranked[RULES_SHOWN:]
        yield (
            f"    ... and {sum(len(f) for _, f in rest)} more in {len(rest)} other rule(s): "
            + _shorten(", ".join(rule_id for rule_id, _ in rest), 120)
        )


def summary_lines(review: Review, out_dir: Path) -> list[str]:
    """What the terminal shows after a review (at most about 60 lines)."""
    mandatory = review.mandatory_violations
    advisory = [f for f in review.violations if f.enforcement != EnforcementLevel.MANDATORY]
    unknown = [f for f in review.findings if f.unknown]
    lines = [
        f"{review.plan.name}: {verdict(review)}: {len(mandatory)} mandatory and "
        f"{len(advisory)} advisory violation(s), {len(unknown)} not checkable during "
        f"preview, {len(review.exemptions)} exemption(s); reports in {out_dir}/"
    ]
    if review.plan.seen_releases:
        rendered = sum(1 for r in review.plan.resources if r.rendered_from)
        lines.append(
            f"  rendered manifests: {rendered} object(s) of "
            f"{len(review.plan.seen_releases)} Helm release(s) evaluated"
        )
    unseen = review.unseen
    if unseen:
        rules = sum(1 for r in review.results if r.not_evaluated)
        lines.append(
            f"  not seen by {rules} Kubernetes rule(s): {len(unseen)} Helm release(s) or "
            f"operator resource(s) hold workloads nobody evaluated (see "
            f'"What the review could not see" in {out_dir / "report.md"}):'
        )
        shown = ", ".join(item.what for item in unseen[:4])
        more = f", and {len(unseen) - 4} more" if len(unseen) > 4 else ""
        lines.append("    " + _shorten(shown + more, 300))
    if review.disabled_rules:
        lines.append(f"  disabled by the pack config: {', '.join(review.disabled_rules)}")
    if review.downgraded_rules:
        lines.append(
            f"  downgraded to advisory by the pack config: {', '.join(review.downgraded_rules)}"
        )
    lines.extend(_rule_blocks("mandatory violations", mandatory, EXAMPLES_PER_RULE))
    lines.extend(_rule_blocks("advisory violations", advisory, 1))
    if mandatory or advisory:
        lines.append(f"  every finding, with remediation and controls: {out_dir / 'report.md'}")
    return lines
