"""Model serving on the cluster: KServe in RawDeployment mode, runtimes, identities.

* The platform's cert-manager (`modules.k8s.pki`) issues the certificates of KServe's
  admission webhooks, and, from the cluster CA, those of the inference endpoints.
* KServe from its own OCI charts: ``kserve-crd``, then ``kserve-resources`` with
  ``deploymentMode: Standard`` (KServe v0.20's name for RawDeployment: plain
  Deployments, Services and HPAs; no Knative, no Istio) and no Ingress objects
  (``disableIngressCreation``): inference endpoints stay inside the cluster.
* Two ClusterServingRuntimes: the CPU predictor built from this package, and NVIDIA
  Triton for ONNX models on GPU pools (only on stacks with GPU pools).
* Every image (KServe's controller, storage initializer, agent, router, the runtimes,
  cert-manager, kube-rbac-proxy) comes from ``ServingSpec.registry``: the stack's ECR in
  the region, or the site's registry on premises.
* The ``kserve`` namespace's NetworkPolicies: default deny, the API server, and the API
  server's calls to KServe's webhooks.
* In each team namespace the ``inference`` ServiceAccount its inference pods run as
  (bound on EKS to a read-only role on the model artifacts) with the right to check
  callers' tokens (``system:auth-delegator``), for the endpoints' kube-rbac-proxy.
* metrics-server (unless ``install_metrics_server`` is false): KServe's HPAs scale the
  predictors on CPU through the resource metrics API.
* The scrape of every inference pod, the serving alert rules and the serving dashboard
  (`modules.k8s.serving.observability`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modules.k8s import netpol, rbac
from modules.k8s.common import Manifest, metadata, system_node_selector
from modules.k8s.names import team_namespace
from modules.k8s.security import restricted_container
from modules.k8s.serving.observability import (
    ISVC_POD_LABEL,
    PREDICTOR_HTTP_PORT_NAME,
    TRITON_METRICS_PORT_NAME,
)
from modules.k8s.serving.spec import (
    CPU_MODEL_FORMAT,
    CPU_RUNTIME,
    INFERENCE_SERVICE_ACCOUNT,
    KSERVE_NAMESPACE,
    KUBE_RBAC_PROXY_TAG,
    ONNX_MODEL_FORMAT,
    TRITON_RUNTIME,
    ServingSpec,
)

#: The runtimes' containers run as this non-root user: the predictor image creates it
#: (``USER 10001``); Triton's image runs as any UID (its ``triton-server`` user is 1000,
#: below the 10000 at which a container user can no longer be a node's user).
RUNTIME_UID = 10001
#: KServe's storage initializer downloads the model here; runtimes read it from here.
MODEL_DIR = "/mnt/models"
#: The model servers' ports: REST (KServe's default 8080) and gRPC (the CPU predictor on
#: KServe's default 8081, bound to 127.0.0.1: only the pod's TLS proxy reaches it;
#: Triton on 9000, as KServe's own Triton runtime).
PREDICTOR_HTTP_PORT = 8080
PREDICTOR_GRPC_PORT = 8081
TRITON_GRPC_PORT = 9000
DEPLOYMENT_MODE = "Standard"


def _registry(spec: ServingSpec) -> str:
    if spec.registry is None:
        raise ValueError("serving.registry is unresolved (set by the AWS foundation)")
    return spec.registry


def metrics_server_values(spec: ServingSpec) -> dict[str, Any]:
    """Values of metrics-server 3.13.1 (keys checked against its values.yaml)."""
    return {
        "image": {"repository": f"{_registry(spec)}/metrics-server"},
        "nodeSelector": system_node_selector(),
    }


def kserve_values(spec: ServingSpec, region: str | None) -> dict[str, Any]:
    """Values of kserve-resources v0.20.0 (keys checked against its values.yaml)."""
    registry = _registry(spec)
    storage: dict[str, Any] = {
        "image": f"{registry}/kserve-storage-initializer",
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if region:
        # boto3 in the storage initializer talks to the region's S3 endpoint.
        storage["s3"] = {"region": region}
    return {
        "kserve": {
            "controller": {
                "deploymentMode": DEPLOYMENT_MODE,
                "image": f"{registry}/kserve-controller",
                "rbacProxyImage": f"{registry}/kube-rbac-proxy:{KUBE_RBAC_PROXY_TAG}",
                "nodeSelector": system_node_selector(),
                # No Ingress objects: endpoints are reached inside the cluster only.
                "gateway": {"disableIngressCreation": True},
            },
            "storage": storage,
            "agent": {"image": f"{registry}/kserve-agent"},
            "router": {"image": f"{registry}/kserve-router"},
        }
    }


def _default_resources(cpu: str, memory: str) -> dict[str, dict[str, str]]:
    # Each InferenceService sets its own from the pool; these apply only where it does not.
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def _runtime(
    name: str, spec: Mapping[str, Any], server_type: str, prometheus_port: int
) -> Manifest:
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": metadata(name, annotations={"serving.kserve.io/server-type": server_type}),
        "spec": {
            # KServe copies these onto the pods: where Prometheus finds the metrics.
            "annotations": {
                "prometheus.kserve.io/port": str(prometheus_port),
                "prometheus.kserve.io/path": "/metrics",
            },
            **spec,
        },
    }


def v2_health_probes(port: int) -> Manifest:
    """The model server's V2 health endpoints on its REST ``port`` (both runtimes serve
    them): ready once its model is loaded, and restarted when it stops answering live.
    Liveness waits out a slow start (a large model loads before the server answers)."""
    return {
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": port},
            "periodSeconds": 10,
        },
        "livenessProbe": {
            "httpGet": {"path": "/v2/health/live", "port": port},
            "initialDelaySeconds": 60,
            "periodSeconds": 20,
            "failureThreshold": 3,
        },
    }


def cpu_runtime(spec: ServingSpec) -> Manifest:
    """The CPU predictor (KServe's Python model server wrapping this package's inference
    library), V2 protocol over REST on 8080 and gRPC on 127.0.0.1:8081; metrics on the
    REST port. Its drift window is off: the drift service measures drift for every
    runtime from KServe's request logger (one source of the signal)."""
    return _runtime(
        CPU_RUNTIME,
        {
            "supportedModelFormats": [
                {"name": CPU_MODEL_FORMAT, "version": "1", "autoSelect": True, "priority": 1}
            ],
            "protocolVersions": ["v2"],
            "containers": [
                {
                    "name": "kserve-container",
                    "image": spec.predictor_image,
                    # KServe's model-server conventions: {{.Name}} is the InferenceService.
                    "args": [
                        "--model_name={{.Name}}",
                        f"--model_dir={MODEL_DIR}",
                        f"--http_port={PREDICTOR_HTTP_PORT}",
                        f"--grpc_port={PREDICTOR_GRPC_PORT}",
                        "--grpc-host=127.0.0.1",
                        "--drift-window=0",
                    ],
                    "env": [{"name": "HOME", "value": "/tmp"}],
                    "ports": [
                        {"name": PREDICTOR_HTTP_PORT_NAME, "containerPort": 8080, "protocol": "TCP"}
                    ],
                    **v2_health_probes(8080),
                    "resources": _default_resources("1", "2Gi"),
                    "securityContext": restricted_container(RUNTIME_UID),
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
        },
        "uae-cpu-predictor",
        8080,
    )


def triton_runtime(spec: ServingSpec) -> Manifest:
    """NVIDIA Triton for ONNX models on GPU pools (arguments as KServe's own Triton
    runtime), V2 over REST on 8080 and gRPC on 9000, metrics on 8002."""
    return _runtime(
        TRITON_RUNTIME,
        {
            "supportedModelFormats": [
                {"name": ONNX_MODEL_FORMAT, "version": "1", "autoSelect": True, "priority": 1}
            ],
            "protocolVersions": ["v2", "grpc-v2"],
            "containers": [
                {
                    "name": "kserve-container",
                    "image": spec.triton_image,
                    "args": [
                        "tritonserver",
                        f"--model-store={MODEL_DIR}",
                        f"--grpc-port={TRITON_GRPC_PORT}",
                        "--http-port=8080",
                        "--metrics-port=8002",
                        "--allow-grpc=true",
                        "--allow-http=true",
                        "--allow-metrics=true",
                    ],
                    "ports": [
                        {"name": "http1", "containerPort": 8080, "protocol": "TCP"},
                        {
                            "name": TRITON_METRICS_PORT_NAME,
                            "containerPort": 8002,
                            "protocol": "TCP",
                        },
                    ],
                    **v2_health_probes(8080),
                    "resources": _default_resources("1", "4Gi"),
                    "securityContext": restricted_container(RUNTIME_UID),
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                    ],
                }
            ],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}},
                # Triton's Python and ONNX Runtime backends share tensors through /dev/shm.
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            ],
        },
        "tritonserver",
        8002,
    )


