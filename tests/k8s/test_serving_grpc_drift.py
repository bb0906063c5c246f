"""gRPC on the cluster and drift for every predictor: the objects each InferenceService
gets, checked against the pinned CRDs and the Kubernetes schema, and every reference
followed (logger URL -> drift Service -> drift pods; proxy -> model server's gRPC port;
Service port -> proxy container port; NetworkPolicy -> ports).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from modules.k8s.serving.inference_service.drift import (
    DRIFT_EVENTS_PORT,
    DRIFT_METRICS_PORT,
    LOGGED_HEADERS,
    VERSION_ANNOTATION,
    DriftImages,
    drift_name,
    reference_path,
)
from modules.k8s.serving.inference_service.manifests import (
    AGENT_PORT,
    GRPC_PROXY_PORT,
    PROXY_PORT,
    grpc_endpoint,
    inference_service_manifests,
)
from modules.k8s.serving.inference_service.spec import ModelVersion
from modules.k8s.serving.manifests import PREDICTOR_GRPC_PORT, TRITON_GRPC_PORT, cpu_runtime
from modules.k8s.serving.observability import DRIFT_POD_LABEL, drift_pod_monitor
from tests.k8s.crd_checks import crd_errors
from tests.k8s.test_serving import PROXY, SPEC, by_kind, cpu_service, gpu_service
from tests.support.environments import run_in
from tests.support.k8s_schema import is_builtin, schema_errors

DRIFT = DriftImages(SPEC.predictor_image, SPEC.storage_initializer_image, "me-central-1")


def manifests_of(make: Any, **overrides: Any) -> list[dict[str, Any]]:
    return inference_service_manifests(make(**overrides), PROXY, DRIFT)


def named(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in by_kind(manifests, kind) if m["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("make", [cpu_service, gpu_service], ids=["cpu-canary", "gpu-held"])
def test_objects_with_drift_pass_strict_validation(make: Any) -> None:
    manifests = manifests_of(make)
    assert schema_errors([m for m in manifests if is_builtin(m)], "1.33") == []
    assert crd_errors([m for m in manifests if not is_builtin(m)]) == []
    assert crd_errors([drift_pod_monitor(["nlp"])]) == []


# --- gRPC through the TLS proxy -----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "model_port"), [(cpu_service, PREDICTOR_GRPC_PORT), (gpu_service, TRITON_GRPC_PORT)]
)
def test_grpc_is_exposed_through_its_own_tls_proxy(make: Any, model_port: int) -> None:
    spec = make()
    manifests = inference_service_manifests(spec, PROXY, DRIFT)
    (isvc,) = by_kind(manifests, "InferenceService")
    containers = {c["name"]: c for c in isvc["spec"]["predictor"]["containers"]}
    grpc = containers["kube-rbac-proxy-grpc"]
    # TLS to the client (the endpoint certificate), h2c to the model server's gRPC port.
    assert f"--secure-listen-address=0.0.0.0:{GRPC_PROXY_PORT}" in grpc["args"]
    assert f"--upstream=http://127.0.0.1:{model_port}/" in grpc["args"]
    assert "--upstream-force-h2c" in grpc["args"]
    assert "--tls-cert-file=/etc/tls/private/tls.crt" in grpc["args"]
    assert "--tls-min-version=VersionTLS13" in grpc["args"]
    port_names = {p["containerPort"]: p["name"] for c in containers.values() for p in c["ports"]}
    health = [int(a.split("=")[1]) for c in containers.values() for a in c["args"]
              if a.startswith("--proxy-endpoints-port=")]  # fmt: skip
    assert len(set(health)) == 2, "the two proxies need their own health ports"
    # The Service's gRPC port targets the proxy's named port.
    service = named(manifests, "Service", f"{spec.name}-endpoint")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["grpcs"]["port"] == GRPC_PROXY_PORT
    assert port_names[GRPC_PROXY_PORT] == ports["grpcs"]["targetPort"]
    assert port_names[PROXY_PORT] == ports["https"]["targetPort"]
    # Only the client namespaces reach the two proxy ports, nothing else of the pod.
    policy = named(manifests, "NetworkPolicy", f"{spec.name}-clients")
    clients = policy["spec"]["ingress"][0]
    assert {p["port"] for p in clients["ports"]} == {PROXY_PORT, GRPC_PROXY_PORT}
    assert model_port not in {
        p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]
    }
    for egress in [m for m in by_kind(manifests, "NetworkPolicy")
                   if m["metadata"]["name"].startswith("allow-egress-to-")]:  # fmt: skip
        assert {p["port"] for p in egress["spec"]["egress"][0]["ports"]} == {
            PROXY_PORT, GRPC_PROXY_PORT,
        }  # fmt: skip
    assert grpc_endpoint(spec) == f"{spec.name}-endpoint.{spec.namespace}.svc:{GRPC_PROXY_PORT}"


def test_the_cpu_predictor_binds_grpc_to_loopback_on_the_proxied_port() -> None:
    args = cpu_runtime(SPEC)["spec"]["containers"][0]["args"]
    assert f"--grpc_port={PREDICTOR_GRPC_PORT}" in args
    assert "--grpc-host=127.0.0.1" in args  # reachable only through the TLS proxy
    assert "--drift-window=0" in args  # the drift service is the one source of drift


# --- the logger and the drift service -------------------------------------------------------


@pytest.mark.parametrize("make", [cpu_service, gpu_service], ids=["cpu", "triton"])
def test_the_logger_feeds_the_drift_service_for_every_runtime(make: Any) -> None:
    spec = make()
    manifests = inference_service_manifests(spec, PROXY, DRIFT)
    (isvc,) = by_kind(manifests, "InferenceService")
    predictor = isvc["spec"]["predictor"]
    logger = predictor["logger"]
    assert logger["mode"] == "request"
    service = named(manifests, "Service", drift_name(spec))
    events = {p["name"]: p["port"] for p in service["spec"]["ports"]}["events"]
    assert logger["url"] == (
        f"http://{service['metadata']['name']}.{service['metadata']['namespace']}"
        f".svc.cluster.local:{events}/"
    )
    assert logger["metadataHeaders"] == list(LOGGED_HEADERS)
    assert logger["metadataAnnotations"] == [VERSION_ANNOTATION]
    # The HTTP proxy forwards to KServe's agent, which logs and then forwards.
    proxy = next(c for c in predictor["containers"] if c["name"] == "kube-rbac-proxy")
    assert f"--upstream=http://127.0.0.1:{AGENT_PORT}/" in proxy["args"]
    # Each predictor names its registered version; the drift service has a reference
    # for each.
    versions = {predictor["annotations"][VERSION_ANNOTATION]}
    for canary in isvc["spec"].get("canary", []):
        versions.add(canary["predictor"]["annotations"][VERSION_ANNOTATION])
    deployment = named(manifests, "Deployment", drift_name(spec))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    references = {args[i + 1].split("=")[0] for i, a in enumerate(args) if a == "--reference"}
    assert references == versions
    assert args[args.index("--model") + 1] == isvc["metadata"]["name"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"events": DRIFT_EVENTS_PORT, "metrics": DRIFT_METRICS_PORT}
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels[DRIFT_POD_LABEL] == spec.name
    assert "serving.kserve.io/inferenceservice" not in labels  # not an endpoint pod
    # Admitted: this service's predictor pods (events), monitoring (metrics).
    policy = named(manifests, "NetworkPolicy", f"{drift_name(spec)}-ingress")
    from_pods, from_monitoring = policy["spec"]["ingress"]
    assert from_pods["from"][0]["podSelector"]["matchLabels"] == {
        "serving.kserve.io/inferenceservice": spec.name
    }
    assert from_pods["ports"] == [{"protocol": "TCP", "port": DRIFT_EVENTS_PORT}]
    assert from_monitoring["ports"] == [{"protocol": "TCP", "port": DRIFT_METRICS_PORT}]
    # The drift service runs the predictor image, stopped with a held service.
    assert container["image"] == SPEC.predictor_image
    assert container["command"] == ["python", "-m", "workloads.serving.drift_service"]
    assert deployment["spec"]["replicas"] == (1 if spec.released else 0)


def test_references_are_fetched_from_where_register_writes_them() -> None:
    """CPU: the int8 model's artifacts; Triton on S3: the artifacts directory above
    ``triton/``. The storage initializer gets (uri, dir) pairs, the service the dirs."""
    cpu = cpu_service()
    (init,) = named(manifests_of(cpu_service), "Deployment", drift_name(cpu))["spec"]["template"][
        "spec"
    ]["initContainers"]
    assert init["image"] == SPEC.storage_initializer_image
    uri = "s3://gpu-test-data/mlflow/1/models/m-{}/artifacts/int8/{}"
    assert init["args"] == [
        uri.format(3, "drift_reference.json"), "/mnt/drift/v3",
        uri.format(3, "model_card.json"), "/mnt/drift/v3",
        uri.format(4, "drift_reference.json"), "/mnt/drift/v4",
        uri.format(4, "model_card.json"), "/mnt/drift/v4",
    ]  # fmt: skip
    assert {"name": "AWS_DEFAULT_REGION", "value": "me-central-1"} in init["env"]
    triton_s3 = gpu_service(
        store="s3",
        claim=None,
        bucket="b",
        model=ModelVersion(2, "mlflow/1/models/m/artifacts/triton"),
    )
    assert reference_path(triton_s3, triton_s3.model) == "mlflow/1/models/m/artifacts"
    # On premises the claim is mounted read-only; no download.
    gpu = gpu_service()
    pod = named(manifests_of(gpu_service), "Deployment", drift_name(gpu))["spec"]["template"][
        "spec"
    ]
    assert pod["initContainers"] == []
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "checkpoints", "readOnly": True}
    args = pod["containers"][0]["args"]
    assert args[args.index("--reference") + 1] == "1=/mnt/pvc/models/uae-gpt/1"


def test_the_logger_contract_matches_the_drift_service() -> None:
    """The annotation and header the logger is told to forward are the ones the drift
    service reads (its module, in the serving environment)."""
    read = json.loads(run_in("serving", "-c", SERVICE_CONSTANTS))
    assert read["annotation"] == VERSION_ANNOTATION
    assert [read["header"]] == list(LOGGED_HEADERS)
    assert read["request_event"] == "org.kubeflow.serving.inference.request"


SERVICE_CONSTANTS = """
import json
from workloads.serving import drift_service as d
print(json.dumps({"annotation": d.VERSION_ANNOTATION, "header": d.BINARY_HEADER,
                  "request_event": d.REQUEST_EVENT}))
"""


def test_without_drift_images_no_logger_and_no_drift_service() -> None:
    manifests = inference_service_manifests(cpu_service(), PROXY)
    (isvc,) = by_kind(manifests, "InferenceService")
    assert "logger" not in isvc["spec"]["predictor"]
    assert by_kind(manifests, "Deployment") == []
