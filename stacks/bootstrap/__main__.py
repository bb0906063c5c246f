"""``python -m stacks.bootstrap`` (``make bootstrap ARGS=...``): create the in-region
state bucket, secrets key and account trail (and optionally the organisation's region
guardrail), idempotently, then print the ``pulumi login`` and ``stack init`` lines.

Uses boto3's default credential chain; ``AWS_ENDPOINT_URL`` points it at another
endpoint (a local moto server). Exit status: 0 done (or dry run), 2 an error to fix.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ProfileNotFound,
)

from modules.residency import UAE_AWS_REGIONS

from .names import DEFAULT_REGION, Names, pulumi_lines
from .steps import LOG_RETENTION_DAYS, Bootstrap, BootstrapError, Change, Options

STACKS = ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_KEY_STORE_ID = re.compile(r"^cks-[0-9a-f]{17}$")
_XKS_KEY_ID = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
KEY_PURPOSES = ("state", "secrets", "trail")
_TARGET = re.compile(r"^(\d{12}|r-[0-9a-z]{4,32}|ou-[0-9a-z]{4,32}-[a-z0-9]{8,32})$")
_DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "AuthorizationError",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "403",  # an error without a code of its own, as some endpoints answer a denial
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make bootstrap ARGS=...", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--dry-run", action="store_true", help="read only: print what would change")
    p.add_argument(
        "--region", default=DEFAULT_REGION, help=f"UAE region ({', '.join(UAE_AWS_REGIONS)})"
    )
    p.add_argument(
        "--admin-role-arn",
        action="append",
        default=[],
        metavar="ARN",
        help="role that administers the keys (repeatable)",
    )
    p.add_argument(
        "--ci-role-arn",
        action="append",
        default=[],
        metavar="ARN",
        help="role that uses the state and secrets keys, e.g. CI (repeatable)",
    )
    p.add_argument(
        "--trail-retention-days",
        type=int,
        default=365,
        help="object-lock compliance retention of trail logs (default 365)",
    )
    p.add_argument(
        "--log-retention-days",
        type=int,
        default=365,
        help="retention of the trail's log group (default 365)",
    )
    p.add_argument(
        "--noncurrent-days",
        type=int,
        default=90,
        help="days the state bucket keeps noncurrent versions (default 90)",
    )
    p.add_argument(
        "--data-bucket",
        action="append",
        default=[],
        metavar="NAME",
        help="a data bucket whose object events the trail records (repeatable)",
    )
    p.add_argument("--name-suffix", default="", help="suffix for the bucket names if taken")
    p.add_argument(
        "--org-guardrail",
        action="store_true",
        help="create the region-deny SCP (from the organisation's management account)",
    )
    p.add_argument("--target", help="OU, root or account id the guardrail is attached to")
    p.add_argument(
        "--custom-key-store-id",
        metavar="CKS_ID",
        help="create the keys in this connected KMS custom key store (key custody hsm)",
    )
    p.add_argument(
        "--xks-key-id",
        action="append",
        default=[],
        metavar="PURPOSE=ID",
        help="external key store only: the external key of state, secrets and trail",
    )
    return p


def xks_key_ids(values: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``PURPOSE=ID`` arguments by purpose, and a problem for each unusable one."""
    ids: dict[str, str] = {}
    problems = []
    for value in values:
        purpose, sep, key_id = value.partition("=")
        if not sep or purpose not in KEY_PURPOSES or not _XKS_KEY_ID.match(key_id):
            problems.append(
                f"--xks-key-id {value!r} is not PURPOSE=ID with PURPOSE one of "
                f"{', '.join(KEY_PURPOSES)} and ID 1-128 of a-z A-Z 0-9 _ . -"
            )
        elif purpose in ids:
            problems.append(f"--xks-key-id names {purpose} twice")
        else:
            ids[purpose] = key_id
    return ids, problems


