"""Where the stack's state and secrets live, checked before any resource is registered.

Pulumi keeps a stack's state in its backend and encrypts its secrets with its secrets
provider; neither is a resource, so the policy pack never sees them. The program reads
what it reliably can at run time:

- the secrets provider: the ``secretsprovider:`` line of ``stacks/Pulumi.<stack>.yaml``,
  the file the CLI itself reads it from (absent: Pulumi falls back to the passphrase or
  the Pulumi Cloud provider, both outside the UAE's control);
- the backend: the engine does not pass it to the program, so the program resolves it
  the way the CLI does (``PULUMI_BACKEND_URL``, then ``backend.url`` of ``Pulumi.yaml``,
  then the ``current`` login of ``$PULUMI_HOME/credentials.json``). The CI workflow
  cross-checks it against ``pulumi whoami --verbose`` (see docs/compliance.md).

A URL passes only when it names its UAE region explicitly: ``s3://<bucket>?region=...``
and ``awskms://<key>?region=...`` (or a key ARN in the region). Whether the bucket and
key really are there is what ``make audit`` verifies against the account.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from modules.residency import UAE_AWS_REGIONS

from .bootstrap.names import PLACEHOLDER_ACCOUNT, Names

STACKS_DIR = Path(__file__).resolve().parent
PROJECT_FILE = STACKS_DIR.parent / "Pulumi.yaml"
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:([a-z0-9-]+):\d{12}:(key|alias)/.+$")
_FIX = "run `make bootstrap` and use the lines it prints"


@dataclass(frozen=True)
class Located:
    """A backend or secrets provider URL, where it came from, and its region.

    Args:
        url: the URL as given (``None`` when there is none).
        source: where it was read (``stacks/Pulumi.x.yaml:3``, ``PULUMI_BACKEND_URL`` ...).
        region: the AWS region the URL names, or ``None`` when it names none.
    """

    url: str | None
    source: str
    region: str | None

    def as_output(self) -> dict[str, str | None]:
        return {"url": self.url, "source": self.source, "region": self.region}


def _query_region(url: str) -> str | None:
    values = parse_qs(urlsplit(url).query).get("region")
    return values[0] if values else None


def backend_region(url: str) -> str | None:
    """The region of an ``s3://`` backend URL (its ``region`` parameter), else None."""
    return _query_region(url) if url.startswith("s3://") else None


def secrets_provider_region(url: str) -> str | None:
    """The region of an ``awskms://`` secrets provider (a key ARN's, else ``region=``)."""
    if not url.startswith("awskms://"):
        return None
    key = url[len("awskms://") :].lstrip("/").split("?", 1)[0]
    arn = _KMS_ARN.match(key)
    query = _query_region(url)
    if arn:
        # A region parameter that contradicts the ARN would send the calls elsewhere.
        return arn.group(1) if query in (None, arn.group(1)) else None
    return query


def stack_file(stack: str) -> Path:
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(STACKS_DIR.parent))
    except ValueError:
        return str(path)


