"""Model serving: KServe's install, the runtimes, the InferenceService objects and the
serving alerts and dashboard, checked against the pinned upstream releases.

KServe objects are validated strictly against the vendored v0.20.0 CRDs, built-in ones
against the Kubernetes OpenAPI schema, and every Helm value the layer sets against the
pinned charts' own ``values.yaml`` (vendored under ``vendor/charts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import promql_parser
import pulumi_kubernetes as k8s
import pytest
import yaml

from modules.k8s.monitoring.dashboards import dashboard_queries
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.pki.spec import CLUSTER_CA_ISSUER, cert_manager_values, certificate_authority
from modules.k8s.platform.component import KubernetesPlatform
from modules.k8s.serving.inference_service.manifests import inference_service_manifests
from modules.k8s.serving.inference_service.spec import InferenceServiceSpec, ModelVersion
from modules.k8s.serving.manifests import (
    api_server_egress,
    auth_delegation,
    inference_service_account,
    kserve_values,
    metrics_server_values,
    serving_runtimes,
)
from modules.k8s.serving.observability import (
    drift_pod_monitor,
    inference_pod_monitor,
    serving_alert_rules,
    serving_dashboard,
    serving_prometheus_rule,
)
from modules.k8s.serving.spec import ServingSpec
from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS
from modules.validation import InvalidArgsError
from tests.k8s.crd_checks import crd_errors
from tests.k8s.fixtures import CPU, G6, SYSTEM, eks_args, onprem_args
from tests.k8s.mock_runtime import run
from tests.k8s.vendored_crds import vendored_crd_errors
from tests.support.k8s_schema import is_builtin, schema_errors

VENDOR = Path(__file__).parent / "vendor" / "charts"
REGISTRY = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-test"
SPEC = ServingSpec(registry=REGISTRY)
PROXY = SPEC.rbac_proxy_image
HELM = "kubernetes:helm.sh/v3:Release"


def cpu_service(**overrides: Any) -> InferenceServiceSpec:
    values: dict[str, Any] = {
        "name": "uae-gpt",
        "namespace": "team-nlp",
        "model_name": "uae-gpt",
        "model": ModelVersion(3, "mlflow/1/models/m-3/artifacts/int8"),
        "pool": CPU,
        "client_namespaces": ("team-nlp", "apps"),
        "bucket": "gpu-test-data",
        "min_replicas": 4,
        "max_replicas": 6,
        "canary": ModelVersion(4, "mlflow/1/models/m-4/artifacts/int8"),
        "canary_traffic_percent": 25,
    }
    return InferenceServiceSpec(**{**values, **overrides})


def gpu_service(**overrides: Any) -> InferenceServiceSpec:
    return InferenceServiceSpec(
        **{
            "name": "uae-gpt-gpu",
            "namespace": "team-vision",
            "model_name": "uae-gpt",
            "model": ModelVersion(1, "models/uae-gpt/1/triton"),
            "pool": G6,
            "client_namespaces": ("team-vision",),
            "store": "pvc",
            "claim": "checkpoints",
            "released": False,
            **overrides,
        }
    )


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


# --- the runtimes and the InferenceService against the pinned CRDs -----------------------


@pytest.mark.parametrize("has_gpus", [False, True])
def test_runtimes_pass_the_clusterservingruntime_crd(has_gpus: bool) -> None:
    runtimes = serving_runtimes(SPEC, has_gpus)
    assert [r["metadata"]["name"] for r in runtimes] == (
        ["uae-cpu-predictor", "uae-triton"] if has_gpus else ["uae-cpu-predictor"]
    )
    assert crd_errors(runtimes) == []
    images = [c["image"] for r in runtimes for c in r["spec"]["containers"]]
    assert all(image.startswith(f"{REGISTRY}/") for image in images)


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES_VERSIONS)
@pytest.mark.parametrize("make", [cpu_service, gpu_service], ids=["cpu-canary", "gpu-held"])
def test_service_objects_pass_strict_validation(make: Any, version: str) -> None:
    manifests = inference_service_manifests(make(), PROXY)
    builtin = [m for m in manifests if is_builtin(m)]
    assert schema_errors(builtin, version) == []
    assert crd_errors([m for m in manifests if not is_builtin(m)]) == []


def test_the_crd_validation_catches_a_misspelt_field() -> None:
    (isvc,) = by_kind(inference_service_manifests(cpu_service(), PROXY), "InferenceService")
    isvc["spec"]["predictor"]["minReplica"] = 1
    isvc["spec"]["canary"][0]["trafficPercent"] = 150
    errors = vendored_crd_errors(isvc)
    assert any("minReplica" in e for e in errors), errors
    assert any("150" in e for e in errors), errors


def test_cpu_service_runs_the_int8_model_with_a_canary() -> None:
    spec = cpu_service()
    (isvc,) = by_kind(inference_service_manifests(spec, PROXY), "InferenceService")
    meta, predictor = isvc["metadata"], isvc["spec"]["predictor"]
    assert meta["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert meta["annotations"]["serving.kserve.io/stop"] == "false"
    assert predictor["name"] == "v3"
    assert predictor["model"]["runtime"] == "uae-cpu-predictor"
    assert (
        predictor["model"]["storageUri"] == "s3://gpu-test-data/mlflow/1/models/m-3/artifacts/int8"
    )
    assert predictor["serviceAccountName"] == "inference"
    assert predictor["nodeSelector"]["gpuplatform.ae/pool"] == CPU.name
    (canary,) = isvc["spec"]["canary"]
    assert canary["trafficPercent"] == 25
    assert canary["predictor"]["name"] == "v4"
    assert canary["predictor"]["model"]["storageUri"].endswith("m-4/artifacts/int8")
    # KServe v0.20 Standard mode: ceil(4 * 25 / 100) = 1 canary pod beside 3 stable ones.
    assert (spec.canary_replicas, spec.stable_min_replicas, spec.canary_share_percent) == (
        1,
        3,
        25.0,
    )


def test_gpu_service_runs_triton_with_one_gpu_and_is_held() -> None:
    (isvc,) = by_kind(inference_service_manifests(gpu_service(), PROXY), "InferenceService")
    predictor = isvc["spec"]["predictor"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/stop"] == "true"
    assert predictor["model"]["runtime"] == "uae-triton"
    assert predictor["model"]["modelFormat"] == {"name": "onnx"}
    assert predictor["model"]["storageUri"] == "pvc://checkpoints/models/uae-gpt/1/triton"
    assert predictor["model"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {t["key"] for t in predictor["tolerations"]} == {"nvidia.com/gpu"}
    assert "canary" not in isvc["spec"]


def test_every_container_is_non_root_and_read_only() -> None:
    manifests = inference_service_manifests(cpu_service(), PROXY)
    (isvc,) = by_kind(manifests, "InferenceService")
    predictor = isvc["spec"]["predictor"]
    contexts = [c["securityContext"] for c in predictor["containers"]]
    contexts.append(predictor["model"]["securityContext"])
    contexts += [
        c["securityContext"] for r in serving_runtimes(SPEC, True) for c in r["spec"]["containers"]
    ]
    for context in contexts:
        assert context["runAsNonRoot"] and context["readOnlyRootFilesystem"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
    assert predictor["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_only_named_client_namespaces_reach_the_authenticated_endpoint() -> None:
    manifests = inference_service_manifests(cpu_service(), PROXY)
    policy = next(
        m for m in by_kind(manifests, "NetworkPolicy") if m["metadata"]["name"] == "uae-gpt-clients"
    )
    clients, scrape = policy["spec"]["ingress"]
    selector = clients["from"][0]["namespaceSelector"]["matchExpressions"][0]
    assert selector["values"] == ["apps", "team-nlp"]
    assert clients["ports"] == [
        {"protocol": "TCP", "port": 8443},
        {"protocol": "TCP", "port": 8444},
    ]
    assert scrape["ports"] == [{"protocol": "TCP", "port": 8080}]
    # The client namespace outside the team gets its egress to the endpoint.
    egress = [
        m for m in by_kind(manifests, "NetworkPolicy") if m["metadata"]["namespace"] == "apps"
    ]
    assert len(egress) == 1
    (binding,) = by_kind(manifests, "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == [
        "system:serviceaccounts:apps",
        "system:serviceaccounts:team-nlp",
    ]
    (role,) = by_kind(manifests, "Role")
    assert role["rules"][0]["resources"] == ["inferenceservices/proxy"]
    assert role["rules"][0]["resourceNames"] == ["uae-gpt"]
    (service,) = by_kind(manifests, "Service")
    assert service["spec"]["selector"] == {
        "serving.kserve.io/inferenceservice": "uae-gpt",
        "component": "predictor",
    }
    (isvc,) = by_kind(manifests, "InferenceService")
    proxy, _grpc_proxy = isvc["spec"]["predictor"]["containers"]
    assert "--upstream=http://127.0.0.1:8080/" in proxy["args"]
    (config,) = by_kind(manifests, "ConfigMap")
    assert "subresource: proxy" in config["data"]["config.yaml"]
    assert "name: uae-gpt" in config["data"]["config.yaml"]


# --- the spec refuses what would not work -------------------------------------------------


def problems(**overrides: Any) -> set[str]:
    with pytest.raises(InvalidArgsError) as raised:
        cpu_service(**overrides)
    return {p.field for p in raised.value.problems}


def test_too_few_replicas_for_the_split_are_refused_naming_the_fix() -> None:
    with pytest.raises(InvalidArgsError) as raised:
        cpu_service(min_replicas=1, max_replicas=2, canary_traffic_percent=10)
    (problem,) = raised.value.problems
    assert problem.field == "min_replicas"
    assert "would get 50%" in problem.expected and "at least 7" in problem.expected


def test_the_spec_collects_every_problem() -> None:
    assert problems(
        model=ModelVersion(3, "elsewhere/model"),
        pool=SYSTEM,
        client_namespaces=(),
        canary_traffic_percent=0,
        cpu_millicores=10_000_000,
    ) == {
        "model.storage_path",
        "pool",
        "client_namespaces",
        "canary_traffic_percent",
        "cpu_millicores",
    }
    assert problems(canary=ModelVersion(3, "mlflow/x")) == {"canary.version"}
    assert problems(model=ModelVersion(3, "mlflow/../secrets")) == {"model.storage_path"}


# --- the install: values against the pinned charts ----------------------------------------

#: Keys whose values are free-form maps the charts render as they are.
FREE_FORM = {"nodeSelector", "containerSecurityContext", "securityContext"}


def unknown_keys(
    values: Mapping[str, Any], upstream: Mapping[str, Any], path: str = ""
) -> list[str]:
    """Key paths of ``values`` the chart's values.yaml does not have."""
    missing = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        below = upstream.get(key)
        if key not in upstream:
            missing.append(where)
        elif isinstance(value, Mapping) and key not in FREE_FORM and isinstance(below, Mapping):
            missing += unknown_keys(value, below, where) if below else []
    return missing