def argument_problems(args: argparse.Namespace) -> list[str]:
    """Every unusable argument, named (nothing is called before these are fixed)."""
    problems = []
    if args.region not in UAE_AWS_REGIONS:
        problems.append(
            f"--region {args.region} is outside the UAE; allowed: {', '.join(UAE_AWS_REGIONS)}"
        )
    for flag, arns in (
        ("--admin-role-arn", args.admin_role_arn),
        ("--ci-role-arn", args.ci_role_arn),
    ):
        problems += [
            f"{flag} {arn!r} is not an IAM role ARN" for arn in arns if not _ROLE_ARN.match(arn)
        ]
    if not 1 <= args.trail_retention_days <= 36500:
        problems.append("--trail-retention-days must be between 1 and 36500")
    if args.log_retention_days not in LOG_RETENTION_DAYS:
        problems.append(
            f"--log-retention-days {args.log_retention_days} is not one CloudWatch Logs accepts "
            f"({', '.join(map(str, LOG_RETENTION_DAYS))})"
        )
    if args.noncurrent_days < 1:
        problems.append("--noncurrent-days must be at least 1")
    if args.name_suffix and not re.fullmatch(r"-[a-z0-9-]{1,8}", args.name_suffix):
        problems.append("--name-suffix must look like -abc1 (a dash and up to 8 of a-z 0-9 -)")
    if args.org_guardrail and not args.target:
        problems.append("--org-guardrail needs --target <ou-...|r-...|account id>")
    if args.target and not args.org_guardrail:
        problems.append("--target is only used with --org-guardrail")
    if args.target and not _TARGET.match(args.target):
        problems.append(f"--target {args.target!r} is not an OU id, root id or account id")
    store = args.custom_key_store_id
    if store is not None and not _KEY_STORE_ID.match(store):
        problems.append(f"--custom-key-store-id {store!r} is not a key store id (cks-<17 hex>)")
    ids, id_problems = xks_key_ids(args.xks_key_id)
    problems += id_problems
    if ids and store is None:
        problems.append("--xks-key-id is only used with --custom-key-store-id")
    if ids and not id_problems and set(ids) != set(KEY_PURPOSES):
        missing = ", ".join(p for p in KEY_PURPOSES if p not in ids)
        problems.append(f"--xks-key-id: give every key's external key; missing {missing}")
    return problems


def _table(changes: Sequence[Change]) -> str:
    width = max(len(c.kind) for c in changes)
    name_width = max(len(c.name) for c in changes)
    return "\n".join(
        (
            f"  {c.action:<13} {c.kind:<{width}}  {c.name:<{name_width}}"
            + (f"  ({c.detail})" if c.detail else "")
        ).rstrip()
        for c in changes
    )


def _explain_without_credentials(names: Names, options: Options) -> str:
    """A dry run without credentials: what a first run creates, with placeholder names."""
    lines = [
        "dry run without AWS credentials: cannot read what already exists, so this is what "
        f"a first run creates in {names.region} (account id shown as <account-id>):",
        f"  kms key           {names.state_key_alias}, {names.secrets_key_alias}, "
        f"{names.trail_key_alias} ("
        + (
            f"single-region, in custom key store {options.custom_key_store_id}, "
            "no automatic rotation)"
            if options.custom_key_store_id
            else "single-region, rotation on)"
        ),
        f"  s3 bucket         {names.trail_bucket} (object lock compliance "
        f"{options.trail_retention_days} days, versioning, TLS only, no public access)",
        f"  s3 bucket         {names.state_bucket} (versioning, SSE-KMS state key, TLS and "
        "SSE-KMS uploads only, no public access, access logs, noncurrent-version expiry)",
        f"  log group         {names.log_group} ({options.log_retention_days} days, trail key)",
        f"  iam role (global) {names.trail_logs_role} (CloudTrail -> log group)",
        f"  cloudtrail trail  {names.trail} (all regions' management events, state/data "
        "bucket object events, log-file validation, trail key)",
    ]
    if options.guardrail_target:
        lines.append(f"  scp (global)      {names.guardrail_policy} -> {options.guardrail_target}")
    lines.append("Configure credentials (AWS_PROFILE, SSO, a role) to see what exists.")
    return "\n".join(lines)


