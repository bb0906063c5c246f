"""The restricted Pod Security profile, for the platform's own pods that run as one
image user (Feast, the Spark jobs, the pipeline's publisher and trigger).

Standard library only: the features image imports its spec, which uses it, without
Pulumi. The training pods keep their own (`modules.k8s.trainer.pods`), whose group
differs from the user.
"""

from __future__ import annotations

from typing import Any


def restricted_container(uid: int) -> dict[str, Any]:
    """One container: non-root as ``uid`` (group too), no privilege escalation,
    read-only root filesystem, no capabilities, RuntimeDefault seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod(uid: int, *, fs_group: bool = True) -> dict[str, Any]:
    """The pod: non-root as ``uid``, RuntimeDefault seccomp, and with ``fs_group`` its
    volumes owned by that group."""
    context: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid}
    if fs_group:
        context["fsGroup"] = uid
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context