def read_secrets_provider(path: Path) -> Located:
    """The ``secretsprovider:`` line of a stack file (url None when absent)."""
    shown = _shown(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return Located(None, shown, None)
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("secretsprovider:"):
            try:
                value = yaml.safe_load(line.split(":", 1)[1])
            except yaml.YAMLError:
                value = line.split(":", 1)[1].strip()
            url = str(value) if value is not None else ""
            return Located(url, f"{shown}:{number}", secrets_provider_region(url))
    return Located(None, shown, None)


def discover_backend(
    environ: Mapping[str, str] | None = None, project_file: Path = PROJECT_FILE
) -> Located:
    """The backend the CLI uses, resolved in the CLI's order of precedence."""
    environ = os.environ if environ is None else environ
    url = environ.get("PULUMI_BACKEND_URL")
    if url:
        return Located(url, "PULUMI_BACKEND_URL", backend_region(url))
    try:
        project = yaml.safe_load(project_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        project = {}
    backend = project.get("backend") if isinstance(project, dict) else None
    if isinstance(backend, dict) and backend.get("url"):
        url = str(backend["url"])
        return Located(url, f"{project_file.name} backend.url", backend_region(url))
    home = Path(environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
    try:
        current = json.loads((home / "credentials.json").read_text(encoding="utf-8"))["current"]
    except (OSError, ValueError, KeyError, TypeError):
        return Located(None, f"{home / 'credentials.json'} (no current login)", None)
    url = str(current)
    return Located(url, f"`pulumi login` ({home / 'credentials.json'})", backend_region(url))


def default_offline_backend(environ: Mapping[str, str] | None = None) -> Located:
    """The offline plan's backend: ``PULUMI_BACKEND_URL`` when set, else the state
    bucket the bootstrap would create for the placeholder account."""
    environ = os.environ if environ is None else environ
    url = environ.get("PULUMI_BACKEND_URL")
    if url:
        return Located(url, "PULUMI_BACKEND_URL", backend_region(url))
    url = Names(PLACEHOLDER_ACCOUNT).backend_url
    source = "offline default (the bootstrap's state bucket for a placeholder account)"
    return Located(url, source, backend_region(url))


@dataclass(frozen=True)
class StateResidency:
    """The stack's state backend and secrets provider, as the program found them."""

    stack: str
    backend: Located
    secrets_provider: Located

    def problems(self, allowed: tuple[str, ...] = UAE_AWS_REGIONS) -> list[str]:
        """One line per problem, each naming where the value came from and the fix."""
        names = Names("<account-id>")
        problems = []
        secrets = self.secrets_provider
        if secrets.url is None:
            problems.append(
                f"{secrets.source} has no `secretsprovider:` line, so Pulumi would encrypt "
                "the stack's secrets with a passphrase or the Pulumi Cloud key, not a key in "
                f"the UAE; {_FIX}: `pulumi stack change-secrets-provider "
                f"'{names.secrets_provider}'` (or `pulumi stack init ... --secrets-provider`)"
            )
        elif secrets.region not in allowed:
            where = f"in {secrets.region}" if secrets.region else "with no UAE region"
            problems.append(
                f"{secrets.source}: secretsprovider {secrets.url!r} is {where}; allowed: an "
                f"awskms:// key in {', '.join(allowed)}; {_FIX}: `pulumi stack "
                f"change-secrets-provider '{names.secrets_provider}'`"
            )
        backend = self.backend
        region = backend.region or backend_region(backend.url or "")
        if backend.url is None:
            problems.append(
                f"no state backend found ({backend.source}); {_FIX}: "
                f"`pulumi login '{names.backend_url}'`"
            )
        elif region not in allowed:
            where = f"in {region}" if region else "not an s3:// bucket with a UAE region"
            problems.append(
                f"state backend {backend.url!r} (from {backend.source}) is {where}; allowed: "
                f"s3://<bucket>?region= one of {', '.join(allowed)}; {_FIX}: "
                f"`pulumi login '{names.backend_url}'`"
            )
        return problems

    def render(self, problems: list[str]) -> str:
        count = len(problems)
        lines = [
            f"Stack '{self.stack}' would keep its state or secrets outside the UAE "
            f"({count} problem{'s' * (count != 1)}); nothing was created:"
        ]
        lines += [f"  - {p}" for p in problems]
        return "\n".join(lines)

    def as_output(self) -> dict[str, object]:
        """What the program exports as the ``residency`` stack output (plan evidence)."""
        return {
            "stateBackend": self.backend.as_output(),
            "secretsProvider": self.secrets_provider.as_output(),
        }


def for_program(stack: str, environ: Mapping[str, str] | None = None) -> StateResidency:
    """What a real ``pulumi preview``/``up`` run of ``stack`` uses."""
    return StateResidency(
        stack, discover_backend(environ), read_secrets_provider(stack_file(stack))
    )


def for_offline_plan(
    stack: str,
    backend_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> StateResidency:
    """What an offline plan of ``stack`` checks: its stack file's (``path``, default
    ``stacks/Pulumi.<stack>.yaml``) secrets provider and the backend given with
    ``--backend`` (else `default_offline_backend`)."""
    backend = (
        Located(backend_url, "--backend", backend_region(backend_url))
        if backend_url
        else default_offline_backend(environ)
    )
    return StateResidency(stack, backend, read_secrets_provider(path or stack_file(stack)))


def backend_from_whoami(text: str) -> str | None:
    """The ``Backend URL:`` line of ``pulumi whoami --verbose`` output, if any."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "backend url" and value.strip():
            return value.strip()
    return None


def main(argv: list[str] | None = None) -> int:
    """``pulumi whoami --verbose | python -m stacks.state_residency STACK``: the CI
    check that the backend the CLI really uses, and the stack file's secrets provider,
    are in the UAE (exit 0), or one message and exit 2."""
    import argparse  # noqa: PLC0415 - only the command line needs it
    import sys  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m stacks.state_residency")
    parser.add_argument("stack", help="the stack whose stacks/Pulumi.<stack>.yaml is checked")
    parser.add_argument(
        "--whoami", default="-", help="`pulumi whoami --verbose` output file (- for stdin)"
    )
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.whoami == "-" else Path(args.whoami).read_text("utf-8")
    url = backend_from_whoami(text)
    backend = Located(url, "`pulumi whoami --verbose`", backend_region(url or ""))
    if url is None:
        backend = Located(None, "`pulumi whoami --verbose` shows no Backend URL", None)
    state = StateResidency(args.stack, backend, read_secrets_provider(stack_file(args.stack)))
    problems = state.problems()
    if problems:
        print(f"error: {state.render(problems)}", file=sys.stderr)
        return 2
    print(
        f"{args.stack}: state in {backend.region} ({url}), secrets with "
        f"{state.secrets_provider.url} ({state.secrets_provider.source})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
