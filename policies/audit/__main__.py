"""``python -m policies.audit [--regions ...] [--allowed-regions ...]`` (``make audit``).

Scans the AWS account of boto3's default credential chain, read-only, for data, keys
and copies outside the allowed regions, and verifies what ``make bootstrap`` set up
(the state bucket, the account trail and, with ``--expect-guardrail``, the region
guardrail; ``--no-bootstrap-checks`` leaves them out); prints a table and writes
``build/audit/findings.json``. ``AWS_ENDPOINT_URL`` points it at another endpoint (a
local moto server). Exit status: 0 clean, 1 findings, 2 unusable arguments or
credentials, 3 no findings but some checks could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    ProfileNotFound,
)

from modules.residency import UAE_AWS_REGIONS
from policies.audit.bootstrap_checks import run_bootstrap_checks
from policies.audit.scan import Audit, run_audit
from policies.settings import DEFAULT_ALLOWED_REGIONS
from stacks.bootstrap.names import Names

DEFAULT_OUT = Path("build") / "audit" / "findings.json"


def split_list(values: Sequence[str] | None) -> list[str]:
    """``["a b", "c,d"]`` -> ``["a", "b", "c", "d"]`` (space- or comma-separated)."""
    return [item for value in values or [] for item in value.replace(",", " ").split() if item]


def table(audit: Audit) -> str:
    assert audit.findings is not None
    rows = [("REGION", "SERVICE", "TYPE", "RESOURCE", "PROBLEM")]
    rows += [(f.region, f.service, f.resource_type, f.resource, f.problem) for f in audit.findings]
    widths = [min(max(len(row[i]) for row in rows), 60) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
        + "  "
        + row[4]
        for row in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m policies.audit", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--regions", nargs="+", help="regions to scan (default: every enabled region)"
    )
    parser.add_argument(
        "--allowed-regions",
        nargs="+",
        help=f"allowed regions (default: {' '.join(DEFAULT_ALLOWED_REGIONS)})",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"findings file (default {DEFAULT_OUT})"
    )
    parser.add_argument("--page-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--state-bucket", help="the state bucket to verify (default: the bootstrap's name)"
    )
    parser.add_argument("--trail", help="the account trail to verify (default: the bootstrap's)")
    parser.add_argument(
        "--expect-guardrail",
        nargs="+",
        metavar="TARGET",
        help="OU, root or account ids the UAE region guardrail must be attached to",
    )
    parser.add_argument(
        "--no-bootstrap-checks",
        action="store_true",
        help="skip the checks of the state bucket, trail and guardrail",
    )
    args = parser.parse_args(argv)
    allowed = split_list(args.allowed_regions) or list(DEFAULT_ALLOWED_REGIONS)
    outside = [r for r in allowed if r not in UAE_AWS_REGIONS]
    if outside:
        # The same rule as the pack config's allowedRegions: narrow, never widen.
        print(
            f"error: --allowed-regions {' '.join(outside)}: not a UAE region; allowed "
            f"regions can only be narrowed to UAE regions ({', '.join(UAE_AWS_REGIONS)}), "
            "never widened",
            file=sys.stderr,
        )
        return 2
    try:
        # Reading the profile and config files happens here: a bad AWS_PROFILE or a
        # malformed ~/.aws/config fails before any call is made.
        session = boto3.session.Session()
    except ProfileNotFound as err:
        print(
            f"error: {err}: set AWS_PROFILE to a profile defined in the AWS config file "
            "(aws configure list-profiles), or unset it to use the default credential chain",
            file=sys.stderr,
        )
        return 2
    except BotoCoreError as err:
        print(
            f"error: the AWS configuration cannot be used: {err}; fix the AWS config and "
            "credentials files (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE) or the AWS_* "
            "environment variables",
            file=sys.stderr,
        )
        return 2
    known = {
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("ec2", partition_name=partition)
    }
    unknown = [r for r in split_list(args.regions) if r not in known]
    if unknown:
        print(
            f"error: --regions {' '.join(unknown)}: not an AWS region this botocore knows "
            "(see `aws ec2 describe-regions`); e.g. me-central-1",
            file=sys.stderr,
        )
        return 2
    try:
        regions = split_list(args.regions) or [
            r["RegionName"]
            for r in session.client("ec2", region_name=allowed[0]).describe_regions()["Regions"]
        ]
        audit = run_audit(session, regions, allowed, args.page_size)
        if not args.no_bootstrap_checks:
            names = Names(audit.account_id, allowed[0])
            run_bootstrap_checks(
                audit,
                args.state_bucket or names.state_bucket,
                args.trail or names.trail,
                split_list(args.expect_guardrail),
            )
    except NoCredentialsError:
        print(
            "error: no AWS credentials found. Configure the default credential chain "
            "(AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, SSO or an instance role) "
            "with read-only access, then run `make audit` again.",
            file=sys.stderr,
        )
        return 2
    except NoRegionError:
        print(
            "error: no region to start from; pass --regions or --allowed-regions", file=sys.stderr
        )
        return 2
    except (ClientError, BotoCoreError) as err:
        print(f"error: the account could not be read: {err}", file=sys.stderr)
        return 2
    assert audit.findings is not None and audit.errors is not None
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "account": audit.account_id,
                    "scannedRegions": list(regions),
                    "allowedRegions": allowed,
                    "findings": [f.as_dict() for f in audit.findings],
                    "errors": [
                        {"region": e.region, "check": e.check, "error": e.error}
                        for e in audit.errors
                    ],
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
    except OSError as err:
        print(f"error: cannot write findings to {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    allowed_text = ", ".join(allowed)
    print(f"audit of account {audit.account_id}: {len(regions)} region(s), allowed {allowed_text}")
    if audit.findings:
        print(table(audit))
    for error in audit.errors:
        print(
            f"warning: {error.check} in {error.region} could not run: {error.error}",
            file=sys.stderr,
        )
    counts = f"{len(audit.findings)} finding(s), {len(audit.errors)} check(s) not run"
    print(f"{counts}; written to {args.out}")
    if audit.findings:
        return 1
    return 3 if audit.errors else 0


if __name__ == "__main__":
    sys.exit(main())
