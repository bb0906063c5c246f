"""Who may do what through the Kubernetes API: ServiceAccounts, Roles and their bindings,
one builder each, so that every component writes them the same way.

Each builder takes the object's metadata whole (`modules.k8s.common.metadata`, or a
component's own labels), since the components label their objects differently.
Standard library only, as `modules.k8s.security` (the features spec uses both).

API tokens: a pod mounts its ServiceAccount's Kubernetes API token only where a process
in it calls the API (an operator, a Spark driver, kube-rbac-proxy's reviews). A pod that
only reaches AWS needs none: EKS Pod Identity does not use it. Its admission webhook
adds a projected token of its own to each pod whose ServiceAccount has an association
(volume ``eks-pod-identity-token``, audience ``pods.eks.amazonaws.com``, with
``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` and ``AWS_CONTAINER_CREDENTIALS_FULL_URI``),
whatever ``automountServiceAccountToken`` says
(https://docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html; the
webhook's test of a pod without volumes, github.com/aws/amazon-eks-pod-identity-webhook
``pkg/handler/testdata/containercredentials/rawPodWithoutVolumes.pod.yaml``: the patch
adds that projected volume and nothing of the API token's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Manifest = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_VERSION = f"{RBAC_GROUP}/v1"


def service_account(meta: Manifest, *, mount_token: bool) -> Manifest:
    """A ServiceAccount; ``mount_token``: whether its pods get an API token mounted (only
    where they call the Kubernetes API: the module's docstring)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta,
        "automountServiceAccountToken": mount_token,
    }


def role(meta: Manifest, rules: Iterable[Mapping[str, Any]], *, cluster: bool = False) -> Manifest:
    """A Role (a ClusterRole with ``cluster``) granting ``rules``."""
    return {
        "apiVersion": RBAC_VERSION,
        "kind": "ClusterRole" if cluster else "Role",
        "metadata": meta,
        "rules": [dict(rule) for rule in rules],
    }


def role_binding(
    meta: Manifest,
    role_name: str,
    subjects: Iterable[Mapping[str, Any]],
    *,
    role_kind: str = "Role",
    cluster: bool = False,
) -> Manifest:
    """A RoleBinding (a ClusterRoleBinding with ``cluster``) of ``subjects`` to the
    ``role_kind`` named ``role_name``."""
    return {
        "apiVersion": RBAC_VERSION,
        "kind": "ClusterRoleBinding" if cluster else "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role_name},
        # Copies: a subject list reused by two bindings stays two lists in the YAML.
        "subjects": [dict(subject) for subject in subjects],
    }


def groups(names: Iterable[str]) -> list[Manifest]:
    """Binding subjects: the groups ``names``."""
    return [{"kind": "Group", "name": name, "apiGroup": RBAC_GROUP} for name in names]


def service_accounts_of(namespaces: Iterable[str]) -> list[Manifest]:
    """Binding subjects: every ServiceAccount of each of ``namespaces`` (their groups)."""
    return groups(f"system:serviceaccounts:{namespace}" for namespace in namespaces)


def service_account_subjects(name: str, namespaces: Sequence[str]) -> list[Manifest]:
    """Binding subjects: the ServiceAccount ``name`` in each of ``namespaces``."""
    return [
        {"kind": "ServiceAccount", "name": name, "namespace": namespace} for namespace in namespaces
    ]
