"""Validate Kubernetes manifests against the OpenAPI schema of a Kubernetes version.

kubernetes-validate ships the upstream schemas of each release in strict mode
(unknown fields rejected), so a misspelled field fails here as it would at apply time.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes_validate

# kubernetes-validate reads and decodes a kind's schema and the version's whole
# `_definitions.json` again for every object it validates (`utils.schema_contents`); the
# files do not change, so each is read once per process (the plan tests validate
# thousands of objects). Read-only use: jsonschema does not change a schema it is given.
kubernetes_validate.utils.schema_contents = functools.cache(  # type: ignore[assignment]
    kubernetes_validate.utils.schema_contents
)

#: CRD groups that end in ``.k8s.io`` although the upstream schema does not have them.
CRD_GROUPS_UNDER_K8S_IO = frozenset({"sparkoperator.k8s.io"})


def is_builtin(manifest: Mapping[str, Any]) -> bool:
    """True for kinds the upstream schema covers (core and ``*.k8s.io`` groups)."""
    group = manifest["apiVersion"].rpartition("/")[0]
    return (
        group == ""
        or (group.endswith(".k8s.io") and group not in CRD_GROUPS_UNDER_K8S_IO)
        or group in {"apps", "batch", "policy", "autoscaling"}
    )


def schema_errors(manifests: Iterable[Mapping[str, Any]], k8s_version: str) -> list[str]:
    """Every schema violation of the built-in manifests, one line each (empty when valid).

    Args:
        manifests: objects as the API takes them.
        k8s_version: the cluster's minor version, e.g. ``"1.33"``.
    """
    errors: list[str] = []
    for manifest in manifests:
        if not is_builtin(manifest):
            continue
        name = f"{manifest['kind']}/{manifest.get('metadata', {}).get('name', '?')}"
        try:
            kubernetes_validate.validate(dict(manifest), f"{k8s_version}.0", strict=True)
        except kubernetes_validate.ValidationError as err:
            errors.append(f"{name}: {'.'.join(str(p) for p in err.path)}: {err.message}")
    return errors
