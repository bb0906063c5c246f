"""`LlmGateway`: registers what `modules.k8s.gateway.manifests` builds.

Thin on purpose: every object and value comes from a pure function of the spec (each
validated against its upstream CRD or chart values in tests/k8s/test_gateway.py); this
file orders the installs and sends them through the cluster's provider.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.common import helm_release, register, register_namespace
from modules.k8s.features.spec import VALKEY_CHART
from modules.k8s.gateway import manifests as gm
from modules.k8s.gateway import spec as gs
from modules.k8s.llm.spec import LLMBackend
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.objects import KubernetesObject
from modules.k8s.versions import Chart


@dataclass(frozen=True)
class GatewayInputs:
    """What the gateway needs from the stack.

    Args:
        spec: the ``llmGateway`` section.
        backends: one in-cluster backend per model (from the LLM services).
        api_keys: team -> its API key, each a Pulumi secret.
        counters_password: the rate limit counters' password (a Pulumi secret).
        network: where the API server and the nodes (and so the load balancer) are.
        client_namespaces: the namespaces whose pods may call the gateway.
        storage_class: the counters' volume's storage class.
        kubernetes_version: the cluster's minor version (namespaces' Pod Security).
        eks: True on EKS (the internal NLB's annotations).
    """

    spec: gs.LlmGatewaySpec
    backends: tuple[LLMBackend, ...]
    api_keys: Mapping[str, pulumi.Input[str]]
    counters_password: pulumi.Input[str]
    network: ClusterNetwork
    client_namespaces: tuple[str, ...]
    storage_class: str
    kubernetes_version: str
    eks: bool


class LlmGateway(pulumi.ComponentResource):
    """Envoy Gateway, Envoy AI Gateway, the rate limit counters and the one Gateway of
    the LLM services, with its keys, limits, routes, fences and monitoring.

    Attributes:
        endpoint: the OpenAI base URL teams call (``https://<hostname>/v1``).
    """

    def __init__(
        self,
        name: str,
        inputs: GatewayInputs,
        provider: k8s.Provider,
        opts: pulumi.ResourceOptions | None = None,
        *,
        pki_ready: Sequence[pulumi.Resource] = (),
        monitoring_ready: Sequence[pulumi.Resource] = (),
    ) -> None:
        super().__init__("gpuplatform:k8s:LlmGateway", name, None, opts)
        spec, backends, version = inputs.spec, inputs.backends, inputs.kubernetes_version
        controller_ns = register_namespace(
            gm.CONTROLLER_NS.manifest(version),
            gm.controller_network_policies(
                spec, backends, inputs.network, inputs.client_namespaces
            ),
            self,
            provider,
        )
        ai_ns = register_namespace(
            gm.AI_GATEWAY_NS.manifest(version),
            gm.ai_gateway_network_policies(inputs.network),
            self,
            provider,
        )
        gateway_ns = register_namespace(
            gm.GATEWAY_NS.manifest(version), gm.gateway_namespace_policies(), self, provider
        )
        for policy in gm.backend_ingress_policies(spec, backends):
            register(policy, self, provider)
        for policy in gm.client_egress_policies(inputs.client_namespaces):
            register(policy, self, provider)

        def install(
            release: str,
            chart: Chart,
            namespace: str,
            values: Mapping[str, Any],
            after: Sequence[pulumi.Resource],
        ) -> k8s.helm.v3.Release:
            return helm_release(
                release,
                chart,
                namespace,
                values=values,
                parent=self,
                provider=provider,
                depends_on=after,
            )

        eg_crds = install(
            gs.ENVOY_GATEWAY_CRDS_RELEASE,
            gs.ENVOY_GATEWAY_CRDS,
            gs.CONTROLLER_NAMESPACE,
            gm.crds_values(),
            controller_ns,
        )
        # The counters' certificates and password before the counters and their client.
        counters_secrets = [
            register(m, self, provider, depends_on=[*controller_ns, *pki_ready])
            for m in gm.counters_certificates()
        ]
        counters_secrets.append(
            register(
                gm.counters_users_secret(inputs.counters_password),
                self,
                provider,
                depends_on=controller_ns,
            )
        )
        counters = install(
            gs.COUNTERS_RELEASE,
            VALKEY_CHART,
            gs.CONTROLLER_NAMESPACE,
            gm.counters_values(spec, inputs.storage_class),
            [*controller_ns, *counters_secrets],
        )
        ai_crds = install(
            gs.AI_GATEWAY_CRDS_RELEASE, gs.AI_GATEWAY_CRDS, gs.AI_GATEWAY_NAMESPACE, {}, ai_ns
        )
        # The CRD chart owns the CRDs: the controller chart's own copies are skipped, as
        # Envoy Gateway's install guide does with --skip-crds.
        envoy_gateway = k8s.helm.v3.Release(
            f"helm-{gs.ENVOY_GATEWAY_RELEASE}",
            k8s.helm.v3.ReleaseArgs(
                name=gs.ENVOY_GATEWAY_RELEASE,
                chart=gs.ENVOY_GATEWAY.chart,
                version=gs.ENVOY_GATEWAY.version,
                namespace=gs.CONTROLLER_NAMESPACE,
                create_namespace=False,
                skip_crds=True,
                values=gm.envoy_gateway_values(spec),
                atomic=True,
                cleanup_on_fail=True,
                timeout=900,
            ),
            pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=[*controller_ns, eg_crds, counters]
            ),
        )
        ai_gateway = install(
            gs.AI_GATEWAY_RELEASE,
            gs.AI_GATEWAY,
            gs.AI_GATEWAY_NAMESPACE,
            gm.ai_gateway_values(spec),
            [*ai_ns, ai_crds, envoy_gateway, *pki_ready],
        )
        keys: KubernetesObject = register(
            gm.api_keys_secret(inputs.api_keys), self, provider, depends_on=gateway_ns
        )
        ready: list[pulumi.Resource] = [*gateway_ns, envoy_gateway, ai_gateway, keys, *pki_ready]
        for manifest in gm.manifests(spec, backends, eks=inputs.eks):
            register(manifest, self, provider, depends_on=ready)
        register(gm.pod_monitor(), self, provider, depends_on=[*controller_ns, *monitoring_ready])
        register(gm.prometheus_rule(spec), self, provider, depends_on=list(monitoring_ready))
        self.endpoint = f"https://{spec.hostname}/v1"
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "envoyGateway": gs.ENVOY_GATEWAY.version,
                "aiGateway": gs.AI_GATEWAY.version,
                "models": [b.model for b in gs.routed_backends(spec, backends)],
            }
        )
