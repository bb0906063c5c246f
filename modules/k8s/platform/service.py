"""`PlatformService`: the one shape of the services `KubernetesPlatform` composes (storage,
PKI, monitoring, the GPU operator, the fabric, Kueue, Kubeflow Trainer, the autoscaler,
MLflow).

Each is a component built from the platform's args (`KubernetesPlatformArgs`) that
waits for the services created before it, and registers its objects as its own
children through the cluster's provider: `add` for one manifest, `fenced_namespace`
for a namespace with what must be in it before anything runs there, `install` for a
pinned chart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.component_base import KubernetesComponent
from modules.k8s.common import (
    Manifest,
    PlatformNamespace,
    helm_release,
    register,
    register_namespace,
)
from modules.k8s.objects import KubernetesObject
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.versions import Chart


class PlatformService(KubernetesComponent[KubernetesPlatformArgs]):
    """A service of the Kubernetes platform (see the module).

    Attributes:
        waits_for: what its first objects wait for (``depends_on``: a release, the
            cluster CA's issuer).
        team_namespaces: the team namespaces by team; what it puts in one waits for it.
    """

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        team_namespaces: Mapping[str, pulumi.Resource] | None = None,
        *,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        self.waits_for = list(depends_on)
        self.team_namespaces = dict(team_namespaces or {})
        self._cluster = args.provider
        self._kubernetes_version = args.kubernetes_version
        super().__init__(name, args, opts)

    def add(
        self, manifest: Manifest, after: Sequence[pulumi.Resource] = (), *, protect: bool = False
    ) -> KubernetesObject:
        """Register ``manifest`` after ``after``."""
        return register(manifest, self, self._cluster, depends_on=after, protect=protect)

    def fenced_namespace(
        self, namespace: PlatformNamespace, contents: Iterable[Manifest]
    ) -> list[pulumi.Resource]:
        """``namespace``, then ``contents`` in it (`register_namespace`): what a release in
        the namespace waits for."""
        manifest = namespace.manifest(self._kubernetes_version)
        return register_namespace(manifest, contents, self, self._cluster)

    def install(
        self,
        release_name: str,
        chart: Chart,
        namespace: str,
        values: pulumi.Input[Mapping[str, Any]],
        after: Sequence[pulumi.Resource] = (),
    ) -> k8s.helm.v3.Release:
        """The pinned ``chart`` as the Helm release ``release_name`` in ``namespace``, after
        ``after`` (`helm_release`)."""
        return helm_release(
            release_name,
            chart,
            namespace,
            values=values,
            parent=self,
            provider=self._cluster,
            depends_on=after,
        )
