"""The pipeline's last step: the roll-out of the version it registered, as the stack
change that serves it, written and printed, not applied.

``python -m workloads.tracking.canary --run-id RUN --name NAME --tracking-uri URI``

The version is the one `make register` made from the run (the registry's ``run_id``).
What happens to it depends on the alias registration gave it:

* ``challenger`` (a champion exists): the canary. The Pulumi lines that put the version
  beside the champion on ``--percent`` of the requests (`promote.canary_commands`, what
  `make register` prints), then what `make promote NAME=... ARGS=--dry-run` shows for
  the step after a good canary: the alias moves and the stack lines that make it the
  stable version (`promote.run` with ``dry_run``).
* ``champion`` (the model's first version): nothing to compare it with, so no canary;
  the lines that serve it as the stable version (`promote.stack_commands`).
* no serving alias (the run was registered before and its version has moved on): said,
  and nothing to roll out.

Nothing changes: not the registry (the promotion is a dry run) and not the cluster. The
Pulumi program runs offline from a stack's config and cannot be driven from inside a
pipeline step; the cluster moves when someone runs the printed lines (docs/serving.md).
The plan also goes to ``--plan`` as JSON, and the version number to ``--version-out``.

Exit status: 0 planned; 2 no version from that run, an unreachable server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads.tracking.promote import (
    DEFAULT_SERVICE_KEY,
    STORAGE_TAGS,
    canary_commands,
    stack_commands,
)
from workloads.tracking.promote import run as promote_run
from workloads.tracking.registry import (
    CHALLENGER,
    CHAMPION,
    RegistryError,
    call,
    make_client,
)

EXIT_OK = 0
EXIT_USER_ERROR = 2
#: The canary's share of the requests, as `make register` prints it (25% splits evenly
#: over 4 replicas).
DEFAULT_PERCENT = 25


@dataclass(frozen=True)
class RolloutPlan:
    """What the canary step decided.

    Args:
        name: the registered model.
        version: the version the pipeline registered.
        alias: its serving alias (``challenger``, ``champion``) or empty.
        mode: ``canary``, ``stable`` (first version) or ``none``.
        storage_path: the version's storage path for ``runtime``.
        commands: the stack lines that roll it out (not run).
        promote_preview: what `make promote ... ARGS=--dry-run` prints for it (canary only).
    """

    name: str
    version: str
    alias: str
    mode: str
    storage_path: str
    commands: list[str] = field(default_factory=list)
    promote_preview: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = f"canary: model {self.name!r} version {self.version}"
        if self.mode == "canary":
            return [
                f"{head} is the {CHALLENGER}: to try it beside the {CHAMPION}, run from the "
                "repository root (nothing was applied):",
                *(f"  {line}" for line in self.commands),
                "canary: after a good canary, `make promote` does this (its dry run, shown "
                "here; the registry is unchanged):",
                *(f"  {line}" for line in self.promote_preview),
            ]
        if self.mode == "stable":
            return [
                f"{head} is the model's first, so it is the {CHAMPION} and there is nothing to "
                "run a canary against; to serve it as the stable version, run from the "
                "repository root (nothing was applied):",
                *(f"  {line}" for line in self.commands),
            ]
        return [
            f"{head} has no {CHAMPION} or {CHALLENGER} alias (it was registered before and "
            "the aliases have moved on); nothing to roll out"
        ]


def _version_of_run(client: Any, uri: str, name: str, run_id: str) -> Any:
    versions = call(
        uri, lambda: client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    )
    if not versions:
        raise RegistryError(
            f"model {name!r} on {uri} has no version from run {run_id}; the register step "
            "makes it (`make register RUN=<id>`)"
        )
    return max(versions, key=lambda v: int(v.version))


def plan(
    run_id: str,
    name: str,
    uri: str,
    *,
    stack: str = "<stack>",
    percent: int = DEFAULT_PERCENT,
    runtime: str = "triton",
    key: str = DEFAULT_SERVICE_KEY,
) -> RolloutPlan:
    """The roll-out of run ``run_id``'s version of ``name`` (module docstring).

    Raises:
        RegistryError: no such version, an unreachable server.
    """
    if not 1 <= percent <= 99:
        raise RegistryError(f"--percent must be in 1-99, got {percent}")
    client = make_client(uri)
    version = _version_of_run(client, uri, name, run_id)
    number = str(version.version)
    aliases = {
        alias: str(v)
        for alias, v in dict(call(uri, lambda: client.get_registered_model(name)).aliases).items()
    }
    path = str(version.tags.get(STORAGE_TAGS[runtime], ""))
    shown_path = path or "<the version's storage path>"
    if aliases.get(CHALLENGER) == number:
        preview = promote_run(
            "promote", name, uri, dry_run=True, runtime=runtime, stack=stack, key=key
        )
        return RolloutPlan(
            name,
            number,
            CHALLENGER,
            "canary",
            path,
            canary_commands(number, shown_path, percent, stack=stack, key=key),
            preview,
        )
    if aliases.get(CHAMPION) == number:
        commands = stack_commands(number, path, stack=stack, key=key)
        return RolloutPlan(name, number, CHAMPION, "stable", path, commands)
    return RolloutPlan(name, number, "", "none", path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.canary",
        description="Print (and write) the roll-out of the model version a run registered.",
    )
    parser.add_argument("--run-id", required=True, help="the MLflow run the version came from")
    parser.add_argument("--name", required=True, help="the registered model")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--stack", default="<stack>", help="stack name for the printed lines")
    parser.add_argument(
        "--percent", type=int, default=DEFAULT_PERCENT, help="the canary's share of requests"
    )
    parser.add_argument(
        "--runtime",
        choices=sorted(STORAGE_TAGS),
        default="triton",
        help="which storage path the service needs: triton (GPU pools) or cpu",
    )
    parser.add_argument(
        "--service-key", default=DEFAULT_SERVICE_KEY, help="the service's stack config key"
    )
    parser.add_argument("--plan", type=Path, help="write the plan here as JSON")
    parser.add_argument("--version-out", type=Path, help="write the version number here")
    args = parser.parse_args(argv)
    run_id, name = args.run_id.strip(), args.name.strip()
    if not run_id or not name:
        print("canary: give --run-id and --name", file=sys.stderr)
        return EXIT_USER_ERROR
    try:
        result = plan(
            run_id,
            name,
            args.tracking_uri,
            stack=args.stack,
            percent=args.percent,
            runtime=args.runtime,
            key=args.service_key,
        )
    except RegistryError as err:
        print(f"canary: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    for path, text in (
        (args.plan, json.dumps(asdict(result), indent=2) + "\n"),
        (args.version_out, result.version),
    ):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    print("\n".join(result.lines()))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
