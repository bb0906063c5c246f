"""``make promote`` / ``make rollback``: move the serving aliases of a registered model,
and print the stack change that moves the cluster with them.

* ``promote``: the ``challenger`` becomes the ``champion``; the champion it replaces is
  kept as ``previous``; ``challenger`` is removed.
* ``rollback``: ``previous`` becomes the ``champion`` again; ``previous`` is removed
  (the rolled-back version keeps its number and files; register or alias it again to
  retry it).

``--dry-run`` prints the same plan and changes nothing.

The registry moves here; the cluster does not. An InferenceService names a version and
its storage path in the stack's config (``modelVersion``/``storagePath``, and
``canaryVersion``/``canaryStoragePath``/``canaryTrafficPercent`` for the canary): the
Pulumi program runs offline and cannot ask the in-cluster MLflow server what an alias
names. So each command prints the exact ``pulumi config set``/``rm`` lines that put the
new champion (and no canary) into the stack, and the ``pulumi up`` that applies them;
the storage paths come from the version's tags, written by `make register`.

Exit status: 0 done (or dry run), 2 unknown model, a missing alias (right after the
first `make register` there is no challenger yet, and the message says what makes one),
a tracking URI that is not a server's URL, an unreachable server.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.tracking.registry import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS,
    RegistryError,
    call,
    make_client,
)

EXIT_OK = 0
EXIT_USER_ERROR = 2
#: The stack config section of the service the shipped stacks deploy.
DEFAULT_SERVICE_KEY = "uae-gpu-platform:exampleService"
#: Version tags `make register` writes with the storage paths serving reads.
STORAGE_TAGS = {"triton": "storage_path.triton", "cpu": "storage_path.cpu"}
CANARY_KEYS = ("canaryVersion", "canaryStoragePath", "canaryTrafficPercent")


@dataclass(frozen=True)
class Move:
    """One alias change: ``alias`` to ``version``, or removed when ``version`` is empty."""

    alias: str
    version: str

    def describe(self, before: str) -> str:
        if not self.version:
            return f"{self.alias}: {before} -> (removed)"
        return f"{self.alias}: {before or '(none)'} -> {self.version}"


def _aliases(client: Any, uri: str, name: str) -> dict[str, str]:
    model = call(
        uri,
        lambda: client.get_registered_model(name),
        missing=(
            f"no registered model {name!r} on {uri}; `make register RUN=<id>` creates it "
            "(it prints the name)"
        ),
    )
    return {alias: str(version) for alias, version in dict(model.aliases).items()}


def plan(
    action: str, name: str, aliases: dict[str, str], versions: Sequence[str] = ()
) -> tuple[str, list[Move]]:
    """The new champion and the alias moves of ``promote`` or ``rollback``.

    Args:
        versions: the model's version numbers, for the message when there is nothing
            to promote.

    Raises:
        RegistryError: the alias the action needs is not set.
    """
    champion = aliases.get(CHAMPION, "")
    if action == "promote":
        challenger = aliases.get(CHALLENGER)
        if not challenger:
            raise RegistryError(_nothing_to_promote(name, aliases, versions))
        moves = [Move(PREVIOUS, champion)] if champion else []
        return challenger, [*moves, Move(CHAMPION, challenger), Move(CHALLENGER, "")]
    previous = aliases.get(PREVIOUS)
    if not previous:
        raise RegistryError(
            f"model {name!r} has no {PREVIOUS!r} alias, so there is nothing to roll back to "
            f"(aliases: {_listed(aliases)}); `make promote` sets it to the champion it replaces"
        )
    return previous, [Move(CHAMPION, previous), Move(PREVIOUS, "")]


def _nothing_to_promote(name: str, aliases: dict[str, str], versions: Sequence[str]) -> str:
    """Why ``promote`` has nothing to do, and what makes a challenger."""
    head = f"model {name!r} has no {CHALLENGER!r} alias, so there is nothing to promote"
    register = "`make register RUN=<id>` of a newer run makes its version the challenger"
    champion = aliases.get(CHAMPION, "")
    newest = max(versions, key=int, default="")
    if champion and champion == newest and len(versions) == 1:
        # Right after the first `make register`: its version is the champion already.
        return (
            f"{head} yet: version {champion}, its only version, is the champion already. "
            f"{register}; `make promote` then makes that the champion"
        )
    if champion and champion == newest:
        return f"{head}: its newest version, {champion}, is the champion already. {register}"
    return f"{head} (aliases: {_listed(aliases)}). {register} while a champion exists"


def _listed(aliases: dict[str, str]) -> str:
    return ", ".join(f"{a}={v}" for a, v in sorted(aliases.items())) or "none"


def stack_commands(
    version: str, storage_path: str, *, stack: str, key: str = DEFAULT_SERVICE_KEY
) -> list[str]:
    """The Pulumi CLI lines that make ``version`` the service's stable version, with no
    canary, and apply it."""
    path = storage_path or "<the version's storage path>"
    return [
        f"pulumi config set --stack {stack} --path '{key}.modelVersion' {version}",
        f"pulumi config set --stack {stack} --path '{key}.storagePath' '{path}'",
        *(f"pulumi config rm --stack {stack} --path '{key}.{canary}'" for canary in CANARY_KEYS),
        f"pulumi up --stack {stack}",
    ]


def canary_commands(
    version: str,
    storage_path: str,
    percent: int,
    *,
    stack: str,
    key: str = DEFAULT_SERVICE_KEY,
) -> list[str]:
    """The Pulumi CLI lines that roll ``version`` out as the service's canary."""
    return [
        f"pulumi config set --stack {stack} --path '{key}.canaryVersion' {version}",
        f"pulumi config set --stack {stack} --path '{key}.canaryStoragePath' '{storage_path}'",
        f"pulumi config set --stack {stack} --path '{key}.canaryTrafficPercent' {percent}",
        f"pulumi up --stack {stack}",
    ]