def chart_values(name: str) -> dict[str, Any]:
    return yaml.safe_load((VENDOR / name).read_text())  # type: ignore[no-any-return]


def test_kserve_values_exist_in_the_pinned_chart() -> None:
    values = kserve_values(SPEC, "me-central-1")
    assert unknown_keys(values, chart_values("kserve-resources-v0.20.0-values.yaml")) == []
    controller = values["kserve"]["controller"]
    assert controller["deploymentMode"] == "Standard"
    assert controller["gateway"] == {"disableIngressCreation": True}
    assert values["kserve"]["storage"]["s3"] == {"region": "me-central-1"}


def test_cert_manager_values_exist_in_the_pinned_chart() -> None:
    values = cert_manager_values(REGISTRY)
    assert unknown_keys(values, chart_values("cert-manager-v1.20.3-values.yaml")) == []
    assert values["crds"] == {"enabled": True, "keep": True}


def test_metrics_server_values_exist_in_the_pinned_chart() -> None:
    values = metrics_server_values(SPEC)
    assert unknown_keys(values, chart_values("metrics-server-3.13.1-values.yaml")) == []
    assert values["image"]["repository"] == f"{REGISTRY}/metrics-server"


def test_the_key_check_catches_a_misspelt_value() -> None:
    values = {"kserve": {"controller": {"deploymentmode": "Standard"}}}
    upstream = chart_values("kserve-resources-v0.20.0-values.yaml")
    assert unknown_keys(values, upstream) == ["kserve.controller.deploymentmode"]


