"""Small shared pieces of the Kubernetes layer: manifest metadata, namespaces with Pod
Security Admission labels, tolerations and node selection from pool profiles, and the
two ways an object reaches the cluster (a plain manifest or a pinned Helm chart), both
through the explicit provider."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.names import KUBE_SYSTEM, PART_OF
from modules.k8s.objects import KubernetesObject
from modules.k8s.versions import Chart
from modules.pools import (
    FABRIC_TAINT_KEY,
    GPU_TAINT_KEY,
    ROLE_LABEL,
    NodePoolProfile,
    Taint,
)

Manifest = dict[str, Any]
PodSecurityLevel = Literal["privileged", "baseline", "restricted"]

#: Annotation that records, on the object itself, why a namespace is not ``restricted``.
POD_SECURITY_REASON_ANNOTATION = "gpuplatform.ae/pod-security-reason"


def metadata(
    name: str,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Manifest:
    """Object metadata with the platform's ``part-of``/``managed-by`` labels."""
    meta: Manifest = {"name": name, "labels": {**PART_OF, **(labels or {})}}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def namespace(
    name: str,
    pod_security: PodSecurityLevel,
    kubernetes_version: str,
    reason: str = "",
    labels: Mapping[str, str] | None = None,
) -> Manifest:
    """A Namespace with Pod Security Admission enforcing ``pod_security``.

    Audit and warn always use ``restricted``, so anything a looser namespace admits still
    shows up in the audit log. A level other than ``restricted`` needs a ``reason``.
    """
    if pod_security != "restricted" and not reason:
        raise ValueError(f"namespace {name}: pod security {pod_security} needs a reason")
    psa = {
        "pod-security.kubernetes.io/enforce": pod_security,
        "pod-security.kubernetes.io/enforce-version": f"v{kubernetes_version}",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    annotations = {POD_SECURITY_REASON_ANNOTATION: reason} if reason else None
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(name, labels={**psa, **(labels or {})}, annotations=annotations),
    }


@dataclass(frozen=True)
class PlatformNamespace:
    """A namespace the platform owns (an operator's or a service's), declared once where
    its service is: its name, its Pod Security level and, for a level other than
    ``restricted``, why (`namespace` refuses one without a reason).

    Args:
        name: the namespace.
        pod_security: the level Pod Security Admission enforces.
        reason: why the level is looser than ``restricted`` (kept on the object).
        labels: labels beyond the Pod Security ones.
    """

    name: str
    pod_security: PodSecurityLevel = "restricted"
    reason: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def manifest(self, kubernetes_version: str) -> Manifest:
        """The Namespace for a cluster of ``kubernetes_version`` (the PSA version label)."""
        return namespace(self.name, self.pod_security, kubernetes_version, self.reason, self.labels)


def cluster_ip_service(
    name: str,
    namespace: str,
    selector: Mapping[str, str],
    ports: Sequence[tuple[str, int]],
    labels: Mapping[str, str] | None = None,
) -> Manifest:
    """A ClusterIP Service over the pods with ``selector``: each ``(name, port)`` is a TCP
    port whose target is the pods' container port of the same name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, namespace, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [
                {"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                for port_name, port in ports
            ],
        },
    }


#: The key of the kube-apiserver flags in a `control_plane_file` ConfigMap.
APISERVER_FLAGS_KEY = "kube-apiserver-flags"


def control_plane_file(
    name: str, key: str, text: str, flags: Sequence[str], digest_annotation: str
) -> Manifest:
    """A ``kube-system`` ConfigMap that a kube-apiserver file is copied from onto the
    control-plane nodes (a site's API server is not the platform's to configure): the
    file's ``text`` under ``key``, the ``flags`` that make the API server read it under
    `APISERVER_FLAGS_KEY`, and the file's sha256 in the ``digest_annotation``, so that
    a node's copy can be checked as current."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            name,
            KUBE_SYSTEM,
            annotations={digest_annotation: hashlib.sha256(text.encode()).hexdigest()},
        ),
        "data": {key: text, APISERVER_FLAGS_KEY: "\n".join(flags) + "\n"},
    }


def toleration(taint: Taint) -> Manifest:
    """The toleration matching exactly one taint."""
    return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}


def pool_taint_tolerations() -> list[Manifest]:
    """Tolerate the GPU and fabric taints of any pool: for node agents (device plugins,
    exporters) that must run on those nodes whatever the fabric."""
    return [
        {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        {"key": FABRIC_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
    ]


def system_pool(pools: Sequence[NodePoolProfile]) -> NodePoolProfile:
    """The pool that runs platform services (validated to exist by the platform args)."""
    for pool in pools:
        if pool.role == "system":
            return pool
    raise ValueError("no node pool with role 'system'")


def system_node_selector() -> dict[str, str]:
    """Platform services (Prometheus, Grafana, Kueue, the autoscaler) run on the
    ``system`` pool; it carries no taint, so the selector alone places them."""
    return {ROLE_LABEL: "system"}


def required_node_affinity(key: str, values: Iterable[str]) -> Manifest:
    """``nodeAffinity`` requiring label ``key`` to be one of ``values``."""
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
            ]
        }
    }


def resource_name(manifest: Mapping[str, Any]) -> str:
    """A stack-unique Pulumi resource name for a manifest: kind, namespace and name."""
    meta = manifest["metadata"]
    parts = [manifest["kind"].lower(), meta.get("namespace", ""), meta["name"]]
    return "-".join(p for p in parts if p)


def register(
    manifest: Manifest,
    parent: pulumi.Resource,
    provider: k8s.Provider,
    depends_on: Sequence[pulumi.Resource] = (),
    protect: bool = False,
) -> KubernetesObject:
    """Register one manifest through the cluster's provider, as a child of ``parent``."""
    return KubernetesObject(
        resource_name(manifest),
        manifest,
        pulumi.ResourceOptions(
            parent=parent, provider=provider, depends_on=list(depends_on), protect=protect
        ),
    )


def register_namespace(
    namespace_manifest: Manifest,
    contents: Iterable[Manifest],
    parent: pulumi.Resource,
    provider: k8s.Provider,
) -> list[pulumi.Resource]:
    """Register a namespace, then what must be in it before anything runs there (its
    NetworkPolicies, ConfigMaps), each after the namespace. Returns the namespace and its
    contents, in that order: what a release in the namespace waits for."""
    ns = register(namespace_manifest, parent, provider)
    return [ns, *(register(m, parent, provider, depends_on=[ns]) for m in contents)]


def helm_release(
    release_name: str,
    chart: Chart,
    namespace_name: str,
    *,
    values: pulumi.Input[Mapping[str, Any]],
    parent: pulumi.Resource,
    provider: k8s.Provider,
    depends_on: Sequence[pulumi.Resource] = (),
) -> k8s.helm.v3.Release:
    """Install a pinned chart as a Helm release (a custom resource: its chart, version,
    repository, namespace and values appear in the plan). The namespace is created by
    the platform beforehand, with its Pod Security labels, never by Helm."""
    return k8s.helm.v3.Release(
        f"helm-{release_name}",
        k8s.helm.v3.ReleaseArgs(
            name=release_name,
            chart=chart.chart,
            version=chart.version,
            repository_opts=(
                k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo else None
            ),
            namespace=namespace_name,
            create_namespace=False,
            values=values,
            atomic=True,
            cleanup_on_fail=True,
            timeout=900,
        ),
        pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(depends_on)),
    )
