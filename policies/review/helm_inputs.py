"""``python -m policies.review.helm_inputs --plan X --out DIR``: what ``helm template``
needs to render every Helm release of a plan, as the program installs it.

Writes, under ``DIR``:

- ``<namespace>/<release>.values.yaml``: the values the program passes (unknown
  preview values become the string ``unknown-at-preview``, secrets the plan hides
  become ``[secret]``);
- ``releases.json``: per release its namespace, name, chart, pinned version,
  repository, values file and the file its rendered output belongs in;
- ``render.sh``: one ``helm template`` line per release (arguments shell-quoted),
  writing ``<rendered dir>/<namespace>/<release>.yaml``, the layout
  ``python -m policies.review --rendered`` reads. Run it as
  ``bash DIR/render.sh <rendered dir>`` with a pinned ``helm`` on PATH.

Exit status 0, or 2 for an unusable plan or output directory.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from policies.review.plan import Plan, PlanError, load_plan
from policies.review.rendered import HelmRelease, helm_releases
from policies.values import is_unknown

UNKNOWN_PLACEHOLDER = "unknown-at-preview"


def _known(value: Any) -> Any:
    """``value`` with unknown preview values replaced by a placeholder string."""
    if is_unknown(value):
        return UNKNOWN_PLACEHOLDER
    if isinstance(value, Mapping):
        return {str(k): _known(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_known(v) for v in value]
    return value


def kubernetes_version(plan: Plan) -> str | None:
    """The cluster's Kubernetes minor version from the stack config, if the plan has it
    (charts gate templates on ``.Capabilities.KubeVersion``)."""
    for key, value in plan.config.items():
        if key.endswith(":kubernetesVersion") and isinstance(value, str | int | float):
            text = str(value)
            if text and not is_unknown(text):
                return text
    return None


def helm_command(release: HelmRelease, values_file: str, kube_version: str | None) -> list[str]:
    """The ``helm template`` arguments that render ``release`` as the program installs it."""
    command = [
        "helm",
        "template",
        release.name,
        release.chart,
        "--namespace",
        release.namespace,
        "--values",
        values_file,
        # Pulumi's Release never runs chart tests; their pods are not installed.
        "--skip-tests",
    ]
    if release.version:
        command += ["--version", release.version]
    if release.repo:
        command += ["--repo", release.repo]
    if kube_version:
        command += ["--kube-version", kube_version]
    return command


def write_inputs(plan: Plan, out: Path) -> list[dict[str, Any]]:
    """Write the values files, releases.json and render.sh for ``plan`` under ``out``."""
    releases = helm_releases(plan)
    kube_version = kubernetes_version(plan)
    out.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    script = [
        "#!/usr/bin/env bash",
        f"# Written by python -m policies.review.helm_inputs from {plan.path}; renders each",
        "# Helm release with its pinned chart and the program's values.",
        'set -euo pipefail\nout="${1:?usage: render.sh <rendered dir>}"',
        'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
    ]
    for release in releases:
        values_rel = f"{release.namespace}/{release.name}.values.yaml"
        rendered_rel = f"{release.namespace}/{release.name}.yaml"
        values_path = out / values_rel
        values_path.parent.mkdir(parents=True, exist_ok=True)
        values_path.write_text(
            yaml.safe_dump(_known(dict(release.values)), sort_keys=True), encoding="utf-8"
        )
        entries.append(
            {
                "urn": release.urn,
                "namespace": release.namespace,
                "name": release.name,
                "chart": release.chart,
                "version": release.version,
                "repo": release.repo,
                "values": values_rel,
                "rendered": rendered_rel,
            }
        )
        command = helm_command(release, "__VALUES__", kube_version)
        line = shlex.join(command).replace(
            shlex.quote("__VALUES__"), f'"$here"/{shlex.quote(values_rel)}'
        )
        script += [
            f'mkdir -p "$out"/{shlex.quote(release.namespace)}',
            f'{line} > "$out"/{shlex.quote(rendered_rel)}',
        ]
    (out / "releases.json").write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    (out / "render.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m policies.review.helm_inputs",
        description="Write each Helm release's chart, version, repository and values, and "
        "the helm template commands that render them.",
    )
    parser.add_argument("--plan", required=True, type=Path, help="plan document")
    parser.add_argument("--out", required=True, type=Path, help="directory to write to")
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan)
    except PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        entries = write_inputs(plan, args.out)
    except OSError as err:
        print(f"error: cannot write to {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(
        f"{plan.name}: {len(entries)} Helm release(s) -> {args.out}/ "
        f"(render with: bash {args.out}/render.sh <rendered dir>)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
