"""Helm releases in a plan, and the objects their charts render (``helm template``).

A ``kubernetes:helm.sh/v3:Release`` installs whatever its chart renders; the plan shows
only the release (chart, version, values), so the Kubernetes rules cannot see the
Deployments and DaemonSets inside it. Given ``helm template`` output, the review adds
each rendered object to the plan as a child of its release (the way Pulumi's
``kubernetes:helm.sh/v4:Chart`` registers them) and runs the same rules over them.

Layout of a rendered directory (``--rendered DIR``): one multi-document YAML file per
release, ``DIR/<release namespace>/<release name>.yaml`` (a release name is unique within
its namespace), exactly what
``helm template <release name> <chart> --namespace <namespace> ...`` prints.
``python -m policies.review.helm_inputs`` writes the chart, version, repository and
values of every release of a plan in the same layout, and the command lines that render
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from policies.k8s import CLUSTER_SCOPED_KINDS, HELM_RELEASE_TYPE
from policies.model import urn_name
from policies.review.plan import Plan, PlanError, PlanResource
from policies.values import decode_plan_value, is_unknown

# Custom resources from which an operator creates workloads at run time: those pods are
# in no plan and no rendered manifest, so no rule can judge them before they run.
OPERATOR_WORKLOADS: Mapping[str, str] = {
    "ClusterPolicy": (
        "the NVIDIA GPU Operator creates its driver, container toolkit, device plugin, "
        "DCGM exporter, feature discovery, MIG manager and validator DaemonSets from it"
    ),
    "NVIDIADriver": "the NVIDIA GPU Operator creates its driver DaemonSets from it",
    "NicClusterPolicy": (
        "the NVIDIA Network Operator creates its OFED driver, RDMA device plugin and "
        "secondary-network DaemonSets from it"
    ),
}


@dataclass(frozen=True)
class HelmRelease:
    """A Helm release of the plan, as the review and ``helm template`` need it.

    Args:
        urn: the release resource's URN.
        name: the Helm release name (the ``name`` input, else the Pulumi resource name).
        namespace: the release namespace (``default`` when the plan sets none).
        chart: the chart name or ``oci://`` reference.
        version: the pinned chart version ("" when the plan pins none).
        repo: the chart repository URL ("" for OCI and local charts).
        values: the values the program passes.
        provider: the release's Kubernetes provider URN.
    """

    urn: str
    name: str
    namespace: str
    chart: str
    version: str
    repo: str
    values: Mapping[str, Any]
    provider: str | None

    @property
    def label(self) -> str:
        """``namespace/name`` (chart version), for reports."""
        version = f" {self.version}" if self.version else ""
        return f"{self.namespace}/{self.name} ({self.chart}{version})"

    def rendered_file(self, directory: Path) -> Path:
        """Where the release's ``helm template`` output lives under ``directory``."""
        return directory / self.namespace / f"{self.name}.yaml"


