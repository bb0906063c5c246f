"""`Pki`: installs cert-manager and the cluster CA that `spec` builds."""

from __future__ import annotations

import pulumi

from modules.component_base import KubernetesComponent, Outputs
from modules.k8s.common import helm_release, register, register_namespace
from modules.k8s.pki.spec import (
    CERT_MANAGER,
    CERT_MANAGER_NAMESPACE,
    CERT_MANAGER_NS,
    RELEASE,
    cert_manager_values,
    certificate_authority,
    network_policies,
)
from modules.k8s.platform.spec import KubernetesPlatformArgs


class Pki(KubernetesComponent[KubernetesPlatformArgs]):
    """cert-manager, its fences, and the cluster CA.

    Attributes:
        issuer: the CA ClusterIssuer; every Certificate ``depends_on`` it.
    """

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        provider = args.provider
        fenced = register_namespace(
            CERT_MANAGER_NS.manifest(args.kubernetes_version),
            network_policies(args.network),
            self,
            provider,
        )
        registry = args.serving.registry if args.serving is not None else None
        release = helm_release(
            RELEASE,
            CERT_MANAGER,
            CERT_MANAGER_NAMESPACE,
            values=cert_manager_values(registry),
            parent=self,
            provider=provider,
            depends_on=fenced,
        )
        issued: list[pulumi.Resource] = [release]
        for manifest in certificate_authority():
            issued = [register(manifest, self, provider, depends_on=issued)]
        self.issuer: pulumi.Resource = issued[0]
        return {"certManager": CERT_MANAGER.version}