def _client_error(err: ClientError) -> str:
    error = err.response.get("Error", {})
    code = str(error.get("Code", ""))
    operation = getattr(err, "operation_name", "?")
    if code in _DENIED:
        return (
            f"missing permission: {operation} was denied ({code}). "
            "Run the bootstrap with an identity that may create KMS keys, S3 buckets, "
            "CloudTrail trails, CloudWatch log groups and IAM roles (and Organizations "
            "policies with --org-guardrail), e.g. an administrator of the account."
        )
    if code in ("AWSOrganizationsNotInUseException", "AccessDeniedForDependencyException"):
        return (
            f"--org-guardrail: {operation} failed ({code}): run it from the organisation's "
            "management account (or a delegated administrator for policies)."
        )
    return f"AWS refused {operation}: {code}: {error.get('Message', err)}"


def _error_lines(err: BootstrapError | ClientError | BotoCoreError) -> list[str]:
    """What to tell the user when the bootstrap stops (exit 2): the error, and what to do."""
    if isinstance(err, ClientError):
        return [
            f"error: {_client_error(err)}",
            "Fix it and run the bootstrap again: it resumes where it stopped.",
        ]
    # The first kind that matches: ProfileNotFound and EndpointConnectionError are
    # BotoCoreErrors too.
    templates: tuple[tuple[type[Exception], str], ...] = (
        (ProfileNotFound, "{}: set AWS_PROFILE to a configured profile or unset it"),
        (EndpointConnectionError, "cannot reach AWS: {}"),
        (BotoCoreError, "the AWS configuration cannot be used: {}"),
        (BootstrapError, "{}"),
    )
    template = next(text for kind, text in templates if isinstance(err, kind))
    return [f"error: {template.format(err)}"]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problems = argument_problems(args)
    if problems:
        print("error: " + "\n  ".join(["unusable arguments:", *problems]), file=sys.stderr)
        return 2
    options = Options(
        admin_roles=tuple(args.admin_role_arn),
        ci_roles=tuple(args.ci_role_arn),
        trail_retention_days=args.trail_retention_days,
        log_retention_days=args.log_retention_days,
        noncurrent_days=args.noncurrent_days,
        data_buckets=tuple(args.data_bucket),
        guardrail_target=args.target if args.org_guardrail else None,
        custom_key_store_id=args.custom_key_store_id,
        xks_key_ids=tuple(sorted(xks_key_ids(args.xks_key_id)[0].items())),
    )
    try:
        session = boto3.session.Session()
        account = session.client("sts", region_name=args.region).get_caller_identity()["Account"]
        names = Names(account, args.region, args.name_suffix)
        changes = Bootstrap(session, names, options, args.dry_run).run()
    except NoCredentialsError:
        if args.dry_run:
            print(
                _explain_without_credentials(
                    Names("<account-id>", args.region, args.name_suffix), options
                )
            )
            return 0
        print(
            "error: no AWS credentials found. Configure the default credential chain "
            "(AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, SSO or a role) for the "
            "account to bootstrap, then run `make bootstrap` again.",
            file=sys.stderr,
        )
        return 2
    except (BootstrapError, ClientError, BotoCoreError) as err:
        print("\n".join(_error_lines(err)), file=sys.stderr)
        return 2
    verb = "would change" if args.dry_run else "bootstrap of"
    print(f"{verb} account {names.account} in {names.region}:")
    print(_table(changes))
    if args.dry_run:
        print("dry run: nothing was changed.")
        return 0
    print("\nPut the stacks' state and secrets on them:")
    print("\n".join(f"  {line}" for line in pulumi_lines(names, STACKS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
