"""Strict validation of custom resources against vendored upstream CRDs: KServe v0.20.0
(`vendor/kserve`) and cert-manager v1.20.3 (`vendor/cert-manager`).

The API server validates a custom resource against the CRD's OpenAPI v3 schema and,
with strict field validation, rejects fields the schema does not declare. Here the same:
each CRD's schema becomes a JSON Schema in which every object that lists ``properties``
(and neither preserves unknown fields nor declares ``additionalProperties``) refuses
other keys. ``x-kubernetes-int-or-string`` and ``nullable`` are honoured.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

VENDOR = Path(__file__).parent / "vendor"
FILES = {
    "InferenceService": "kserve/serving.kserve.io_inferenceservices.yaml",
    "ServingRuntime": "kserve/serving.kserve.io_servingruntimes.yaml",
    "ClusterServingRuntime": "kserve/serving.kserve.io_clusterservingruntimes.yaml",
    "Certificate": "cert-manager/cert-manager.io_certificates.yaml",
    "ClusterIssuer": "cert-manager/cert-manager.io_clusterissuers.yaml",
}


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd(kind: str) -> dict[str, Any]:
    """The vendored CRD of ``kind``."""
    # libyaml's loader: the InferenceService CRD is 1.8 MB of YAML.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((VENDOR / FILES[kind]).read_text(), Loader=loader)  # type: ignore[no-any-return]


@cache
def _validator(kind: str, version: str) -> jsonschema.Draft7Validator:
    for served in crd(kind)["spec"]["versions"]:
        if served["name"] == version:
            schema = _strict(served["schema"]["openAPIV3Schema"])
            # Every object carries apiVersion, kind and metadata (checked by the API).
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            return jsonschema.Draft7Validator(schema)
    raise KeyError(f"{kind} has no served version {version}")


def vendored_crd_errors(manifest: Mapping[str, Any]) -> list[str]:
    """Schema violations of one object of a vendored CRD (empty when valid), one line each."""
    kind = str(manifest["kind"])
    group, _, version = str(manifest["apiVersion"]).rpartition("/")
    expected_group = crd(kind)["spec"]["group"]
    if group != expected_group:
        return [f"apiVersion group {group!r} is not {expected_group!r}"]
    validator = _validator(kind, version)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(dict(manifest)), key=str)
    ]


def is_namespaced(kind: str) -> bool:
    return crd(kind)["spec"]["scope"] == "Namespaced"
