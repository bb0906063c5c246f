"""Strict validation of Kueue objects against the vendored CRDs (see vendor/kueue/).

Each CRD's ``openAPIV3Schema`` for the served version is turned into a JSON Schema in
which every object with declared ``properties`` refuses undeclared fields (the API
server would prune them silently: a misspelt field would just vanish).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

VENDOR = Path(__file__).resolve().parent / "vendor" / "kueue"


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            # Go's RE2 takes an inline flag after ^; Python wants it first.
            out["pattern"] = "(?i)^" + pattern[len("^(?i)") :]
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict JSON Schema, for every vendored CRD version."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(VENDOR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
            # metadata is the API server's ObjectMeta, not described by the CRD.
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            found[(f"{group}/{version['name']}", kind)] = _strict(schema)
    return found


def kueue_errors(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per schema violation; an unknown Kueue kind or version is one too."""
    errors: list[str] = []
    for manifest in manifests:
        key = (str(manifest.get("apiVersion")), str(manifest.get("kind")))
        name = f"{key[1]}/{manifest.get('metadata', {}).get('name', '?')}"
        schema = schemas().get(key)
        if schema is None:
            errors.append(f"{name}: no vendored CRD for {key[0]} {key[1]}")
            continue
        validator = jsonschema.Draft7Validator(schema)
        for error in sorted(validator.iter_errors(dict(manifest)), key=str):
            path = ".".join(str(p) for p in error.absolute_path)
            errors.append(f"{name}: {path or '<root>'}: {error.message}")
    return errors
