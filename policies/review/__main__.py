"""``python -m policies.review --plan build/plan/uae-prod.json`` (``make review``).

Runs every rule of the pack over a plan document and writes report.md, report.json and
report.sarif to ``build/review/<plan file stem>/``. Exit status: 0 when no mandatory
rule fails, 1 when one does, 2 when the plan or pack config cannot be used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from policies.review.evaluate import load_policy_config, review_plan
from policies.review.plan import PlanError, load_plan
from policies.review.reports import verdict, write_reports
from policies.settings import PackConfigError


def _source_uri(plan_name: str, repo_root: Path) -> str:
    """Where code scanning shows the findings: the stack's config file if it exists."""
    stack_file = Path("stacks") / f"Pulumi.{plan_name}.yaml"
    return stack_file.as_posix() if (repo_root / stack_file).is_file() else "Pulumi.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m policies.review", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--plan", required=True, type=Path, help="plan document (pulumi preview --json shape)"
    )
    parser.add_argument(
        "--policy-config",
        type=Path,
        help="pack config JSON, the file `pulumi preview --policy-pack-config` takes",
    )
    parser.add_argument(
        "--out", type=Path, help="report directory (default build/review/<plan stem>)"
    )
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        config = load_policy_config(args.policy_config)
    except (PlanError, PackConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    review = review_plan(plan, config)
    out_dir = args.out or Path("build") / "review" / plan.name
    try:
        write_reports(review, out_dir, _source_uri(plan.name, Path.cwd()))
    except OSError as err:
        print(f"error: cannot write reports to {out_dir}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(
        f"{plan.name}: {verdict(review)}: {len(review.mandatory_violations)} mandatory and "
        f"{len(review.violations) - len(review.mandatory_violations)} advisory violation(s), "
        f"{sum(1 for f in review.findings if f.unknown)} not checkable during preview, "
        f"{len(review.exemptions)} exemption(s); reports in {out_dir}/"
    )
    if review.disabled_rules:
        print(f"  disabled by the pack config: {', '.join(review.disabled_rules)}")
    if review.downgraded_rules:
        print(f"  downgraded to advisory by the pack config: {', '.join(review.downgraded_rules)}")
    for finding in review.mandatory_violations:
        where = finding.urn.rsplit("::", 1)[-1] if finding.urn else "stack"
        print(f"  [{finding.rule_id}] {where}: {finding.message}")
    return 0 if review.passed else 1


if __name__ == "__main__":
    sys.exit(main())