def inference_service_account(team: str) -> Manifest:
    # Pod Identity and the kube-rbac-proxy sidecar need the token.
    meta = metadata(INFERENCE_SERVICE_ACCOUNT, team_namespace(team))
    return rbac.service_account(meta, mount_token=True)


def auth_delegation(teams: Sequence[str]) -> Manifest:
    """Lets the inference pods' kube-rbac-proxy create TokenReviews and
    SubjectAccessReviews (the built-in ``system:auth-delegator`` role), nothing else."""
    return rbac.role_binding(
        metadata("gpuplatform-inference-auth-delegator"),
        "system:auth-delegator",
        rbac.service_account_subjects(
            INFERENCE_SERVICE_ACCOUNT, [team_namespace(team) for team in sorted(teams)]
        ),
        role_kind="ClusterRole",
        cluster=True,
    )


def api_server_egress(spec: ServingSpec, team: str, network: netpol.ClusterNetwork) -> Manifest:
    """Lets inference pods reach the API server (their kube-rbac-proxy reviews each
    caller's token): the cluster's API server addresses and any the serving section adds."""
    cidrs = [*network.api_server_cidrs, *spec.api_server_cidrs]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata("allow-inference-api-server", team_namespace(team)),
        "spec": {
            "podSelector": {"matchExpressions": [{"key": ISVC_POD_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": netpol.cidr_peers(cidrs),
                    "ports": netpol.tcp(*netpol.API_SERVER_PORTS),
                }
            ],
        },
    }


def serving_runtimes(spec: ServingSpec, has_gpus: bool) -> list[Manifest]:
    """The runtimes this stack offers: Triton only where there are GPU pools."""
    return [cpu_runtime(spec), *([triton_runtime(spec)] if has_gpus else [])]


#: KServe's controller pods (``control-plane`` label of the kserve-resources chart) and
#: their webhook port (``webhook-server``, 9443).
KSERVE_CONTROLLER_LABELS = {"control-plane": "kserve-controller-manager"}
KSERVE_WEBHOOK_PORT = "webhook-server"


def kserve_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """The controller reaches the API server only; the API server calls its admission
    webhooks. Its metrics (behind kube-rbac-proxy on 8443) are not scraped: no scrape
    is allowed."""
    return [
        *netpol.baseline(KSERVE_NAMESPACE, network),
        netpol.allow_from_api_server(
            KSERVE_NAMESPACE,
            network,
            netpol.tcp(KSERVE_WEBHOOK_PORT),
            pod_labels=KSERVE_CONTROLLER_LABELS,
        ),
    ]
