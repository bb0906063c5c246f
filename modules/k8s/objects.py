"""Registering plain Kubernetes manifests as Pulumi resources.

The Kubernetes layer and the workloads build their objects as plain manifests (dicts
in the API's own camelCase shape) in pure functions, so the tests can validate every
object against the cluster version's OpenAPI schema (kubernetes-validate, strict).
`KubernetesObject` registers such a manifest under the same type token the typed
pulumi-kubernetes classes use (``kubernetes:<group>/<version>:<Kind>``), so the engine
and the provider treat it exactly as they would a ``kubernetes.core.v1.ConfigMap`` or
a CRD's ``CustomResource``; one path serves built-in kinds and CRDs (Kueue,
ServiceMonitor) alike. Every container it registers pulls its image on each start
(`modules.k8s.security.pull_always`: the platform's policy, set here once for its own
objects and for the upstream renders it installs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from modules.k8s.security import pull_always


def type_token(api_version: str, kind: str) -> str:
    """The Pulumi type token of a Kubernetes kind, e.g. ``kubernetes:core/v1:ConfigMap``."""
    group, _, version = api_version.rpartition("/")
    return f"kubernetes:{group or 'core'}/{version}:{kind}"


class KubernetesObject(pulumi.CustomResource):
    """One Kubernetes object, registered from its manifest through an explicit provider.

    Args:
        resource_name: the Pulumi resource name (unique within the stack).
        manifest: the object as the Kubernetes API takes it (``apiVersion``, ``kind``,
            ``metadata`` and the kind's own fields).
        opts: resource options; ``provider`` (the cluster's Kubernetes provider) is
            required, because default providers are disabled for this project.
    """

    def __init__(
        self, resource_name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions
    ) -> None:
        if opts.provider is None:
            raise ValueError(f"{resource_name}: a Kubernetes object needs an explicit provider")
        super().__init__(
            type_token(manifest["apiVersion"], manifest["kind"]),
            resource_name,
            pull_always(dict(manifest)),
            opts,
        )
