"""The drift service of one served model, as plain manifests (pure functions).

Drift is computed outside the predictor, the same way for the CPU predictor and Triton:
the InferenceService's ``logger`` (KServe's agent sidecar, in front of the model server)
posts every inference request as a CloudEvent to ``<name>-drift`` in the service's own
namespace, which runs ``python -m workloads.serving.drift_service`` (the predictor
image) against the drift reference stored with each served model version and exports
``uae_predictor_drift_score`` (the gauge the ``ModelInputDrift`` alert and the dashboard
read).

* **Logger**: ``mode: request`` (drift is of the inputs: the answers are not sent),
  ``metadataHeaders`` with ``Inference-Header-Content-Length`` (so a binary tensor body
  can be split), ``metadataAnnotations`` with the pod annotation naming the registered
  version (each predictor, stable and canary, carries its own).
* **References**: on AWS an init container (KServe's storage initializer, the image the
  cluster already mirrors) downloads each version's ``drift_reference.json`` and
  ``model_card.json`` from the data bucket with the ``inference`` ServiceAccount's
  read-only Pod Identity role; on premises the team's claim is mounted read-only.
* **Payloads**: none are kept. The service holds per-prompt token counts of the latest
  prompts in memory and writes nothing; the logger is given no ``storage``.
* **Network**: the logger reaches the service in the same namespace over HTTP on the
  pod network (KServe v0.20's chart sets no CA for the logger, so it cannot verify a
  TLS endpoint of ours); the NetworkPolicy admits the service's predictor pods on the
  events port and the monitoring namespace on the metrics port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from modules.k8s import netpol
from modules.k8s.common import cluster_ip_service, toleration
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.security import restricted_pod
from modules.k8s.serving.inference_service.spec import InferenceServiceSpec, ModelVersion
from modules.k8s.serving.observability import DRIFT_POD_LABEL, ISVC_POD_LABEL
from modules.k8s.trainer.pods import RUN_AS_USER, restricted_container_security

DRIFT_EVENTS_PORT = 8080
DRIFT_METRICS_PORT = 9090
DRIFT_DIR = "/mnt/drift"
PVC_DIR = "/mnt/pvc"
#: The pod annotation naming the registered version, forwarded by the logger; the drift
#: service reads the same key (workloads.serving.drift_service.VERSION_ANNOTATION).
VERSION_ANNOTATION = "gpuplatform.ae/model-version"
#: Logged request headers: the binary tensor extension's split point.
LOGGED_HEADERS = ("Inference-Header-Content-Length",)
REFERENCE_FILE = "drift_reference.json"
CARD_FILE = "model_card.json"
#: The Triton repository's folder inside a registered version's artifacts (register
#: writes it beside the fp32 model, whose drift reference and card are one level up).
TRITON_FOLDER = "triton"


@dataclass(frozen=True)
class DriftImages:
    """What the drift service runs.

    Args:
        service: the CPU predictor image (it has ``workloads.serving.drift_service``).
        storage_initializer: KServe's storage initializer as mirrored in the registry
            (fetches the references from S3).
        region: the AWS region of the data bucket (its regional S3 endpoint); ``None``
            on premises.
    """

    service: str
    storage_initializer: str
    region: str | None = None


def drift_name(spec: InferenceServiceSpec) -> str:
    return f"{spec.name}-drift"


def drift_url(spec: InferenceServiceSpec) -> str:
    """Where the logger sends the events."""
    return f"http://{drift_name(spec)}.{spec.namespace}.svc.cluster.local:{DRIFT_EVENTS_PORT}/"


def logger_spec(spec: InferenceServiceSpec) -> dict[str, Any]:
    """The predictor's ``logger`` (KServe v0.20 LoggerSpec)."""
    return {
        "mode": "request",
        "url": drift_url(spec),
        "metadataHeaders": list(LOGGED_HEADERS),
        "metadataAnnotations": [VERSION_ANNOTATION],
    }


def reference_path(spec: InferenceServiceSpec, version: ModelVersion) -> str:
    """The artifact directory holding a version's drift reference and model card: the
    storage path itself (the CPU predictor's model directory), or, for a Triton
    repository (``.../artifacts/triton``), the artifacts directory above it."""
    path = version.storage_path.rstrip("/")
    if spec.pool.has_gpus and path.rsplit("/", 1)[-1] == TRITON_FOLDER and "/" in path:
        return path.rsplit("/", 1)[0]
    return path


def _s3_uri(spec: InferenceServiceSpec, key: str) -> pulumi.Input[str]:
    """``s3://<data bucket>/<key>`` (an Output while the bucket's name is one)."""
    if isinstance(spec.bucket, str):
        return f"s3://{spec.bucket}/{key}"
    return pulumi.Output.concat("s3://", spec.bucket or "", "/", key)


def _versions(spec: InferenceServiceSpec) -> list[ModelVersion]:
    return [spec.model, *([spec.canary] if spec.canary is not None else [])]


def _labels(spec: InferenceServiceSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": drift_name(spec),
        "app.kubernetes.io/part-of": "gpuplatform",
        DRIFT_POD_LABEL: spec.name,
    }


