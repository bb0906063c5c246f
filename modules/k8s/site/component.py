"""`SiteDeclaration`: registers the site ConfigMap that `spec.site_configmap` builds and,
on premises with OpenID Connect, the API server's authentication configuration
(`oidc.oidc_configmap`)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.common import register
from modules.k8s.site.oidc import OidcSpec, oidc_configmap
from modules.k8s.site.spec import SiteSpec, site_configmap


class SiteDeclaration(pulumi.ComponentResource):
    """Declares the cluster's site in the cluster itself."""

    def __init__(
        self,
        name: str,
        site: SiteSpec,
        provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
        *,
        oidc: OidcSpec | None = None,
        kubernetes_version: str = "",
    ) -> None:
        super().__init__("gpuplatform:k8s:SiteDeclaration", name, None, opts)
        self.configmap = register(site_configmap(site), self, provider)
        if oidc is not None:
            register(oidc_configmap(oidc, kubernetes_version), self, provider)
        self.register_outputs({"site": site.name, "country": site.country})
