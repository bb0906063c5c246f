"""Strict validation of custom resources against CRDs vendored from their upstream
releases (tests/k8s/vendor/: KServe v0.20.0, cert-manager v1.20.3, CloudNativePG (Cluster,
Backup, ScheduledBackup), Kubeflow Trainer v2.3.0, the Prometheus Operator's ServiceMonitor
and v0.93.1's AlertmanagerConfig, Kubeflow Spark Operator v2.5.2; the READMEs there name
sources, versions and commits).

The API server validates a custom resource against the CRD's OpenAPI v3 schema and,
with strict field validation, rejects fields the schema does not declare. Here the same:
each CRD's schema becomes a JSON Schema in which every object that lists ``properties``
(and neither preserves unknown fields nor declares ``additionalProperties``) refuses
other keys. ``x-kubernetes-int-or-string`` and ``nullable`` are honoured; CEL rules
(``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

VENDOR = Path(__file__).resolve().parent / "vendor"
#: (API group, kind) -> vendored CRD file under VENDOR.
FILES: dict[tuple[str, str], str] = {
    ("serving.kserve.io", "InferenceService"): "kserve/serving.kserve.io_inferenceservices.yaml",
    ("serving.kserve.io", "ServingRuntime"): "kserve/serving.kserve.io_servingruntimes.yaml",
    ("serving.kserve.io", "ClusterServingRuntime"): (
        "kserve/serving.kserve.io_clusterservingruntimes.yaml"
    ),
    ("cert-manager.io", "Certificate"): "cert-manager/cert-manager.io_certificates.yaml",
    ("cert-manager.io", "ClusterIssuer"): "cert-manager/cert-manager.io_clusterissuers.yaml",
    ("postgresql.cnpg.io", "Cluster"): "cloudnative-pg/clusters.postgresql.cnpg.io.yaml",
    ("postgresql.cnpg.io", "Backup"): "cloudnative-pg/backups.postgresql.cnpg.io.yaml",
    ("postgresql.cnpg.io", "ScheduledBackup"): (
        "cloudnative-pg/scheduledbackups.postgresql.cnpg.io.yaml"
    ),
    ("monitoring.coreos.com", "ServiceMonitor"): (
        "charts/prometheus-operator-v0.93.1-servicemonitors-crd.yaml"
    ),
    ("trainer.kubeflow.org", "TrainJob"): "kubeflow-trainer/trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org", "ClusterTrainingRuntime"): (
        "kubeflow-trainer/trainer.kubeflow.org_clustertrainingruntimes.yaml"
    ),
    ("monitoring.coreos.com", "AlertmanagerConfig"): (
        "prometheus-operator/crd-alertmanagerconfigs.yaml"
    ),
    ("sparkoperator.k8s.io", "SparkApplication"): (
        "spark-operator/sparkoperator.k8s.io_sparkapplications.yaml"
    ),
    # LLM serving (tests/k8s/vendor/llm/SOURCE): KServe v0.20.0, KEDA 2.18.0 and its HTTP
    # add-on 0.11.0, LeaderWorkerSet v0.8.0.
    ("serving.kserve.io", "LLMInferenceService"): "llm/serving.kserve.io_llminferenceservices.yaml",
    ("serving.kserve.io", "LLMInferenceServiceConfig"): (
        "llm/serving.kserve.io_llminferenceserviceconfigs.yaml"
    ),
    ("keda.sh", "ScaledObject"): "llm/keda.sh_scaledobjects.yaml",
    ("keda.sh", "TriggerAuthentication"): "llm/keda.sh_triggerauthentications.yaml",
    ("http.keda.sh", "HTTPScaledObject"): "llm/http.keda.sh_httpscaledobjects.yaml",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        "llm/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
    ),
}
# The LLM gateway's kinds (tests/k8s/vendor/llm-gateway/README.md): Gateway API v1.5.1
# (standard channel), the Inference Extension v1.5.0, Envoy Gateway v1.8.1, Envoy AI
# Gateway v1.0.0.
FILES.update(
    {
        (group, kind): f"llm-gateway/{group}_{plural}.yaml"
        for group, kind, plural in (
            ("gateway.networking.k8s.io", "GatewayClass", "gatewayclasses"),
            ("gateway.networking.k8s.io", "Gateway", "gateways"),
            ("gateway.networking.k8s.io", "ReferenceGrant", "referencegrants"),
            ("inference.networking.k8s.io", "InferencePool", "inferencepools"),
            ("gateway.envoyproxy.io", "SecurityPolicy", "securitypolicies"),
            ("gateway.envoyproxy.io", "BackendTrafficPolicy", "backendtrafficpolicies"),
            ("gateway.envoyproxy.io", "ClientTrafficPolicy", "clienttrafficpolicies"),
            ("gateway.envoyproxy.io", "EnvoyProxy", "envoyproxies"),
            ("gateway.envoyproxy.io", "Backend", "backends"),
            ("aigateway.envoyproxy.io", "AIGatewayRoute", "aigatewayroutes"),
            ("aigateway.envoyproxy.io", "AIServiceBackend", "aiservicebackends"),
        )
    }
)
_GROUP_OF_KIND = {kind: group for group, kind in FILES}


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


# libyaml's loader: the InferenceService CRD is 1.8 MB of YAML. PyYAML reads a bare `=`
# (the AlertmanagerConfig CRD's matchType enum) as YAML 1.1's "value" tag: a string here.
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


_Loader.add_constructor(
    "tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node)
)


@cache
def crd(kind: str, group: str | None = None) -> dict[str, Any]:
    """The vendored CRD of ``kind`` (in ``group``; by default the one vendored group)."""
    path = VENDOR / FILES[(group or _GROUP_OF_KIND[kind], kind)]
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # type: ignore[no-any-return]


@cache
def _validator(group: str, kind: str, version: str) -> jsonschema.Draft7Validator:
    for served in crd(kind, group)["spec"]["versions"]:
        if served["name"] == version:
            schema = _strict(served["schema"]["openAPIV3Schema"])
            # Every object carries apiVersion, kind and metadata (checked by the API).
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            return jsonschema.Draft7Validator(schema)
    raise KeyError(f"{kind} has no served version {version}")


def is_vendored(manifest: Mapping[str, Any]) -> bool:
    group = str(manifest["apiVersion"]).rpartition("/")[0]
    return (group, str(manifest["kind"])) in FILES


def vendored_crd_errors(manifest: Mapping[str, Any]) -> list[str]:
    """Schema violations of one object of a vendored CRD (empty when valid), one line each."""
    kind = str(manifest["kind"])
    group, _, version = str(manifest["apiVersion"]).rpartition("/")
    if (group, kind) not in FILES:
        expected = _GROUP_OF_KIND.get(kind)
        return [f"apiVersion group {group!r} is not {expected!r}"]
    validator = _validator(group, kind, version)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(dict(manifest)), key=str)
    ]


def vendored_errors(manifests: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every schema violation of the manifests whose CRD is vendored, one line each, named
    ``Kind/name: path: message``."""
    errors: list[str] = []
    for manifest in manifests:
        if not is_vendored(manifest):
            continue
        name = f"{manifest['kind']}/{manifest.get('metadata', {}).get('name', '?')}"
        errors += [f"{name}: {error}" for error in vendored_crd_errors(manifest)]
    return errors


def is_namespaced(kind: str) -> bool:
    return crd(kind)["spec"]["scope"] == "Namespaced"