def _mover(client: Any, name: str, move: Move) -> Callable[[], None]:
    if move.version:
        return lambda: client.set_registered_model_alias(name, move.alias, move.version)
    return lambda: client.delete_registered_model_alias(name, move.alias)


def run(
    action: str,
    name: str,
    uri: str,
    *,
    dry_run: bool,
    runtime: str = "triton",
    stack: str = "<stack>",
    key: str = DEFAULT_SERVICE_KEY,
) -> list[str]:
    """Carry out (or, with ``dry_run``, only plan) ``action``; returns the lines to print."""
    client = make_client(uri)
    aliases = _aliases(client, uri, name)
    versions: list[str] = []
    if action == "promote" and not aliases.get(CHALLENGER):  # for the message only
        found = call(uri, lambda: client.search_model_versions(f"name='{name}'"))
        versions = [str(v.version) for v in found]
    champion, moves = plan(action, name, aliases, versions)
    version = call(uri, lambda: client.get_model_version(name, champion))
    storage_path = str(version.tags.get(STORAGE_TAGS[runtime], ""))
    verb = "would move" if dry_run else "moved"
    lines = [f"{action}: model {name!r} on {uri}: {verb}"]
    lines += [f"  {move.describe(aliases.get(move.alias, ''))}" for move in moves]
    if not dry_run:
        for move in moves:
            call(uri, _mover(client, name, move))
    lines.append(
        f"{action}: the registry {'is unchanged (dry run)' if dry_run else 'is changed'}; the "
        f"cluster is not. To serve version {champion} as the stable version ({runtime} "
        "storage path, no canary), run from the repository root:"
    )
    lines += [f"  {line}" for line in stack_commands(champion, storage_path, stack=stack, key=key)]
    if not storage_path:
        lines.append(
            f"{action}: version {champion} has no {STORAGE_TAGS[runtime]} tag (registered before "
            "the tag existed, or not from an MLflow artifact store): copy its path from the "
            "registry"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.tracking.promote",
        description="Move a registered model's champion/challenger/previous aliases.",
    )
    parser.add_argument("action", choices=("promote", "rollback"))
    parser.add_argument("--name", default="", help="the registered model (make register prints it)")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        help="tracking server (default: MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    parser.add_argument(
        "--runtime",
        choices=("triton", "cpu"),
        default="triton",
        help="which storage path the stack's service needs: triton (GPU pools) or cpu",
    )
    parser.add_argument("--stack", default="<stack>", help="stack name for the printed commands")
    parser.add_argument(
        "--service-key", default=DEFAULT_SERVICE_KEY, help="the service's stack config key"
    )
    args = parser.parse_args(argv)
    name = args.name.strip()
    if not name:
        print(
            f"{args.action}: give the registered model: make {args.action} NAME=<model> "
            "(make register printed it)",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    try:
        lines = run(
            args.action,
            name,
            args.tracking_uri,
            dry_run=args.dry_run,
            runtime=args.runtime,
            stack=args.stack,
            key=args.service_key,
        )
    except RegistryError as err:
        print(f"{args.action}: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    print("\n".join(lines))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
