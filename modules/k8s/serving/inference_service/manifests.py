"""The Kubernetes objects of one served model, as plain manifests (pure functions).

* An ``InferenceService`` (KServe v0.20, ``Standard`` = RawDeployment mode): the stable
  version as the predictor named ``v<version>``, and a canary version, when there is
  one, in ``spec.canary`` with its ``trafficPercent``. KServe runs each as its own
  Deployment; the canary gets ``ceil(minReplicas * trafficPercent / 100)`` pods. With
  drift (`drift`), the predictor's ``logger`` sends every
  request to the service's drift service, and each predictor carries its registered
  version as a pod annotation the logger forwards.
* Authentication: upstream KServe offers none in RawDeployment mode (the
  ``security.opendatahub.io/enable-auth`` annotation is OpenDataHub's fork only), so each
  predictor pod carries a kube-rbac-proxy sidecar (the project KServe itself uses for
  its controller): it checks the caller's ServiceAccount token (TokenReview) and its
  RBAC permission on ``inferenceservices/proxy`` of this service (SubjectAccessReview),
  then forwards to the model server on 127.0.0.1:8080 (with drift: to KServe's agent on
  127.0.0.1:9081, which logs the request and forwards it to 8080). It serves TLS with a
  certificate cert-manager issues from the platform's CA.
* gRPC: a second kube-rbac-proxy on 8444 (TLS; HTTP/2 negotiated by ALPN, as gRPC
  needs) forwards to the model server's gRPC port in cleartext HTTP/2 over the pod's
  loopback (``--upstream-force-h2c``, kube-rbac-proxy's flag for gRPC upstreams): the
  CPU predictor's 127.0.0.1:8081 or Triton's 9000. The same token and RBAC check
  apply (a gRPC call is an HTTP/2 POST: RBAC verb ``create``). KServe's logger sees
  HTTP only: gRPC requests do not reach the drift service.
* The endpoint: a Service ``<name>-endpoint`` on the proxies' ports 8443 (HTTPS) and
  8444 (gRPC over TLS), selecting every predictor pod of the service (stable and
  canary): requests spread over the pods, so the canary's share of traffic is its share
  of the pods.
* A NetworkPolicy admitting only the named client namespaces, on the proxies' ports
  only, and the monitoring namespace on the metrics ports; a Role and RoleBinding
  granting the client namespaces' ServiceAccounts the right to call.
"""

from __future__ import annotations

from typing import Any

from modules.k8s import netpol, rbac
from modules.k8s.common import cluster_ip_service, toleration
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.security import KUBE_RBAC_PROXY_TOKEN, restricted_pod, scanner_exceptions
from modules.k8s.serving.inference_service.drift import (
    VERSION_ANNOTATION,
    DriftImages,
    drift_manifests,
    logger_spec,
)
from modules.k8s.serving.inference_service.spec import InferenceServiceSpec, ModelVersion
from modules.k8s.serving.manifests import PREDICTOR_GRPC_PORT, TRITON_GRPC_PORT
from modules.k8s.serving.observability import ISVC_POD_LABEL
from modules.k8s.serving.spec import SERVING_CA_ISSUER
from modules.k8s.trainer.pods import GPU_RESOURCE, RUN_AS_USER, restricted_container_security

KSERVE_API = "serving.kserve.io/v1beta1"
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
#: KServe v0.20's name for RawDeployment ("RawDeployment" is its deprecated alias); the
#: canary webhook requires the annotation to say exactly this.
DEPLOYMENT_MODE = "Standard"
STOP_ANNOTATION = "serving.kserve.io/stop"
COMPONENT_LABEL = "component"
MODEL_LABEL = "gpuplatform.ae/model"
VERSION_LABEL = "gpuplatform.ae/model-version"
MODEL_SERVER_PORT = 8080
TRITON_METRICS_PORT = 8002
PROXY_PORT = 8443
PROXY_HEALTH_PORT = 8643
GRPC_PROXY_PORT = 8444
GRPC_PROXY_HEALTH_PORT = 8644
#: KServe's agent sidecar (injected with the logger) listens here and forwards to 8080.
AGENT_PORT = 9081
PROXY_CONFIG_PATH = "/etc/kube-rbac-proxy"
PROXY_CONFIG_FILE = "config.yaml"
PROXY_SUBRESOURCE = "proxy"
TLS_PATH = "/etc/tls/private"


