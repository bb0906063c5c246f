"""Model serving settings and the pinned parts it installs (KServe, images).

`ServingSpec` is the ``uae-gpu-platform:serving`` section. The charts and images are
pinned here, one place to bump: versions were checked against the upstream releases
(KServe v0.20.0 charts ``kserve-crd`` and ``kserve-resources``, metrics-server chart
3.13.1, kube-rbac-proxy v0.18.0; the values this layer sets are each present in those
charts' ``values.yaml`` at the pinned tags). cert-manager and the cluster CA, which
issue the webhooks' and endpoints' certificates, are the platform's PKI
(`modules.k8s.pki.spec`); its images are mirrored with these.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.k8s.mirror import mirror_image
from modules.k8s.names import CLUSTER_CA_ISSUER
from modules.k8s.versions import Chart
from modules.validation import Checker, bounded

KSERVE_VERSION = "v0.20.0"
#: KServe's charts are OCI artifacts (its install guide: ``helm install kserve-crd
#: oci://ghcr.io/kserve/charts/kserve-crd --version v0.20.0``). Since v0.16 the former
#: ``kserve`` chart is ``kserve-resources`` (controller, webhooks, inferenceservice-config).
KSERVE_CRD = Chart("oci://ghcr.io/kserve/charts/kserve-crd", KSERVE_VERSION)
KSERVE = Chart("oci://ghcr.io/kserve/charts/kserve-resources", KSERVE_VERSION)
#: KServe's HPAs (RawDeployment autoscaling on CPU) read the resource metrics API.
METRICS_SERVER = Chart(
    "metrics-server", "3.13.1", "https://kubernetes-sigs.github.io/metrics-server/"
)

#: kube-rbac-proxy authenticates and authorises every request to an inference service
#: (TokenReview + SubjectAccessReview). The tag is the one KServe v0.20.0's chart pins for
#: its own controller, so one mirrored image serves both.
KUBE_RBAC_PROXY_TAG = "v0.18.0"
#: Triton release mirrored for ONNX models on GPU pools (NGC tag ``YY.MM-py3``).
DEFAULT_TRITON_TAG = "25.09-py3"

KSERVE_NAMESPACE = "kserve"
#: Runtimes every team namespace can use (cluster-wide ServingRuntimes).
CPU_RUNTIME = "uae-cpu-predictor"
TRITON_RUNTIME = "uae-triton"
#: Model format names the runtimes declare; an InferenceService names one of them.
CPU_MODEL_FORMAT = "uae-gpt"
ONNX_MODEL_FORMAT = "onnx"
#: cert-manager issuer of the inference endpoints' TLS certificates: the cluster CA (its
#: certificate is the ``ca.crt`` of every endpoint's TLS secret).
SERVING_CA_ISSUER = CLUSTER_CA_ISSUER
#: ServiceAccount of inference pods in each team namespace; on EKS the AWS side binds
#: ``<team namespace>/inference`` to a read-only role on the model artifacts.
INFERENCE_SERVICE_ACCOUNT = "inference"


#: The alert thresholds that lie above zero, up to a ceiling: field -> (ceiling, what is
#: allowed, as the problem says it).
_ABOVE_ZERO = {
    "drift_token_js_threshold": (1, "a Jensen-Shannon distance in (0, 1]"),
    "drift_prompt_length_psi_threshold": (
        10,
        "a PSI in (0, 10]; 0.1 is a moderate and 0.2 a significant shift",
    ),
    "error_rate_percent": (100, "a percentage in (0, 100]"),
    "latency_p99_seconds": (600, "seconds in (0, 600]"),
}


@dataclass(frozen=True)
class ServingSpec:
    """Model serving (config key ``uae-gpu-platform:serving``): KServe in RawDeployment
    (``Standard``) mode with a CPU predictor runtime and Triton for GPU pools.

    Args:
        predictor_image_tag: tag of the CPU predictor image (built from this package) in
            the registry (default ``0.1.0``; never ``latest``).
        triton_image_tag: tag of ``nvcr.io/nvidia/tritonserver`` as mirrored into the
            registry (default ``25.09-py3``).
        registry: where every serving image is pulled from, ``host[/path]`` without a
            trailing slash. AWS stacks leave it unset: their own ECR
            (``<account>.dkr.ecr.<region>.amazonaws.com/gpu-<stack>``) is used, with one
            repository per image. Required on premises (the site's registry).
        api_server_cidrs: more addresses of the Kubernetes API server, which the
            endpoints' kube-rbac-proxy calls to check tokens, besides the cluster's own
            (the VPC on EKS, ``onprem.apiServerCidrs`` on premises); default none.
        drift_token_js_threshold: Jensen-Shannon distance of the live token distribution
            from the training reference above which drift alerts (default 0.1).
        drift_prompt_length_psi_threshold: population stability index of prompt lengths
            above which drift alerts (default 0.2, the usual "significant shift").
        drift_minutes: how long a drift score must stay above its threshold before
            ``ModelInputDrift`` fires (default 30).
        error_rate_percent: share of 5xx answers over 10 minutes that raises
            ``InferenceServiceErrors`` (default 5).
        latency_p99_seconds: p99 latency over 10 minutes that raises
            ``InferenceServiceSlow`` (default 2.0).
        install_metrics_server: install metrics-server (the resource metrics API the
            inference services' HPAs scale on; default true). Set false where the
            cluster already runs one.
    """

    predictor_image_tag: str = "0.1.0"
    triton_image_tag: str = DEFAULT_TRITON_TAG
    registry: str | None = None
    api_server_cidrs: tuple[str, ...] = ()
    drift_token_js_threshold: float = 0.1
    drift_prompt_length_psi_threshold: float = 0.2
    drift_minutes: int = bounded(5, 1440, default=30)
    error_rate_percent: float = 5.0
    latency_p99_seconds: float = 2.0
    install_metrics_server: bool = True

    def __post_init__(self) -> None:
        check = Checker()
        for name in ("predictor_image_tag", "triton_image_tag"):
            check.fixed_image_tag(name, getattr(self, name))
        check.registry("registry", self.registry)
        check.cidrs("api_server_cidrs", self.api_server_cidrs)
        for name, (ceiling, expected) in _ABOVE_ZERO.items():
            value = getattr(self, name)
            check.require(0 < value <= ceiling, name, value, expected)
        check.ranges(self)
        check.done()

    def image(self, repository: str, tag: str) -> str:
        """``<registry>/<repository>:<tag>``; the registry must be resolved by then."""
        return mirror_image(self.registry, "serving", repository, tag)

    @property
    def predictor_image(self) -> str:
        return self.image("predictor", self.predictor_image_tag)

    @property
    def triton_image(self) -> str:
        return self.image("tritonserver", self.triton_image_tag)

    @property
    def rbac_proxy_image(self) -> str:
        return self.image("kube-rbac-proxy", KUBE_RBAC_PROXY_TAG)

    @property
    def storage_initializer_image(self) -> str:
        """KServe's storage initializer at the installed release (the drift services
        fetch their references with it, as KServe fetches models)."""
        return self.image("kserve-storage-initializer", KSERVE_VERSION)


#: Every image repository the serving layer pulls from ``ServingSpec.registry``, with
#: the upstream image it mirrors (the AWS side creates one ECR repository each).
MIRRORED_IMAGES: dict[str, str] = {
    "predictor": "built from workloads/ (this package's CPU predictor)",
    "tritonserver": "nvcr.io/nvidia/tritonserver",
    "kube-rbac-proxy": "quay.io/brancz/kube-rbac-proxy",
    "kserve-controller": "docker.io/kserve/kserve-controller",
    "kserve-storage-initializer": "docker.io/kserve/storage-initializer",
    "kserve-agent": "docker.io/kserve/agent",
    "kserve-router": "docker.io/kserve/router",
    "cert-manager-controller": "quay.io/jetstack/cert-manager-controller",
    "cert-manager-webhook": "quay.io/jetstack/cert-manager-webhook",
    "cert-manager-cainjector": "quay.io/jetstack/cert-manager-cainjector",
    "cert-manager-acmesolver": "quay.io/jetstack/cert-manager-acmesolver",
    "cert-manager-startupapicheck": "quay.io/jetstack/cert-manager-startupapicheck",
    "metrics-server": "registry.k8s.io/metrics-server/metrics-server",
}
