"""``python -m policies.review --plan build/plan/uae-prod.json`` (``make review``).

Runs every rule of the pack over a plan document (and, with ``--rendered DIR``, over the
``helm template`` output of its Helm releases) and writes report.md, report.json and
report.sarif to ``build/review/<plan file stem>/``; the terminal gets a summary. Exit
status: 0 when no mandatory rule fails (verdict PASS, or INCOMPLETE when some Helm
releases or operator resources hold workloads the Kubernetes rules could not see), 1
when one fails (FAIL), 2 when the plan, the rendered manifests or the pack config
cannot be used.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

from policies.review.evaluate import load_policy_config, review_plan
from policies.review.plan import PlanError, load_plan
from policies.review.rendered import with_rendered
from policies.review.reports import write_reports
from policies.review.summary import summary_lines
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
        "--rendered",
        type=Path,
        help="directory of `helm template` output, one <namespace>/<release>.yaml per Helm "
        "release (see `python -m policies.review.helm_inputs`)",
    )
    parser.add_argument(
        "--out", type=Path, help="report directory (default build/review/<plan stem>)"
    )
    args = parser.parse_args(argv)
    # A review makes millions of objects that live until it ends and form no cycles:
    # the cycle collector would walk them again and again (a third of the time of a
    # review of 100,000 resources), for a few MB of garbage it could free.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _review(args)
    finally:
        if collecting:
            gc.enable()


def _review(args: argparse.Namespace) -> int:
    try:
        plan = load_plan(args.plan)
        if args.rendered is not None:
            plan = with_rendered(plan, args.rendered)
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
    print("\n".join(summary_lines(review, out_dir)))
    return 0 if review.passed else 1


if __name__ == "__main__":
    code = main()
    # The review's objects go with the process: freeing them one by one first would
    # take another second of a review of 100,000 resources.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
