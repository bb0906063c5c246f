"""Ships the site's audit policy to the site's own cluster: a ConfigMap in
``kube-system`` holding the ``audit.k8s.io/v1`` Policy and the kube-apiserver flags
that apply it (docs/fleet.md, "The site's API audit log")."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import yaml

from modules.k8s.common import APISERVER_FLAGS_KEY, Manifest, control_plane_file, register
from modules.k8s.names import KUBE_SYSTEM

from .spec import ApiAuditSpec

CONFIGMAP_NAME = "gpuplatform-audit-policy"
POLICY_KEY = "policy.yaml"
FLAGS_KEY = APISERVER_FLAGS_KEY
#: The policy's digest: a control-plane node's copy is current when its sha256 matches.
DIGEST_ANNOTATION = "gpuplatform.ae/policy-sha256"


def policy_yaml(spec: ApiAuditSpec) -> str:
    return yaml.safe_dump(spec.document(), sort_keys=False)


def audit_policy_configmap(spec: ApiAuditSpec) -> Manifest:
    """The ConfigMap the control-plane nodes' policy file is copied from."""
    return control_plane_file(
        CONFIGMAP_NAME, POLICY_KEY, policy_yaml(spec), spec.apiserver_flags(), DIGEST_ANNOTATION
    )


class SiteAuditPolicy(pulumi.ComponentResource):
    """The site's API audit policy, kept in the site's cluster."""

    def __init__(
        self,
        name: str,
        spec: ApiAuditSpec,
        provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:SiteAuditPolicy", name, None, opts)
        self.configmap = register(audit_policy_configmap(spec), self, provider)
        self.register_outputs({"configmap": f"{KUBE_SYSTEM}/{CONFIGMAP_NAME}"})
