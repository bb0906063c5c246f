"""`LLMServing`: installs what LLM serving runs on (LeaderWorkerSet, KEDA and its HTTP
add-on, KServe's llmisvc controller and CRDs, the platform's restricted presets) and
registers each model's objects, all built by `spec`, `presets` and `manifests`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.component_base import KubernetesComponent, Outputs
from modules.k8s import netpol
from modules.k8s.common import Manifest, helm_release, namespace, register
from modules.k8s.llm import manifests as m
from modules.k8s.llm.network import (
    keda_network_policies,
    lws_network_policies,
    prometheus_from_keda,
)
from modules.k8s.llm.presets import PRESETS, restricted_preset
from modules.k8s.llm.spec import (
    CUDA_IMAGE_TAG,
    KEDA_NAMESPACE,
    LLMISVC,
    LLMISVC_CRD,
    LWS_NAMESPACE,
    LLMBackend,
    LLMServiceSpec,
    LLMSpec,
    upstream_image,
)
from modules.k8s.serving.spec import KSERVE_NAMESPACE
from modules.k8s.versions import KEDA, KEDA_HTTP_ADD_ON, LEADER_WORKER_SET, Chart


@dataclass(frozen=True)
class LLMInputs:
    """What the LLM layer needs from the stack.

    Args:
        spec: the ``llm`` section.
        services: the models, placed (`LLMServiceSpec`).
        registry: where the images are mirrored (``host[/path]``).
        storage_initializer: KServe's storage initializer image (CPU models' weights).
        kubernetes_version: the cluster's minor version (Pod Security labels).
        network: the API server's and nodes' addresses (NetworkPolicies).
        provider: the cluster's provider.
        depends_on: what must exist first (the platform: KServe, the team namespaces,
            the monitoring CRDs, cert-manager).
    """

    spec: LLMSpec
    services: tuple[LLMServiceSpec, ...]
    registry: str
    storage_initializer: str
    kubernetes_version: str
    network: netpol.ClusterNetwork
    provider: k8s.Provider
    depends_on: Sequence[pulumi.Resource] = ()


class LLMServing(KubernetesComponent[LLMInputs]):
    """The LLM layer of a stack; ``backends`` is what the gateway routes to."""

    backends: list[LLMBackend]

    def declare(self, name: str, args: LLMInputs) -> Outputs:
        provider, version, registry = args.provider, args.kubernetes_version, args.registry
        after = list(args.depends_on)

        def put(manifest: Manifest, *waits: pulumi.Resource) -> pulumi.Resource:
            return register(manifest, self, provider, depends_on=[*after, *waits])

        def install(
            release: str, chart: Chart, ns: str, values: Mapping[str, Any], *waits: pulumi.Resource
        ) -> pulumi.Resource:
            return helm_release(
                release,
                chart,
                ns,
                values=values,
                parent=self,
                provider=provider,
                depends_on=[*after, *waits],
            )

        # LeaderWorkerSet: multi-node replicas (KServe makes one per replica group).
        lws_ns = put(namespace(LWS_NAMESPACE, "restricted", version))
        lws_fences = [put(p, lws_ns) for p in lws_network_policies(args.network)]
        lws = install(
            "lws",
            LEADER_WORKER_SET,
            LWS_NAMESPACE,
            m.lws_values(registry, f"v{LEADER_WORKER_SET.version}"),
            lws_ns,
            *lws_fences,
        )
        # KEDA, its HTTP add-on, and KEDA's way into Prometheus (the cluster CA).
        keda_ns = put(namespace(KEDA_NAMESPACE, "restricted", version))
        keda_fences = [
            put(p, keda_ns)
            for p in keda_network_policies(
                args.network,
                args.spec.gateway_namespace,
                sorted({s.namespace for s in args.services}),
            )
        ]
        keda = install("keda", KEDA, KEDA_NAMESPACE, m.keda_values(registry), keda_ns, *keda_fences)
        # The interceptor's TLS listener's certificate (the chart mounts its Secret).
        interceptor_tls = put(m.interceptor_certificate(), keda_ns)
        http = install(
            "keda-add-ons-http",
            KEDA_HTTP_ADD_ON,
            KEDA_NAMESPACE,
            m.http_add_on_values(registry),
            keda,
            interceptor_tls,
        )
        put(prometheus_from_keda())
        # KServe's LLM controller and CRDs, in KServe's namespace; the presets it merges.
        crds = install("kserve-llmisvc-crd", LLMISVC_CRD, KSERVE_NAMESPACE, {})
        controller = install(
            "kserve-llmisvc", LLMISVC, KSERVE_NAMESPACE, m.llmisvc_values(registry), crds, lws
        )
        presets = [
            put(restricted_preset(p, lambda ref: upstream_image(registry, ref)), crds)
            for p in PRESETS
        ]
        services = list(args.services)
        if services:
            for monitor in m.vllm_pod_monitors(services):
                put(monitor)
        cpu_image = f"{registry}/vllm-cpu:{args.spec.cpu_image_tag}"
        cuda_image = upstream_image(registry, f"ghcr.io/llm-d/llm-d-cuda:{CUDA_IMAGE_TAG}")
        # KEDA reads Prometheus with each GPU model namespace's own CA bundle.
        for model_ns in sorted({s.namespace for s in services if s.on_gpus}):
            put(m.keda_trigger_authentication(model_ns), keda)
        for svc in services:
            fences = [
                put(p)
                for p in m.model_network_policies(svc, args.spec.gateway_namespace, args.network)
            ]
            if svc.on_gpus:
                put(m.llm_inference_service(svc, cuda_image), controller, *presets, *fences)
                put(m.gpu_scaled_object(svc), keda)
            else:
                put(m.cpu_service(svc))
                tls = put(m.cpu_certificate(svc))
                put(m.cpu_deployment(svc, cpu_image, args.storage_initializer), tls, *fences)
                put(m.http_scaled_object(svc), http)
        self.backends = [svc.backend() for svc in services]
        return {
            "charts": {
                "lws": LEADER_WORKER_SET.version,
                "keda": KEDA.version,
                "keda-add-ons-http": KEDA_HTTP_ADD_ON.version,
                "kserve-llmisvc": LLMISVC.version,
            },
            "backends": [vars(b) for b in self.backends],
        }