def _text(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value and not is_unknown(value) else default


def helm_releases(plan: Plan) -> list[HelmRelease]:
    """Every Helm release the plan installs, in plan order."""
    releases = []
    for resource in plan.analyzable():
        if resource.type != HELM_RELEASE_TYPE:
            continue
        inputs = resource.inputs
        repo_opts = inputs.get("repositoryOpts")
        values = inputs.get("values")
        releases.append(
            HelmRelease(
                urn=resource.urn,
                name=_text(inputs.get("name"), resource.name),
                namespace=_text(inputs.get("namespace"), "default"),
                chart=_text(inputs.get("chart"), ""),
                version=_text(inputs.get("version"), ""),
                repo=_text(repo_opts.get("repo") if isinstance(repo_opts, Mapping) else None, ""),
                values=values if isinstance(values, Mapping) else {},
                provider=resource.provider,
            )
        )
    return releases


def _type_token(api_version: str, kind: str) -> str:
    """The Pulumi type token of a Kubernetes object (``apps/v1`` + ``DaemonSet`` ->
    ``kubernetes:apps/v1:DaemonSet``; the core group is ``core``)."""
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PlanError(f"{path}: cannot read it ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise PlanError(f"{path}: not UTF-8 text ({err.reason})") from err
    try:
        yield from enumerate(yaml.safe_load_all(text), 1)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise PlanError(
            f"{path}: not valid YAML{where}: {getattr(err, 'problem', None) or err}"
        ) from err


def _objects(path: Path) -> Iterator[dict[str, Any]]:
    """The Kubernetes objects of a ``helm template`` file (``List`` kinds flattened,
    empty documents skipped); `PlanError` for anything that is not an object."""
    for number, document in _documents(path):
        if document is None:
            continue
        items = document.get("items") if isinstance(document, dict) else None
        if (
            isinstance(document, dict)
            and document.get("kind") == "List"
            and isinstance(items, list)
        ):
            candidates = items
        else:
            candidates = [document]
        for item in candidates:
            if not (
                isinstance(item, dict)
                and isinstance(item.get("apiVersion"), str)
                and isinstance(item.get("kind"), str)
                and isinstance(item.get("metadata"), dict)
                and isinstance(item["metadata"].get("name"), str)
            ):
                raise PlanError(
                    f"{path}: document {number} is not a Kubernetes object with apiVersion, "
                    "kind and metadata.name (give the output of `helm template`)"
                )
            yield item


def _rendered_resources(release: HelmRelease, path: Path) -> list[PlanResource]:
    """The release's rendered objects as plan resources: children of the release, through
    its provider, named ``<release resource name>:<namespace>/<name>`` as Pulumi's
    ``helm.sh/v4:Chart`` names its children."""
    # urn:pulumi:<stack>::<project>::<parent types>::<name>
    parts = release.urn.split("::")
    prefix, parent_types = "::".join(parts[:2]), parts[2]
    resources = []
    for item in _objects(path):
        obj = decode_plan_value(item)
        kind = obj["kind"]
        metadata = obj["metadata"]
        if kind not in CLUSTER_SCOPED_KINDS and not metadata.get("namespace"):
            # helm installs objects that name no namespace into the release's namespace.
            metadata["namespace"] = release.namespace
        type_token = _type_token(obj["apiVersion"], kind)
        where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
        name = f"{urn_name(release.urn)}:{where}{metadata['name']}"
        urn = f"{prefix}::{parent_types}${type_token}::{name}"
        resources.append(
            PlanResource(
                urn=urn,
                type=type_token,
                name=name,
                custom=True,
                op="create",
                inputs=obj,
                state=obj,
                provider=release.provider,
                parent=release.urn,
                rendered_from=release.urn,
            )
        )
    return resources


def _stray_files(directory: Path, expected: set[Path]) -> list[str]:
    return sorted(
        str(path.relative_to(directory))
        for path in directory.rglob("*")
        if path.is_file() and path.suffix in (".yaml", ".yml") and path not in expected
    )


def with_rendered(plan: Plan, directory: Path) -> Plan:
    """``plan`` with the rendered objects of every release that has a file under
    ``directory`` added, and those releases marked seen. `PlanError` for a directory
    that does not exist, a file that matches no release of the plan (a typo would
    otherwise leave a release silently unseen), or a file that is not rendered objects."""
    if not directory.is_dir():
        raise PlanError(
            f"{directory}: no such directory (give the directory `helm template` output was "
            "written to, one <namespace>/<release>.yaml per release)"
        )
    releases = helm_releases(plan)
    files = {release.rendered_file(directory): release for release in releases}
    stray = _stray_files(directory, set(files))
    if stray:
        expected = ", ".join(sorted(str(p.relative_to(directory)) for p in files)) or "none"
        raise PlanError(
            f"{directory}: {', '.join(stray)} match(es) no Helm release of the plan; "
            f"expected <namespace>/<release>.yaml, one of: {expected}"
        )
    added: list[PlanResource] = []
    seen: set[str] = set()
    taken = set(plan.index)
    for path, release in files.items():
        if not path.is_file():
            continue
        for resource in _rendered_resources(release, path):
            if resource.urn in taken:
                raise PlanError(
                    f"{path}: {resource.name} appears twice; each object once per release"
                )
            taken.add(resource.urn)
            added.append(resource)
        seen.add(release.urn)
    return replace(
        plan,
        resources=plan.resources + tuple(added),
        seen_releases=plan.seen_releases | frozenset(seen),
    )


@dataclass(frozen=True)
class Unseen:
    """Something the Kubernetes rules could not evaluate.

    Args:
        urn: the Helm release, or the custom resource an operator turns into workloads.
        what: what it is, in a reviewer's words.
        why: why its workloads were not evaluated.
    """

    urn: str
    what: str
    why: str


def unseen(plan: Plan) -> list[Unseen]:
    """Every Helm release whose rendered objects were not evaluated, and every custom
    resource (in the plan or rendered) from which an operator creates workloads."""
    found = [
        Unseen(
            release.urn,
            f"Helm release {release.label}",
            "its rendered objects were not evaluated (review with --rendered to check them)",
        )
        for release in helm_releases(plan)
        if release.urn not in plan.seen_releases
    ]
    for resource in plan.analyzable():
        kind = resource.type.rsplit(":", 1)[-1]
        if resource.type.startswith("kubernetes:") and kind in OPERATOR_WORKLOADS:
            found.append(
                Unseen(
                    resource.urn,
                    f"{kind} {urn_name(resource.urn)}",
                    f"{OPERATOR_WORKLOADS[kind]} at run time; those pods are in no manifest",
                )
            )
    return found
