"""Kubernetes workloads: the restricted pod security baseline, with explicit exceptions.

A system component that needs more (a device plugin's hostPath, DCGM's root user)
opts out of one rule with an annotation on the object, naming the rule and the reason:
``policy-exception.gpuplatform.ae/<rule-id>: "<why>"``; every report lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import EnforcementLevel, Severity

from policies import controls
from policies.k8s import (
    CLUSTER_SCOPED_KINDS,
    HELM_RELEASE_TYPE,
    K8S_PROVIDER_TYPE,
    containers,
    has_pod_spec,
    is_kubernetes_object,
    job_images,
    kind_of,
    metadata,
    names_images,
    parse_image,
    pod_specs,
)
from policies.model import ResourceView, StackView, resource_rule, stack_rule, types_in
from policies.settings import Settings
from policies.values import Deferred, dig, known


@resource_rule(
    id="k8s-no-privileged",
    description="No container runs privileged.",
    severity=Severity.CRITICAL,
    remediation="Remove `securityContext.privileged: true`; grant the one capability needed.",
    controls=(controls.CIS_EKS_4_2_1, controls.ISO_8_2),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def no_privileged(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        path = f"{container.path}.securityContext.privileged"
        if known(dig(container.spec, "securityContext", "privileged"), path) is True:
            yield f"container {container.name} is privileged"


@resource_rule(
    id="k8s-no-host-namespaces",
    description="No pod shares the host's network, PID or IPC namespace.",
    severity=Severity.HIGH,
    remediation="Remove hostNetwork, hostPID and hostIPC from the pod spec.",
    controls=(
        controls.CIS_EKS_4_2_2,
        controls.CIS_EKS_4_2_3,
        controls.CIS_EKS_4_2_4,
        controls.ISO_8_22,
    ),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def no_host_namespaces(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for pod in pod_specs(resource):
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if known(pod.spec.get(key), f"{pod.path}.{key}") is True:
                yield f"`{pod.path}.{key}` is true"


@resource_rule(
    id="k8s-no-host-path",
    description="No pod mounts a hostPath volume.",
    severity=Severity.HIGH,
    remediation="Use a PersistentVolumeClaim, emptyDir or CSI volume instead of hostPath.",
    controls=(controls.CIS_EKS_4_6_2, controls.ISO_8_2),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def no_host_path(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for pod in pod_specs(resource):
        volumes = known(pod.spec.get("volumes"), f"{pod.path}.volumes")
        for volume in volumes if isinstance(volumes, list) else []:
            path = dig(volume, "hostPath", "path")
            if path is not None:
                yield f"volume {dig(volume, 'name')} mounts host path {path}"


@resource_rule(
    id="k8s-no-privilege-escalation",
    description="Every container sets `allowPrivilegeEscalation: false`.",
    severity=Severity.HIGH,
    remediation="Set `securityContext.allowPrivilegeEscalation: false` on every container.",
    controls=(controls.CIS_EKS_4_2_5, controls.ISO_8_2),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def no_privilege_escalation(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        path = f"{container.path}.securityContext.allowPrivilegeEscalation"
        # Unset means allowed (the kernel's no_new_privs stays off).
        if (
            known(dig(container.spec, "securityContext", "allowPrivilegeEscalation"), path)
            is not False
        ):
            yield f"container {container.name} does not set allowPrivilegeEscalation: false"


@resource_rule(
    id="k8s-run-as-non-root",
    description="Every container runs as a non-root user (`runAsNonRoot: true`, no UID 0).",
    severity=Severity.HIGH,
    remediation=(
        "Set `securityContext.runAsNonRoot: true` (pod or container) and a non-zero "
        "`runAsUser`; build images with a USER that is not root."
    ),
    controls=(controls.CIS_EKS_4_2_6, controls.ISO_8_2),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def run_as_non_root(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        if (
            known(
                container.security("runAsNonRoot"), f"{container.path}.securityContext.runAsNonRoot"
            )
            is not True
        ):
            yield f"container {container.name} does not set runAsNonRoot: true"
        if (
            known(container.security("runAsUser"), f"{container.path}.securityContext.runAsUser")
            == 0
        ):
            yield f"container {container.name} runs as UID 0"


@resource_rule(
    id="k8s-resource-limits",
    description="Every container declares CPU and memory limits.",
    severity=Severity.MEDIUM,
    remediation="Set `resources.limits.cpu` and `resources.limits.memory` on every container.",
    controls=(controls.ISO_8_9, controls.CIS_EKS_4_6_1),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def resource_limits(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        limits = known(
            dig(container.spec, "resources", "limits"), f"{container.path}.resources.limits"
        )
        missing = [k for k in ("cpu", "memory") if not (isinstance(limits, dict) and limits.get(k))]
        if missing:
            yield f"container {container.name} has no {' or '.join(missing)} limit"


@resource_rule(
    id="k8s-no-latest-tag",
    description="Every image is pinned by a tag other than `latest`, or by digest.",
    severity=Severity.MEDIUM,
    remediation="Reference images as repository:version or repository@sha256:digest.",
    controls=(controls.ISO_8_9, controls.ISO_8_19),
    applies_to=names_images,
    annotation_exceptions=True,
)
def no_latest_tag(resource: ResourceView, settings: Settings) -> Iterator[str]:
    named = [
        (f"container {c.name}", c.spec.get("image"), f"{c.path}.image")
        for c in containers(resource)
    ]
    named += [(f"`{path}`", value, path) for path, value in job_images(resource)]
    for who, value, path in named:
        image = known(value, path)
        if not isinstance(image, str):
            continue
        ref = parse_image(image)
        if ref.digest is None and ref.tag in (None, "latest"):
            yield f"{who} uses {image}, which floats with `latest`"


@resource_rule(
    id="k8s-read-only-root-filesystem",
    description="Containers mount their root file system read-only where possible.",
    severity=Severity.LOW,
    enforcement=EnforcementLevel.ADVISORY,
    remediation=(
        "Set `securityContext.readOnlyRootFilesystem: true` and mount emptyDir volumes where "
        "the program writes (/tmp, caches)."
    ),
    controls=(controls.CIS_EKS_4_6_2, controls.ISO_8_9),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def read_only_root_filesystem(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        path = f"{container.path}.securityContext.readOnlyRootFilesystem"
        if (
            known(dig(container.spec, "securityContext", "readOnlyRootFilesystem"), path)
            is not True
        ):
            yield f"container {container.name} has a writable root file system"


@resource_rule(
    id="k8s-seccomp-runtime-default",
    description="Every container runs under the RuntimeDefault (or a Localhost) seccomp profile.",
    severity=Severity.MEDIUM,
    remediation="Set `securityContext.seccompProfile.type: RuntimeDefault` on the pod.",
    controls=(controls.CIS_EKS_4_6_2, controls.ISO_8_9),
    applies_to=has_pod_spec,
    annotation_exceptions=True,
)
def seccomp_runtime_default(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        profile = known(
            container.security("seccompProfile"), f"{container.path}.securityContext.seccompProfile"
        )
        kind = dig(profile, "type")
        if kind not in ("RuntimeDefault", "Localhost"):
            yield f"container {container.name} runs with seccomp profile {kind or 'Unconfined'}"


def _namespaced(resource: ResourceView) -> bool:
    if resource.type == HELM_RELEASE_TYPE:
        return True
    return is_kubernetes_object(resource) and resource.type != K8S_PROVIDER_TYPE


@resource_rule(
    id="k8s-no-default-namespace",
    description="No object or Helm release is placed in the `default` namespace.",
    severity=Severity.MEDIUM,
    remediation=(
        "Set metadata.namespace (Helm: `namespace`) to the component's own namespace; if the "
        "kind is cluster-scoped, add it to the pack config's `clusterScopedKinds`."
    ),
    controls=(controls.CIS_EKS_4_6_3, controls.CIS_EKS_4_6_1, controls.ISO_5_15),
    applies_to=_namespaced,
    config_keys=("clusterScopedKinds",),
    annotation_exceptions=True,
)
def no_default_namespace(resource: ResourceView, settings: Settings) -> Iterator[str]:
    if resource.type != HELM_RELEASE_TYPE and (
        kind_of(resource) in CLUSTER_SCOPED_KINDS
        or kind_of(resource) in settings.cluster_scoped_kinds
    ):
        return
    if resource.type == HELM_RELEASE_TYPE:
        namespace = known(resource.props.get("namespace"), "namespace")
    else:
        namespace = known(metadata(resource).get("namespace"), "metadata.namespace")
    if namespace in (None, ""):
        provider_namespace = resource.provider.props.get("namespace") if resource.provider else None
        namespace = provider_namespace or "default"
    if namespace == "default":
        yield "the object lands in the `default` namespace"


NAMESPACE_TYPE = "kubernetes:core/v1:Namespace"
NETWORK_POLICY_TYPE = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _denies_all(policy: ResourceView) -> str | None:
    """The namespace a NetworkPolicy denies all ingress and egress of, or None: it
    selects every pod (``podSelector: {}``), names both policy types (Kubernetes reads a
    policy without ``policyTypes`` as ingress-only unless it has egress rules) and
    allows nothing."""
    spec = known(policy.props.get("spec"), "spec")
    namespace = known(metadata(policy).get("namespace"), "metadata.namespace")
    if not isinstance(spec, dict) or not isinstance(namespace, str):
        return None
    types = known(spec.get("policyTypes"), "spec.policyTypes")
    if (
        known(spec.get("podSelector"), "spec.podSelector") == {}
        and isinstance(types, list)
        and sorted(types) == ["Egress", "Ingress"]
        and not spec.get("ingress")
        and not spec.get("egress")
    ):
        return namespace
    return None


@stack_rule(
    id="k8s-namespace-default-deny",
    description=(
        "Every namespace the stack creates denies all ingress and egress by default (a "
        "NetworkPolicy selecting every pod, of both types, allowing nothing)."
    ),
    severity=Severity.HIGH,
    remediation=(
        "Add a NetworkPolicy in the namespace with `podSelector: {}`, `policyTypes: "
        "[Ingress, Egress]` and no rules (`modules.k8s.netpol.default_deny`), then allow "
        "exactly what its pods need: DNS, the API server, Prometheus' scrape, webhooks."
    ),
    controls=(controls.CIS_EKS_4_3_2, controls.ISO_8_20, controls.ISO_8_22),
    applies_to=types_in(NAMESPACE_TYPE),
)
def namespace_default_deny(
    stack: StackView, settings: Settings
) -> Iterator[tuple[str | None, str]]:
    denied: set[str] = set()
    deferred = Deferred()
    for policy in stack.of_type(NETWORK_POLICY_TYPE):
        with deferred.each():
            target = _denies_all(policy)
            if target is not None:
                denied.add(target)
    for resource in stack.of_type(NAMESPACE_TYPE):
        with deferred.each():
            name = known(metadata(resource).get("name"), "metadata.name")
            if not isinstance(name, str) or not name:
                yield resource.urn, f"namespace {resource.name} sets no metadata.name"
            elif name not in denied:
                yield (
                    resource.urn,
                    f"namespace {name} has no default-deny NetworkPolicy: every pod in it "
                    "may reach, and be reached from, anything the network routes",
                )
    deferred.finish()
