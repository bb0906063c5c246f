"""`make plan`: a stack's plan without the Pulumi CLI, a cloud account or credentials.

Runs the stack's program under the mock runtime (`stacks.offline_runtime`), with the
stack file's config, and writes ``build/plan/<stack>.json`` in the shape of
``pulumi preview --json`` (see DESIGN.md), plus a readable summary. The same stack
file always gives the same JSON, byte for byte.

The stack's secrets provider (its stack file's ``secretsprovider:`` line) and state
backend (``--backend``, else ``PULUMI_BACKEND_URL``, else the bootstrap's state bucket
for the placeholder account 123456789012) must be in the UAE, as in a real run.

Usage: ``python -m stacks.offline_plan [--quiet] [--out DIR] [--backend URL] STACK``
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pulumi
import yaml

from .config import PROJECT, SECRET_KEYS
from .config_parsing import engine_text
from .offline_runtime import Registration, run_program
from .plan_summary import render_summary
from .state_residency import StateResidency, for_offline_plan

STACKS_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = Path("build/plan")
# Offline stand-in for a secret the stack file holds encrypted (`secure:`): the real
# value can only be decrypted by the stack's secrets provider, which is not here.
OFFLINE_SECRET = "offline-plan-placeholder"
STACK_TYPE = "pulumi:pulumi:Stack"


class PlanError(Exception):
    """A problem the user must fix before a plan can be made (one-screen message)."""


#: The stacks the repository ships (the Makefile's STACKS); other stack files in
#: ``stacks/`` are the user's own.
SHIPPED_STACKS = ("onprem-ib", "smb-cpu", "uae-dev", "uae-prod")


def available_stacks() -> list[str]:
    """Stack names that have a ``stacks/Pulumi.<stack>.yaml`` file."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def load_stack_file(stack: str) -> tuple[dict[str, str], list[str]]:
    """The stack's config as the engine would pass it: strings, objects as JSON.

    Returns:
        The flat config map and the keys whose values are secret.
    """
    path = STACKS_DIR / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        own = [s for s in available_stacks() if s not in SHIPPED_STACKS]
        raise PlanError(
            f"Unknown stack '{stack}': there is no {path.relative_to(STACKS_DIR.parent)}.\n"
            f"Shipped stacks: {', '.join(SHIPPED_STACKS)}.\n"
            f"Your stacks: {', '.join(own) if own else 'none yet'} (a stack is a "
            f"stacks/Pulumi.<stack>.yaml file; copy a shipped one to start)."
        )
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise PlanError(f"{path.name} is not valid YAML: {err}") from None
    raw = document.get("config") if isinstance(document, dict) else None
    if not isinstance(raw, dict):
        raise PlanError(f"{path.name} needs a top-level 'config:' mapping of settings.")
    flat: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            flat[key], secret_keys = OFFLINE_SECRET, [*secret_keys, key]
        else:
            flat[key] = engine_text(value)
    for name in SECRET_KEYS:  # secrets are never in the repository; stand-ins take their place
        if f"{PROJECT}:{name}" not in flat:
            flat[f"{PROJECT}:{name}"], secret_keys = (
                OFFLINE_SECRET,
                [*secret_keys, f"{PROJECT}:{name}"],
            )
    return flat, secret_keys