def drift_deployment(spec: InferenceServiceSpec, images: DriftImages) -> dict[str, Any]:
    """One replica: the references fetched (S3) or mounted (PVC), then the service."""
    references: list[str] = []
    init: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    if spec.store == "pvc":
        volumes.append(
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": spec.claim, "readOnly": True},
            }
        )
        mounts.append({"name": "models", "mountPath": PVC_DIR, "readOnly": True})
        for version in _versions(spec):
            references.append(f"{version.version}={PVC_DIR}/{reference_path(spec, version)}")
    else:
        volumes.append({"name": "references", "emptyDir": {"sizeLimit": "64Mi"}})
        mounts.append({"name": "references", "mountPath": DRIFT_DIR, "readOnly": True})
        pairs: list[pulumi.Input[str]] = []
        for version in _versions(spec):
            target = f"{DRIFT_DIR}/v{version.version}"
            directory = reference_path(spec, version)
            pairs += [_s3_uri(spec, f"{directory}/{REFERENCE_FILE}"), target,
                      _s3_uri(spec, f"{directory}/{CARD_FILE}"), target]  # fmt: skip
            references.append(f"{version.version}={target}")
        env = [{"name": "AWS_DEFAULT_REGION", "value": images.region}] if images.region else []
        init.append(
            {
                "name": "storage-initializer",
                "image": images.storage_initializer,
                # initializer-entrypoint src_uri dest_path [src_uri dest_path ...]
                "args": pairs,
                "env": env,
                "resources": _resources("100m", "256Mi"),
                "securityContext": restricted_container_security(),
                "volumeMounts": [
                    {"name": "references", "mountPath": DRIFT_DIR},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }
        )
    args = ["--model", spec.name, "--host", "0.0.0.0"]
    for reference in references:
        args += ["--reference", reference]
    args += ["--port", str(DRIFT_EVENTS_PORT), "--metrics-port", str(DRIFT_METRICS_PORT)]
    container = {
        "name": "drift",
        "image": images.service,
        "command": ["python", "-m", "workloads.serving.drift_service"],
        "args": args,
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [
            {"name": "events", "containerPort": DRIFT_EVENTS_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": DRIFT_METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": DRIFT_EVENTS_PORT}},
        # The event loop answers /healthz: a hung service is restarted after a minute.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": DRIFT_EVENTS_PORT},
            "periodSeconds": 20,
            "failureThreshold": 3,
        },
        "resources": _resources("250m", "512Mi"),
        "securityContext": restricted_container_security(),
        "volumeMounts": mounts,
    }
    pod: dict[str, Any] = {
        "serviceAccountName": spec.service_account,
        # Neither the storage initializer nor the drift service calls the Kubernetes API;
        # EKS Pod Identity projects its own token (modules.k8s.rbac).
        "automountServiceAccountToken": False,
        "securityContext": restricted_pod(RUN_AS_USER),
        "nodeSelector": dict(sorted(spec.pool.labels.items())),
        "initContainers": init,
        "containers": [container],
        "volumes": volumes,
    }
    if spec.pool.taints:
        pod["tolerations"] = [toleration(t) for t in spec.pool.taints]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": drift_name(spec),
            "namespace": spec.namespace,
            "labels": _labels(spec),
        },
        "spec": {
            # Stopped with its service: no pods while the InferenceService is held.
            "replicas": 1 if spec.released else 0,
            "selector": {"matchLabels": {DRIFT_POD_LABEL: spec.name}},
            "template": {"metadata": {"labels": _labels(spec)}, "spec": pod},
        },
    }


def _resources(cpu: str, memory: str) -> dict[str, dict[str, str]]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def drift_service_object(spec: InferenceServiceSpec) -> dict[str, Any]:
    return cluster_ip_service(
        drift_name(spec),
        spec.namespace,
        {DRIFT_POD_LABEL: spec.name},
        [("events", DRIFT_EVENTS_PORT), ("metrics", DRIFT_METRICS_PORT)],
        labels=_labels(spec),
    )


def drift_network_policy(spec: InferenceServiceSpec) -> dict[str, Any]:
    """The service's predictor pods send events; monitoring scrapes the metrics."""
    return netpol.allow_ingress_rules(
        spec.namespace,
        f"{drift_name(spec)}-ingress",
        [
            (
                [netpol.same_namespace_peer({ISVC_POD_LABEL: spec.name})],
                netpol.tcp(DRIFT_EVENTS_PORT),
            ),
            ([netpol.namespace_peer(MONITORING_NAMESPACE)], netpol.tcp(DRIFT_METRICS_PORT)),
        ],
        pod_labels={DRIFT_POD_LABEL: spec.name},
        labels=_labels(spec),
    )


def drift_manifests(spec: InferenceServiceSpec, images: DriftImages) -> list[dict[str, Any]]:
    """The drift service's objects, in apply order."""
    return [drift_network_policy(spec), drift_service_object(spec), drift_deployment(spec, images)]
