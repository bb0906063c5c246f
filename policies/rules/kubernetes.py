"""Kubernetes workloads: the restricted pod security baseline, with explicit exceptions.

A system component that needs more (a device plugin's hostPath, DCGM's root user)
opts out of one rule with an annotation on the object, naming the rule and the reason:
``policy-exception.gpuplatform.ae/<rule-id>: "<why>"``; every report lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.catalogue import resource_rule, stack_rule
from policies.k8s import (
    CLUSTER_SCOPED_KINDS,
    HELM_RELEASE_TYPE,
    K8S_PROVIDER_TYPE,
    containers,
    images,
    is_kubernetes_object,
    kind_of,
    metadata,
    parse_image,
    pod_specs,
)
from policies.model import ResourceCheck, ResourceView, Rule, StackFindings, StackView
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


#: The rules of what runs in a pod, by id and check (in the order the reports list
#: them); a system component may opt out of each with its annotation (the module's
#: docstring).
POD_SPEC_RULES: tuple[Rule, ...] = tuple(
    resource_rule(rule_id, annotation_exceptions=True)(check)
    for rule_id, check in (
        ("k8s-no-privileged", _settings(NOT_PRIVILEGED)),
        ("k8s-no-host-namespaces", _host_namespaces),
        ("k8s-no-host-path", _host_paths),
        ("k8s-no-privilege-escalation", _settings(NO_PRIVILEGE_ESCALATION)),
        ("k8s-run-as-non-root", _settings(NON_ROOT, NOT_UID_0)),
        ("k8s-resource-limits", _limits),
        ("k8s-no-latest-tag", _floating_images),
        ("k8s-read-only-root-filesystem", _settings(READ_ONLY_ROOT)),
        ("k8s-seccomp-runtime-default", _settings(SECCOMP)),
    )
)


def namespaced(resource: ResourceView) -> bool:
    """Helm releases and the Kubernetes objects the stack registers (not providers)."""
    if resource.type == HELM_RELEASE_TYPE:
        return True
    return is_kubernetes_object(resource) and resource.type != K8S_PROVIDER_TYPE


@resource_rule("k8s-no-default-namespace", annotation_exceptions=True)
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


@stack_rule("k8s-namespace-default-deny")
def namespace_default_deny(stack: StackView, settings: Settings) -> StackFindings:
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
