"""Strict validation of custom resources against CRDs vendored from their upstream
release (see tests/k8s/vendor/README.md for sources, versions and commits).

The CRD's ``openAPIV3Schema`` is checked with jsonschema after closing every object
that lists its properties (``additionalProperties: false`` unless the schema keeps
unknown fields), so a misspelled field fails here as ``kubectl apply --validate=strict``
would fail it. CEL rules (``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

VENDOR = Path(__file__).resolve().parent / "vendor"

#: (apiVersion, kind) -> vendored CRD file.
VENDORED: dict[tuple[str, str], Path] = {
    ("postgresql.cnpg.io/v1", "Cluster"): VENDOR
    / "cloudnative-pg"
    / "clusters.postgresql.cnpg.io.yaml",
}


def _strict(schema: Any) -> Any:
    """A copy of ``schema`` in which every object with listed properties is closed."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        closed["additionalProperties"] = False
    return closed


@functools.cache
def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The strict schema of the served version ``api_version`` of a vendored CRD."""
    document = yaml.safe_load(VENDORED[(api_version, kind)].read_text(encoding="utf-8"))
    version = api_version.rpartition("/")[2]
    (served,) = [v for v in document["spec"]["versions"] if v["name"] == version]
    schema = dict(served["schema"]["openAPIV3Schema"])
    # The API server fills these in; a manifest only sets name/namespace/labels...
    schema["properties"] = {**schema["properties"], "metadata": {"type": "object"}}
    return _strict(schema)  # type: ignore[no-any-return]


def is_vendored(manifest: Mapping[str, Any]) -> bool:
    return (manifest["apiVersion"], manifest["kind"]) in VENDORED


def vendored_errors(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every schema violation of the manifests whose CRD is vendored, one line each."""
    errors: list[str] = []
    for manifest in manifests:
        if not is_vendored(manifest):
            continue
        schema = crd_schema(manifest["apiVersion"], manifest["kind"])
        name = f"{manifest['kind']}/{manifest.get('metadata', {}).get('name', '?')}"
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(dict(manifest)), key=lambda e: list(e.path)):
            path = ".".join(str(p) for p in error.path)
            errors.append(f"{name}: {path}: {error.message}")
    return errors
