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


#: The lists of containers in a pod spec.
CONTAINER_LISTS = ("containers", "initContainers")


def _pulls_always(container: Any) -> Any:
    if isinstance(container, dict) and "image" in container:
        return {**container, "imagePullPolicy": "Always"}
    return container


def pull_always(value: Any) -> Any:
    """``value`` (a manifest, or any part of one) with every container in it set to
    ``imagePullPolicy: Always``, and a SparkApplication's own field too (one policy for
    its driver and executors); a new structure, ``value`` itself unchanged.

    Why every container pulls on each start: the kubelet then asks the in-region registry
    for the image at every start, with the credentials that pod's pull uses (its
    imagePullSecrets, or the node's role on EKS), so no pod starts from a cached image
    without that check, and a tag moved in the registry is seen at the next start. A node
    that has the image still pulls no layer: the cost is one manifest request. Upstream
    renders that say ``IfNotPresent`` (Kubeflow Pipelines, KServe's presets) are
    overridden here, where every object is registered."""
    if isinstance(value, dict):
        out = {key: pull_always(item) for key, item in value.items()}
        for key in CONTAINER_LISTS:
            if isinstance(out.get(key), list):
                out[key] = [_pulls_always(c) for c in out[key]]
        if out.get("kind") == "SparkApplication" and isinstance(out.get("spec"), dict):
            out["spec"] = {**out["spec"], "imagePullPolicy": "Always"}
        return out
    if isinstance(value, list):
        return [pull_always(item) for item in value]
    return value


#: The annotation prefix checkov reads an object's documented exceptions from
#: (``checkov.io/skip<n>: <check id>=<reason>``); checkov reports them as skipped, with
#: the reason, instead of failed.
SCANNER_EXCEPTION_PREFIX = "checkov.io/skip"
#: Why a pod behind kube-rbac-proxy mounts its ServiceAccount's API token (CKV_K8S_38).
KUBE_RBAC_PROXY_TOKEN = (
    "kube-rbac-proxy reviews each caller's token and rights through the API "
    "(TokenReview and SubjectAccessReview)"
)


def scanner_exceptions(reasons: dict[str, str]) -> dict[str, str]:
    """Annotations for the scanner checks an object fails by design: ``{check id:
    reason}`` -> ``checkov.io/skip1: <check id>=<reason>``, ... (checks in id order). The
    reason is why the object must stay as it is; it cannot contain ``=``, which checkov
    splits on."""
    for check, reason in reasons.items():
        if "=" in reason or not reason.strip():
            raise ValueError(f"{check}: a reason must be non-empty text without '=': {reason!r}")
    return {
        f"{SCANNER_EXCEPTION_PREFIX}{n}": f"{check}={reasons[check]}"
        for n, check in enumerate(sorted(reasons), start=1)
    }