def test_every_chart_image_comes_from_the_registry() -> None:
    def images(node: Any) -> list[str]:
        if isinstance(node, Mapping):
            found = [
                v for k, v in node.items() if k in ("image", "repository") and isinstance(v, str)
            ]
            return found + [i for v in node.values() for i in images(v)]
        return []

    found = images(kserve_values(SPEC, None)) + images(cert_manager_values(REGISTRY))
    found += images(metrics_server_values(SPEC))
    assert len(found) == 10
    assert all(image.startswith(f"{REGISTRY}/") for image in found), found


def serving_layer(args: Any) -> list[Any]:
    def program() -> None:
        provider = k8s.Provider("cluster", kubeconfig="{}")
        KubernetesPlatform("platform", replace(args, provider=provider))

    return run(program)


def test_the_layer_installs_kserve_after_the_cluster_ca_and_the_runtimes() -> None:
    records = serving_layer(eks_args(serving=SPEC))
    urns = {r.urn: r for r in records}
    releases = {r.inputs["name"]: r for r in records if r.type == HELM}
    assert releases["cert-manager"].inputs["version"] == "v1.20.3"
    assert releases["metrics-server"].inputs["namespace"] == "kube-system"
    assert releases["kserve-crd"].inputs["chart"] == "oci://ghcr.io/kserve/charts/kserve-crd"
    kserve = releases["kserve"]
    assert kserve.inputs["chart"] == "oci://ghcr.io/kserve/charts/kserve-resources"
    assert {urns[d].inputs.get("name") for d in kserve.dependencies if d in urns} >= {"kserve-crd"}
    # Its webhooks' certificates come from the cluster CA: the issuer exists first.
    issuers = {
        urns[d].inputs["metadata"]["name"]
        for d in kserve.dependencies
        if d in urns and urns[d].inputs.get("kind") == "ClusterIssuer"
    }
    assert issuers == {CLUSTER_CA_ISSUER}
    kinds = [
        r.inputs["kind"] for r in records if r.custom and r.type != HELM and "kind" in r.inputs
    ]
    assert kinds.count("ClusterServingRuntime") == 2  # the stack has GPU pools
    assert kinds.count("ServiceAccount") >= 2


