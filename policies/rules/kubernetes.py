"""Kubernetes workloads: the restricted pod security baseline, with explicit exceptions.

A system component that needs more (a device plugin's hostPath, DCGM's root user)
opts out of one rule with an annotation on the object, naming the rule and the reason:
``policy-exception.gpuplatform.ae/<rule-id>: "<why>"``; every report lists them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pulumi_policy import EnforcementLevel, Severity

from policies import controls
from policies.k8s import (
    CLUSTER_SCOPED_KINDS,
    HELM_RELEASE_TYPE,
    K8S_PROVIDER_TYPE,
    containers,
    has_pod_spec,
    images,
    is_kubernetes_object,
    kind_of,
    metadata,
    names_images,
    parse_image,
    pod_specs,
)
from policies.model import (
    Applies,
    ResourceCheck,
    ResourceView,
    Rule,
    StackView,
    resource_rule,
    stack_rule,
    types_in,
)
from policies.rules.checks import (
    NO_PRIVILEGE_ESCALATION,
    NON_ROOT,
    NOT_PRIVILEGED,
    NOT_UID_0,
    READ_ONLY_ROOT,
    SECCOMP,
    SecuritySetting,
    security_problems,
)
from policies.settings import Settings
from policies.values import Deferred, dig, known


def _host_namespaces(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for pod in pod_specs(resource):
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if known(pod.spec.get(key), f"{pod.path}.{key}") is True:
                yield f"`{pod.path}.{key}` is true"


def _host_paths(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for pod in pod_specs(resource):
        volumes = known(pod.spec.get("volumes"), f"{pod.path}.volumes")
        for volume in volumes if isinstance(volumes, list) else []:
            path = dig(volume, "hostPath", "path")
            if path is not None:
                yield f"volume {dig(volume, 'name')} mounts host path {path}"


def _limits(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for container in containers(resource):
        limits = known(
            dig(container.spec, "resources", "limits"), f"{container.path}.resources.limits"
        )
        missing = [k for k in ("cpu", "memory") if not (isinstance(limits, dict) and limits.get(k))]
        if missing:
            yield f"container {container.name} has no {' or '.join(missing)} limit"


def _floating_images(resource: ResourceView, settings: Settings) -> Iterator[str]:
    for who, value, path in images(resource):
        image = known(value, path)
        if not isinstance(image, str):
            continue
        ref = parse_image(image)
        if ref.digest is None and ref.tag in (None, "latest"):
            yield f"{who} uses {image}, which floats with `latest`"


def _settings(*wanted: SecuritySetting) -> ResourceCheck:
    """The check that every container has the ``wanted`` security settings."""
    return lambda resource, settings: security_problems(resource, wanted)


@dataclass(frozen=True)
class _Row:
    """One rule of the pod spec table (`POD_SPEC_RULES`): its metadata and check."""

    id: str
    description: str
    severity: Severity
    remediation: str
    controls: tuple[str, ...]
    check: ResourceCheck
    applies_to: Applies = has_pod_spec
    enforcement: EnforcementLevel = EnforcementLevel.MANDATORY

    def rule(self) -> Rule:
        """The row's rule: a resource rule a system component may opt out of with its
        annotation (the module's docstring)."""
        return Rule(
            self.id, self.description, self.severity, self.enforcement, self.remediation,
            self.controls, "resource", self.check, self.applies_to, annotation_exceptions=True,
        )  # fmt: skip


#: The rules of what runs in a pod, one row each (in the order the reports list them).
POD_SPEC_RULES: tuple[Rule, ...] = tuple(
    row.rule()
    for row in (
        _Row("k8s-no-privileged", "No container runs privileged.", Severity.CRITICAL,
             "Remove `securityContext.privileged: true`; grant the one capability needed.",
             (controls.CIS_EKS_4_2_1, controls.ISO_8_2), _settings(NOT_PRIVILEGED)),
        _Row("k8s-no-host-namespaces", "No pod shares the host's network, PID or IPC namespace.",
             Severity.HIGH, "Remove hostNetwork, hostPID and hostIPC from the pod spec.",
             (controls.CIS_EKS_4_2_2, controls.CIS_EKS_4_2_3, controls.CIS_EKS_4_2_4,
              controls.ISO_8_22), _host_namespaces),
        _Row("k8s-no-host-path", "No pod mounts a hostPath volume.", Severity.HIGH,
             "Use a PersistentVolumeClaim, emptyDir or CSI volume instead of hostPath.",
             (controls.CIS_EKS_4_6_2, controls.ISO_8_2), _host_paths),
        _Row("k8s-no-privilege-escalation",
             "Every container sets `allowPrivilegeEscalation: false`.", Severity.HIGH,
             "Set `securityContext.allowPrivilegeEscalation: false` on every container.",
             (controls.CIS_EKS_4_2_5, controls.ISO_8_2), _settings(NO_PRIVILEGE_ESCALATION)),
        _Row("k8s-run-as-non-root",
             "Every container runs as a non-root user (`runAsNonRoot: true`, no UID 0).",
             Severity.HIGH,
             "Set `securityContext.runAsNonRoot: true` (pod or container) and a non-zero "
             "`runAsUser`; build images with a USER that is not root.",
             (controls.CIS_EKS_4_2_6, controls.ISO_8_2), _settings(NON_ROOT, NOT_UID_0)),
        _Row("k8s-resource-limits", "Every container declares CPU and memory limits.",
             Severity.MEDIUM,
             "Set `resources.limits.cpu` and `resources.limits.memory` on every container.",
             (controls.ISO_8_9, controls.CIS_EKS_4_6_1), _limits),
        _Row("k8s-no-latest-tag",
             "Every image is pinned by a tag other than `latest`, or by digest.",
             Severity.MEDIUM,
             "Reference images as repository:version or repository@sha256:digest.",
             (controls.ISO_8_9, controls.ISO_8_19), _floating_images, applies_to=names_images),
        _Row("k8s-read-only-root-filesystem",
             "Containers mount their root file system read-only where possible.", Severity.LOW,
             "Set `securityContext.readOnlyRootFilesystem: true` and mount emptyDir volumes "
             "where the program writes (/tmp, caches).",
             (controls.CIS_EKS_4_6_2, controls.ISO_8_9), _settings(READ_ONLY_ROOT),
             enforcement=EnforcementLevel.ADVISORY),
        _Row("k8s-seccomp-runtime-default",
             "Every container runs under the RuntimeDefault (or a Localhost) seccomp profile.",
             Severity.MEDIUM,
             "Set `securityContext.seccompProfile.type: RuntimeDefault` on the pod.",
             (controls.CIS_EKS_4_6_2, controls.ISO_8_9), _settings(SECCOMP)),
    )
)  # fmt: skip


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