def endpoint_service_name(spec: InferenceServiceSpec) -> str:
    return f"{spec.name}-endpoint"


def tls_secret_name(spec: InferenceServiceSpec) -> str:
    return f"{spec.name}-endpoint-tls"


def endpoint_certificate(spec: InferenceServiceSpec) -> dict[str, Any]:
    """The endpoint's serving certificate from the platform's CA (cert-manager renews
    it; clients verify it with the CA's certificate, ``ca.crt`` of the same secret)."""
    service = endpoint_service_name(spec)
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": _meta(spec, tls_secret_name(spec)),
        "spec": {
            "secretName": tls_secret_name(spec),
            "dnsNames": [
                service,
                f"{service}.{spec.namespace}.svc",
                f"{service}.{spec.namespace}.svc.cluster.local",
            ],
            "usages": ["server auth", "digital signature"],
            "duration": "2160h",
            "renewBefore": "360h",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "issuerRef": {
                "name": SERVING_CA_ISSUER,
                "kind": "ClusterIssuer",
                "group": "cert-manager.io",
            },
        },
    }


def endpoint_url(spec: InferenceServiceSpec) -> str:
    """Where client applications send V2 requests (with their ServiceAccount token)."""
    return f"https://{endpoint_service_name(spec)}.{spec.namespace}.svc:{PROXY_PORT}"


def grpc_endpoint(spec: InferenceServiceSpec) -> str:
    """Where client applications send V2 gRPC calls (TLS, ``authorization`` metadata)."""
    return f"{endpoint_service_name(spec)}.{spec.namespace}.svc:{GRPC_PROXY_PORT}"


def model_grpc_port(spec: InferenceServiceSpec) -> int:
    return TRITON_GRPC_PORT if spec.pool.has_gpus else PREDICTOR_GRPC_PORT


