"""`Pki`: installs cert-manager and the cluster CA that `spec` builds."""

from __future__ import annotations

import pulumi

from modules.component_base import Outputs
from modules.k8s.pki.spec import (
    CERT_MANAGER,
    CERT_MANAGER_NAMESPACE,
    CERT_MANAGER_NS,
    RELEASE,
    cert_manager_values,
    certificate_authority,
    network_policies,
)
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs


class Pki(PlatformService):
    """cert-manager, its fences, and the cluster CA.

    Attributes:
        issuer: the CA ClusterIssuer; every Certificate ``depends_on`` it.
    """

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        fenced = self.fenced_namespace(CERT_MANAGER_NS, network_policies(args.network))
        registry = args.serving.registry if args.serving is not None else None
        values = cert_manager_values(registry)
        release = self.install(RELEASE, CERT_MANAGER, CERT_MANAGER_NAMESPACE, values, fenced)
        issued: list[pulumi.Resource] = [release]
        for manifest in certificate_authority():
            issued = [self.add(manifest, issued)]
        self.issuer: pulumi.Resource = issued[0]
        return {"certManager": CERT_MANAGER.version}
