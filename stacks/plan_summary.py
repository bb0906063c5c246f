"""The readable summary `make plan` prints: what the stack would create and where."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path

from .image_lock import lock_path, object_images
from .offline_runtime import Registration


def _short(type_token: str) -> str:
    return type_token.rsplit(":", 1)[-1]


def _by_id(registrations: Mapping[str, Registration], type_token: str) -> dict[str, Registration]:
    return {r.id: r for r in registrations.values() if r.type == type_token}


def node_pool_lines(registrations: Mapping[str, Registration]) -> list[str]:
    """One line per managed node group: type, capacity, size, zones, EFA, placement."""
    subnets = _by_id(registrations, "aws:ec2/subnet:Subnet")
    templates = _by_id(registrations, "aws:ec2/launchTemplate:LaunchTemplate")
    lines = []
    for reg in sorted(registrations.values(), key=lambda r: r.urn):
        if reg.type != "aws:eks/nodeGroup:NodeGroup":
            continue
        inputs = reg.inputs
        zones = sorted(
            {
                subnets[s].inputs.get("availabilityZone", "?")
                for s in inputs.get("subnetIds", [])
                if s in subnets
            }
        )
        template = templates.get(str(inputs.get("launchTemplate", {}).get("id", "")))
        interfaces = (template.inputs.get("networkInterfaces") or []) if template else []
        efa = sum(1 for i in interfaces if i.get("interfaceType") in ("efa", "efa-only"))
        placement = bool(template and template.inputs.get("placement", {}).get("groupName"))
        scaling = inputs.get("scalingConfig", {})
        taints = (
            ",".join(f"{t['key']}={t.get('value', '')}" for t in inputs.get("taints", [])) or "-"
        )
        name = inputs.get("nodeGroupName", reg.name)
        types = ",".join(inputs.get("instanceTypes", []))
        size = f"{scaling.get('minSize')}-{scaling.get('maxSize')}"
        lines.append(
            f"  {name:<24} {types:<15} {inputs.get('capacityType', ''):<14} size {size}  "
            f"zones {','.join(zones) or '-'}  EFA {efa}  "
            f"placement-group {'yes' if placement else 'no'}  taints {taints}"
        )
    return lines


def key_usage_lines(registrations: Mapping[str, Registration]) -> list[str]:
    """For each KMS key: its alias and every resource property it encrypts or protects."""
    aliases = {
        dep: reg.inputs.get("name", "")
        for reg in registrations.values()
        if reg.type == "aws:kms/alias:Alias"
        for dep in reg.property_dependencies.get("targetKeyId", [])
    }
    users: dict[str, set[str]] = defaultdict(set)
    for reg in registrations.values():
        if reg.type == "aws:kms/alias:Alias":
            continue
        for prop, deps in reg.property_dependencies.items():
            for dep in deps:
                if dep in aliases:
                    users[dep].add(f"{_short(reg.type)} {reg.name} ({prop})")
    lines = []
    for key_urn in sorted(aliases):
        lines.append(f"  {aliases[key_urn]}")
        lines += [f"      {use}" for use in sorted(users[key_urn])] or ["      (unused)"]
    return lines


def kubernetes_lines(registrations: Mapping[str, Registration]) -> list[str]:
    """Helm releases (chart, version, namespace) and counts of Kubernetes objects by kind."""
    lines = []
    for reg in sorted(registrations.values(), key=lambda r: r.urn):
        if reg.type == "kubernetes:helm.sh/v3:Release":
            inputs = reg.inputs
            release = inputs.get("name", reg.name)
            lines.append(
                f"  helm {release:<28} {inputs.get('chart')} {inputs.get('version')} "
                f"(namespace {inputs.get('namespace', '-')})"
            )
    kinds = Counter(
        _short(r.type)
        for r in registrations.values()
        if r.type.startswith("kubernetes:") and "helm.sh" not in r.type
    )
    if kinds:
        lines.append("  objects: " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))
    for reg in registrations.values():
        plugins = reg.component_outputs.get("poolPlugins") if reg.component_outputs else None
        for pool, names in sorted((plugins or {}).items()):
            lines.append(f"  pool {pool:<14} gets {', '.join(names)}")
    return lines


def tracking_lines(registrations: Mapping[str, Registration]) -> list[str]:
    """The MLflow tracking server: where it is reached, its database and its artifacts."""
    lines = []
    for reg in registrations.values():
        if reg.type == "gpuplatform:k8s:Tracking":
            uri = (reg.component_outputs or {}).get("trackingUri", "?")
            lines.append(f"  server     {uri} (basic auth; team namespaces and Prometheus only)")
    for reg in registrations.values():
        inputs = reg.inputs
        if reg.type == "aws:rds/instance:Instance":
            lines.append(
                f"  database   RDS {inputs.get('engine')} {inputs.get('engineVersion')} "
                f"{inputs.get('instanceClass')}, {inputs.get('allocatedStorage')}-"
                f"{inputs.get('maxAllocatedStorage')} GiB, multi-AZ "
                f"{'yes' if inputs.get('multiAz') else 'no'}, backups "
                f"{inputs.get('backupRetentionPeriod')} days, public "
                f"{'yes' if inputs.get('publiclyAccessible') else 'no'}"
            )
        elif reg.type == "kubernetes:postgresql.cnpg.io/v1:Cluster":
            spec = inputs.get("spec", {})
            storage = spec.get("storage", {})
            lines.append(
                f"  database   CloudNativePG {spec.get('instances')} instances, "
                f"{storage.get('size')} on storage class {storage.get('storageClass')}"
            )
        elif reg.type == "kubernetes:helm.sh/v3:Release" and inputs.get("name") == "mlflow":
            root = inputs.get("values", {}).get("artifactRoot", {})
            s3 = root.get("s3", {})
            where = (
                f"s3://{s3.get('bucket')}/{s3.get('path')}/ (SSE-KMS, Pod Identity)"
                if s3.get("enabled")
                else f"volume {root.get('defaultArtifactsDestination')}"
            )
            lines.append(f"  artifacts  {where}")
    return lines


def provider_lines(registrations: Mapping[str, Registration]) -> list[str]:
    lines = []
    for reg in sorted(registrations.values(), key=lambda r: r.urn):
        if reg.type == "pulumi:providers:aws":
            lines.append(f"  aws        {reg.name}: region {reg.inputs.get('region')}")
        elif reg.type == "pulumi:providers:kubernetes":
            lines.append(f"  kubernetes {reg.name}")
    return lines


def image_lines(stack: str, registrations: Mapping[str, Registration]) -> list[str]:
    """How the images of the stack's Kubernetes objects are named: by digest (its image
    lock, `stacks.image_lock`) or by tag only."""
    references = object_images((reg.type, reg.inputs) for reg in registrations.values())
    if not references:
        return []
    pinned = sum("@sha256:" in ref for ref in references)
    lock = lock_path(stack)
    source = (
        f"by {lock.relative_to(lock.parents[1])}"
        if lock.exists()
        else f"no image lock: `make pin-images STACK={stack}`"
    )
    return [
        f"  {len(references)} images named by the Kubernetes objects, "
        f"{pinned} pinned by digest ({source})",
        "  Helm releases' images are each chart's values (not pinned)",
    ]


def render_summary(
    stack: str,
    registrations: Mapping[str, Registration],
    path: Path,
    extra_sections: Mapping[str, list[str]] | None = None,
) -> str:
    """The whole summary as text."""
    counts = Counter(r.type for r in registrations.values() if r.custom)
    out = [
        f"Offline plan of stack '{stack}': {len(registrations)} resources "
        f"({sum(counts.values())} custom), written to {path}",
        "(Pulumi mock runtime, AWS catalog from moto; no credentials, no Pulumi CLI)",
        "",
        "Providers:",
        *provider_lines(registrations),
        "",
        "Resources by type:",
        *[f"  {n:>4}  {t}" for t, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))],
    ]
    sections = {
        "Node pools:": node_pool_lines(registrations),
        "KMS keys and where they are used:": key_usage_lines(registrations),
        "Kubernetes platform layer:": kubernetes_lines(registrations),
        "Tracking (MLflow):": tracking_lines(registrations),
        "Images:": image_lines(stack, registrations),
        **(extra_sections or {}),
    }
    for title, lines in sections.items():
        if lines:
            out += ["", title, *lines]
    return "\n".join(out)
