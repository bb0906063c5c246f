"""The restricted Pod Security profile, for the platform's own pods: those that run as
one image user (Feast, the Spark jobs, the pipeline's publisher and trigger, the KServe
runtimes) and the training pods, whose group differs from the user
(`modules.k8s.trainer.pods`).

Standard library only: the features image imports its spec, which uses it, without
Pulumi.
"""

from __future__ import annotations

from typing import Any


def restricted_container(uid: int, gid: int | None = None) -> dict[str, Any]:
    """One container: non-root as ``uid`` (group ``gid``, by default ``uid`` too), no
    privilege escalation, read-only root filesystem, no capabilities, RuntimeDefault
    seccomp."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid if gid is None else gid,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod(uid: int, gid: int | None = None, *, fs_group: bool = True) -> dict[str, Any]:
    """The pod: non-root as ``uid`` (group ``gid``, by default ``uid`` too), RuntimeDefault
    seccomp, and with ``fs_group`` its volumes owned by that group."""
    group = uid if gid is None else gid
    context: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": group}
    if fs_group:
        context["fsGroup"] = group
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context