def model_resources(spec: InferenceServiceSpec) -> dict[str, dict[str, str]]:
    """Requests equal to limits (Guaranteed QoS), sized from the pool."""
    amounts = {"cpu": f"{spec.cpu}m", "memory": f"{spec.memory}Mi"}
    if spec.gpus:
        amounts[GPU_RESOURCE] = str(spec.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def proxy_config(spec: InferenceServiceSpec) -> str:
    """kube-rbac-proxy's authorisation: the caller needs the HTTP verb's RBAC verb (POST
    -> create, GET -> get) on ``inferenceservices/proxy`` named after this service."""
    return (
        "authorization:\n"
        "  resourceAttributes:\n"
        f"    namespace: {spec.namespace}\n"
        "    apiGroup: serving.kserve.io\n"
        "    apiVersion: v1beta1\n"
        "    resource: inferenceservices\n"
        f"    subresource: {PROXY_SUBRESOURCE}\n"
        f"    name: {spec.name}\n"
    )


def proxy_configmap(spec: InferenceServiceSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(spec, f"{spec.name}-auth"),
        "data": {PROXY_CONFIG_FILE: proxy_config(spec)},
    }


def proxy_container(
    spec: InferenceServiceSpec, image: str, upstream_port: int = MODEL_SERVER_PORT
) -> dict[str, Any]:
    """The kube-rbac-proxy sidecar in front of the model server's REST port (or of
    KServe's agent, ``upstream_port``, when the logger is on)."""
    return _proxy(
        "kube-rbac-proxy", image, (PROXY_PORT, "https"), (PROXY_HEALTH_PORT, "proxy-health"),
        f"http://127.0.0.1:{upstream_port}/", [],
    )  # fmt: skip


def grpc_proxy_container(spec: InferenceServiceSpec, image: str) -> dict[str, Any]:
    """The kube-rbac-proxy sidecar in front of the model server's gRPC port: TLS with
    HTTP/2 to the client, cleartext HTTP/2 (h2c) to the server on the pod's loopback."""
    return _proxy(
        "kube-rbac-proxy-grpc", image, (GRPC_PROXY_PORT, "grpcs"),
        (GRPC_PROXY_HEALTH_PORT, "grpc-health"), f"http://127.0.0.1:{model_grpc_port(spec)}/",
        ["--upstream-force-h2c"],
    )  # fmt: skip


def _proxy(  # noqa: PLR0917  (each proxy's six facts, named at the two call sites)
    name: str,
    image: str,
    listen: tuple[int, str],
    health: tuple[int, str],
    upstream: str,
    extra: list[str],
) -> dict[str, Any]:
    (port, port_name), (health_port, health_name) = listen, health
    return {
        "name": name,
        "image": image,
        "args": [
            f"--secure-listen-address=0.0.0.0:{port}",
            f"--upstream={upstream}",
            *extra,
            f"--config-file={PROXY_CONFIG_PATH}/{PROXY_CONFIG_FILE}",
            f"--proxy-endpoints-port={health_port}",
            # cert-manager's certificate; the proxy reloads it when it is renewed.
            f"--tls-cert-file={TLS_PATH}/tls.crt",
            f"--tls-private-key-file={TLS_PATH}/tls.key",
            # TLS 1.3 only: every client of the endpoint (tritonclient, httpx, curl,
            # Go) speaks it, and it leaves no weak cipher suite to choose.
            "--tls-min-version=VersionTLS13",
        ],
        "ports": [
            {"name": port_name, "containerPort": port, "protocol": "TCP"},
            {"name": health_name, "containerPort": health_port, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": health_port, "scheme": "HTTPS"}},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": health_port, "scheme": "HTTPS"},
            "periodSeconds": 20,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "securityContext": restricted_container_security(),
        "volumeMounts": [
            {"name": "auth-config", "mountPath": PROXY_CONFIG_PATH, "readOnly": True},
            {"name": "endpoint-tls", "mountPath": TLS_PATH, "readOnly": True},
        ],
    }


def _labels(spec: InferenceServiceSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": spec.name,
        "app.kubernetes.io/part-of": "gpuplatform",
        MODEL_LABEL: spec.model_name,
    }


def _meta(spec: InferenceServiceSpec, name: str) -> dict[str, Any]:
    """The metadata of one of the InferenceService's objects: ``name``, in its namespace,
    with its labels."""
    return {"name": name, "namespace": spec.namespace, "labels": _labels(spec)}


def _model(spec: InferenceServiceSpec, version: ModelVersion) -> dict[str, Any]:
    return {
        # KServe's name for the model server container (the canary's CRD schema
        # requires a name; KServe merges it with the runtime's container of that name).
        "name": "kserve-container",
        "modelFormat": {"name": spec.model_format},
        "runtime": spec.runtime,
        "storageUri": spec.storage_uri(version),
        "resources": model_resources(spec),
        "securityContext": restricted_container_security(),
    }


def _placement(spec: InferenceServiceSpec) -> dict[str, Any]:
    """On the chosen pool only, tolerating exactly its taints (GPU, fabric)."""
    placement: dict[str, Any] = {"nodeSelector": dict(sorted(spec.pool.labels.items()))}
    if spec.pool.taints:
        placement["tolerations"] = [toleration(t) for t in spec.pool.taints]
    return placement


def inference_service_manifest(
    spec: InferenceServiceSpec, proxy_image: str, drift: DriftImages | None = None
) -> dict[str, Any]:
    """The InferenceService, stable predictor and (optional) canary; with ``drift``, the
    request logger feeding the drift service."""
    annotations = {DEPLOYMENT_MODE_ANNOTATION: DEPLOYMENT_MODE}
    # Held: KServe keeps the object but runs no pods until the annotation goes.
    annotations[STOP_ANNOTATION] = "false" if spec.released else "true"
    predictor: dict[str, Any] = {
        "name": spec.model.predictor_name,
        "minReplicas": spec.min_replicas,
        "maxReplicas": spec.max_replicas,
        "serviceAccountName": spec.service_account,
        # EKS Pod Identity and kube-rbac-proxy both authenticate with the token.
        "automountServiceAccountToken": True,
        # KServe gives the component's annotations to its pods.
        "annotations": scanner_exceptions({"CKV_K8S_38": KUBE_RBAC_PROXY_TOKEN}),
        "securityContext": restricted_pod(RUN_AS_USER),
        **_placement(spec),
        "labels": {VERSION_LABEL: str(spec.model.version)},
        "model": _model(spec, spec.model),
        "containers": [
            proxy_container(spec, proxy_image, AGENT_PORT if drift else MODEL_SERVER_PORT),
            grpc_proxy_container(spec, proxy_image),
        ],
        "volumes": [
            {"name": "auth-config", "configMap": {"name": f"{spec.name}-auth"}},
            {"name": "endpoint-tls", "secret": {"secretName": tls_secret_name(spec)}},
        ],
    }
    if drift is not None:
        predictor["logger"] = logger_spec(spec)
        predictor["annotations"][VERSION_ANNOTATION] = str(spec.model.version)
    isvc_spec: dict[str, Any] = {"predictor": predictor}
    if spec.canary is not None:
        isvc_spec["canary"] = [
            {
                "trafficPercent": spec.canary_traffic_percent,
                # Merged over the stable predictor by KServe: only what differs.
                "predictor": {
                    "name": spec.canary.predictor_name,
                    "labels": {VERSION_LABEL: str(spec.canary.version)},
                    **(
                        {"annotations": {VERSION_ANNOTATION: str(spec.canary.version)}}
                        if drift is not None
                        else {}
                    ),
                    "model": _model(spec, spec.canary),
                },
            }
        ]
    return {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": {**_meta(spec, spec.name), "annotations": annotations},
        "spec": isvc_spec,
    }


def endpoint_service(spec: InferenceServiceSpec) -> dict[str, Any]:
    """The authenticated endpoint over all predictor pods (stable and canary)."""
    return cluster_ip_service(
        endpoint_service_name(spec),
        spec.namespace,
        {ISVC_POD_LABEL: spec.name, COMPONENT_LABEL: "predictor"},
        [("https", PROXY_PORT), ("grpcs", GRPC_PROXY_PORT)],
        labels=_labels(spec),
    )


def network_policy(spec: InferenceServiceSpec) -> dict[str, Any]:
    """Only the client namespaces reach the proxy; only monitoring reaches the metrics
    ports (the team namespace's default-deny policy keeps everything else out)."""
    metrics_port = TRITON_METRICS_PORT if spec.pool.has_gpus else MODEL_SERVER_PORT
    return netpol.allow_ingress_rules(
        spec.namespace,
        f"{spec.name}-clients",
        [
            (
                [netpol.namespaces_peer(sorted(spec.client_namespaces))],
                netpol.tcp(PROXY_PORT, GRPC_PROXY_PORT),
            ),
            ([netpol.namespaces_peer([MONITORING_NAMESPACE])], netpol.tcp(metrics_port)),
        ],
        pod_labels={ISVC_POD_LABEL: spec.name},
        labels=_labels(spec),
    )


def client_egress_policies(spec: InferenceServiceSpec) -> list[dict[str, Any]]:
    """In each client namespace other than the service's own: egress to the endpoint's
    pods on the proxy port (team namespaces deny all egress by default). The client
    namespaces must exist before the service is deployed."""
    endpoint = {
        **netpol.namespaces_peer([spec.namespace]),
        "podSelector": netpol.pods({ISVC_POD_LABEL: spec.name}),
    }
    return [
        netpol.allow_egress(
            ns,
            f"allow-egress-to-{spec.name}",
            [endpoint],
            netpol.tcp(PROXY_PORT, GRPC_PROXY_PORT),
            labels=_labels(spec),
        )
        for ns in sorted(spec.client_namespaces)
        if ns != spec.namespace
    ]


def caller_role(spec: InferenceServiceSpec) -> dict[str, Any]:
    calling = {
        "apiGroups": ["serving.kserve.io"],
        "resources": [f"inferenceservices/{PROXY_SUBRESOURCE}"],
        "resourceNames": [spec.name],
        # POST (infer) maps to create, GET (ready, metadata) to get.
        "verbs": ["create", "get"],
    }
    return rbac.role(_meta(spec, f"{spec.name}-caller"), [calling])


def caller_binding(spec: InferenceServiceSpec) -> dict[str, Any]:
    """Every ServiceAccount of each client namespace may call the endpoint."""
    callers = rbac.service_accounts_of(sorted(spec.client_namespaces))
    return rbac.role_binding(_meta(spec, f"{spec.name}-callers"), f"{spec.name}-caller", callers)


def inference_service_manifests(
    spec: InferenceServiceSpec, proxy_image: str, drift: DriftImages | None = None
) -> list[dict[str, Any]]:
    """Every object of the served model, in apply order; with ``drift``, its drift
    service (before the InferenceService, whose logger sends to it)."""
    return [
        proxy_configmap(spec),
        endpoint_certificate(spec),
        caller_role(spec),
        caller_binding(spec),
        network_policy(spec),
        *client_egress_policies(spec),
        endpoint_service(spec),
        *(drift_manifests(spec, drift) if drift is not None else []),
        inference_service_manifest(spec, proxy_image, drift),
    ]