def _ordered(registrations: Mapping[str, Registration]) -> list[Registration]:
    """Registrations in dependency order (parents, providers and dependencies first),
    ties broken by URN, so the order never depends on asyncio scheduling."""
    before: dict[str, set[str]] = {}
    for urn, reg in registrations.items():
        refs = {
            reg.parent,
            reg.provider.rsplit("::", 1)[0] if reg.provider else "",
            *reg.dependencies,
        }
        refs |= {u for deps in reg.property_dependencies.values() for u in deps}
        before[urn] = {r for r in refs if r in registrations and r != urn}
    waiting = {urn: len(deps) for urn, deps in before.items()}
    after: dict[str, list[str]] = {urn: [] for urn in registrations}
    for urn, deps in before.items():
        for dep in deps:
            after[dep].append(urn)
    ready = [urn for urn, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    ordered: list[Registration] = []
    while ready:
        urn = heapq.heappop(ready)
        ordered.append(registrations[urn])
        for nxt in after[urn]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(ordered) != len(registrations):  # a cycle cannot come from a Pulumi program
        ordered += sorted(
            (r for u, r in registrations.items() if r not in ordered), key=lambda r: r.urn
        )
    return ordered


def plan_document(
    registrations: Mapping[str, Registration], config: Mapping[str, str], secret_keys: Sequence[str]
) -> dict[str, Any]:
    """The plan in the shape of ``pulumi preview --json``."""
    steps = []
    for reg in _ordered(registrations):
        state: dict[str, Any] = {"urn": reg.urn, "type": reg.type, "custom": reg.custom}
        if reg.parent:
            state["parent"] = reg.parent
        if reg.provider:
            state["provider"] = reg.provider
        if reg.protect:
            state["protect"] = True
        state["inputs"] = reg.inputs
        if reg.dependencies:
            state["dependencies"] = reg.dependencies
        if reg.property_dependencies:
            state["propertyDependencies"] = reg.property_dependencies
        if reg.aliases:
            state["aliases"] = reg.aliases
        if reg.type == STACK_TYPE and reg.component_outputs:
            # The stack outputs (the residency evidence), where `pulumi preview --json`
            # shows them too.
            state["outputs"] = reg.component_outputs
        steps.append({"op": "create", "urn": reg.urn, "provider": reg.provider, "newState": state})
    shown_config = {k: ("[secret]" if k in secret_keys else v) for k, v in sorted(config.items())}
    return {"config": shown_config, "steps": steps, "changeSummary": {"create": len(steps)}}


def _plain(value: object) -> bool:
    """A JSON value without Outputs (those resolve only under the engine's run)."""
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def offline_program(stack: str, state: StateResidency | None = None) -> Callable[[], None]:
    """The Pulumi program of ``stack`` as the offline plan runs it: `stacks.program.main`
    with the state backend and secrets provider to check (default: the stack file's
    secrets provider and `stacks.state_residency.default_offline_backend`)."""
    checked = state or for_offline_plan(stack, path=STACKS_DIR / f"Pulumi.{stack}.yaml")

    def program() -> None:
        from .program import main  # noqa: PLC0415 - the program must load under the mocks

        main(checked)

    return program


def plan_registrations(
    stack: str,
    config: Mapping[str, str],
    secret_keys: Sequence[str] = (),
    state: StateResidency | None = None,
) -> dict[str, Registration]:
    """Run the program for ``stack`` with ``config``; raise `PlanError` on a bad config.

    Args:
        state: the state backend and secrets provider to check (default: the stack
            file's secrets provider and `stacks.state_residency.default_offline_backend`).
    """
    try:
        registrations, _ = run_program(
            offline_program(stack, state),
            project=PROJECT,
            stack=stack,
            config=config,
            secret_keys=list(secret_keys),
        )
    except pulumi.RunError as err:
        raise PlanError(str(err)) from None
    # Under the mock runtime the root stack never registers its outputs (the engine's
    # `run_in_stack` does that); take the program's exports from the root resource so
    # the plan carries them where `pulumi preview --json` does (the Stack's outputs).
    root = pulumi.runtime.settings.get_root_resource()
    exported = getattr(root, "outputs", None)
    stack_reg = next((r for r in registrations.values() if r.type == STACK_TYPE), None)
    if stack_reg is not None and isinstance(exported, dict):
        # Through JSON, so the in-memory plan equals the written one (tuples -> lists).
        stack_reg.component_outputs = json.loads(
            json.dumps({key: value for key, value in sorted(exported.items()) if _plain(value)})
        )
    return registrations


def build_plan(stack: str, config: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The plan document of a shipped stack (or of ``stack`` with ``config`` instead of
    its stack file). Writes nothing."""
    secret_keys: list[str] = []
    if config is None:
        config, secret_keys = load_stack_file(stack)
    return plan_document(plan_registrations(stack, config, secret_keys), config, secret_keys)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it into place, so a
    reader sees the old file or the whole new one, never a half-written plan."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _remove_stale(path: Path) -> str:
    """Remove the previous run's plan of a stack whose plan just failed (it no longer
    describes the stack file); a note for the error message when there was one."""
    try:
        if not path.is_file():
            return ""
        path.unlink()
    except OSError:
        return f"\n(the previous {path} could not be removed: it does not match the stack file)"
    return f"\n(removed the previous {path}: it no longer matches the stack file)"


def plan_stack(stack: str, out: Path, quiet: bool, backend: str | None) -> int:
    """Plan ``stack`` into ``out/<stack>.json`` and print its summary (one line with
    ``quiet``); 0, or 2 with one line on stderr (nothing of the stack's left behind)."""
    path = out / f"{stack}.json"
    try:
        config, secret_keys = load_stack_file(stack)
        state = for_offline_plan(stack, backend, path=STACKS_DIR / f"Pulumi.{stack}.yaml")
        registrations = plan_registrations(stack, config, secret_keys, state)
    except PlanError as err:
        stale = _remove_stale(path)
        print(f"error: {err}{stale}", file=sys.stderr)
        return 2
    document = plan_document(registrations, config, secret_keys)
    try:
        write_atomically(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    except OSError as err:
        stale = _remove_stale(path)
        message = f"error: cannot write the plan to {path}: {err.strerror or err}{stale}"
        print(message, file=sys.stderr)
        return 2
    if quiet:
        print(f"plan: {path} ({len(document['steps'])} resources)")
    else:
        print(render_summary(stack, registrations, path))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make plan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "stacks",
        nargs="+",
        metavar="stack",
        help=f"stack name ({', '.join(available_stacks())}); several are planned in turn in "
        "one process (`make plan-all`), stopping at the first that fails",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (build/plan)")
    parser.add_argument("--quiet", action="store_true", help="write the JSON, print one line")
    parser.add_argument(
        "--backend",
        metavar="URL",
        help="the stack's state backend (default: PULUMI_BACKEND_URL, else the bootstrap's "
        "state bucket for account 123456789012)",
    )
    options = parser.parse_args(argv)
    for stack in options.stacks:
        code = plan_stack(stack, options.out, options.quiet, options.backend)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