def test_the_layer_without_serving_installs_none_of_it() -> None:
    records = serving_layer(eks_args())
    names = {r.inputs["name"] for r in records if r.type == HELM}
    assert not names & {"kserve", "kserve-crd", "metrics-server"}
    # cert-manager is the platform's PKI: monitoring and tracking need it too.
    assert "cert-manager" in names


@pytest.mark.parametrize(
    ("field", "ceiling", "expected"),
    [
        ("drift_token_js_threshold", 1, "a Jensen-Shannon distance in (0, 1]"),
        ("drift_prompt_length_psi_threshold", 10, "a PSI in (0, 10]"),
        ("error_rate_percent", 100, "a percentage in (0, 100]"),
        ("latency_p99_seconds", 600, "seconds in (0, 600]"),
    ],
)
def test_an_alert_threshold_lies_above_zero_up_to_its_ceiling(
    field: str, ceiling: int, expected: str
) -> None:
    assert getattr(replace(SPEC, **{field: ceiling}), field) == ceiling
    for wrong in (0, ceiling * 1.5):
        with pytest.raises(InvalidArgsError) as raised:
            replace(SPEC, **{field: wrong})
        (problem,) = raised.value.problems
        assert (problem.field, problem.value) == (field, wrong)
        assert problem.expected.startswith(expected)


def test_drift_must_last_5_to_1440_minutes_before_it_alerts() -> None:
    assert replace(SPEC, drift_minutes=5).drift_minutes == 5
    with pytest.raises(InvalidArgsError) as raised:
        replace(SPEC, drift_minutes=1441)
    assert [p.describe() for p in raised.value.problems] == [
        "drift_minutes: got 1441; use 5 to 1440"
    ]


def test_an_onprem_layer_needs_the_site_registry() -> None:
    with pytest.raises(InvalidArgsError) as raised:
        onprem_args(serving=ServingSpec())
    assert "serving.registry" in {p.field for p in raised.value.problems}


def test_the_endpoint_ca_and_certificates_pass_the_cert_manager_crds() -> None:
    authority = certificate_authority()
    assert crd_errors(authority) == []
    assert [m["kind"] for m in authority] == ["ClusterIssuer", "Certificate", "ClusterIssuer"]
    manifests = inference_service_manifests(cpu_service(), PROXY)
    (certificate,) = by_kind(manifests, "Certificate")
    assert "uae-gpt-endpoint.team-nlp.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] == authority[-1]["metadata"]["name"]
    (isvc,) = by_kind(manifests, "InferenceService")
    for proxy in isvc["spec"]["predictor"]["containers"]:
        assert "--tls-cert-file=/etc/tls/private/tls.crt" in proxy["args"]
    volumes = {v["name"]: v for v in isvc["spec"]["predictor"]["volumes"]}
    assert volumes["endpoint-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]


def test_identity_objects_are_valid() -> None:
    objects = [
        inference_service_account("nlp"),
        auth_delegation(["nlp", "vision"]),
        api_server_egress(
            replace(SPEC, api_server_cidrs=("10.20.0.11/32",)),
            "nlp",
            ClusterNetwork(("10.20.0.10/32",), ("10.20.0.0/22",)),
        ),
    ]
    assert schema_errors(objects, "1.33") == []
    assert auth_delegation(["nlp"])["roleRef"]["name"] == "system:auth-delegator"


# --- drift alerts, scrape and dashboard ----------------------------------------------------


def test_monitoring_objects_pass_their_crd_checks() -> None:
    monitors = [inference_pod_monitor(["nlp"]), drift_pod_monitor(["nlp"])]
    assert crd_errors([*monitors, serving_prometheus_rule(SPEC)]) == []


def test_the_drift_alert_uses_the_configured_thresholds() -> None:
    spec = replace(SPEC, drift_token_js_threshold=0.15, drift_minutes=45)
    (drift,) = [r for r in serving_alert_rules(spec) if r.alert == "ModelInputDrift"]
    assert 'uae_predictor_drift_score{statistic="token_js"} > 0.15' in drift.expr
    assert 'statistic="prompt_length_psi"} > 0.2' in drift.expr
    assert drift.manifest()["for"] == "45m"


@pytest.mark.parametrize("rule", serving_alert_rules(SPEC), ids=lambda r: r.alert)
def test_alert_expressions_parse(rule: Any) -> None:
    promql_parser.parse(rule.expr)


def test_dashboard_queries_parse_and_show_drift_beside_latency_and_errors() -> None:
    dashboard = serving_dashboard(SPEC)
    queries = dashboard_queries(dashboard)
    for query in queries:
        promql_parser.parse(query.replace("$model", ".*"))
    text = " ".join(queries)
    for metric in (
        "uae_predictor_requests_total",
        "uae_predictor_request_duration_seconds_bucket",
        "uae_predictor_drift_score",
        "uae_predictor_rejected_total",
    ):
        assert metric in text
    # Every predictor panel groups by model version: canary and stable side by side.
    predictor = [q for q in queries if "uae_predictor" in q]
    assert all("by (model, version" in q for q in predictor)
