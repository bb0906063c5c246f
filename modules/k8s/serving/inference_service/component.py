"""`InferenceService`: a served model's Kubernetes objects as one Pulumi component.

The component only registers what `manifests.inference_service_manifests` decides,
each object through the cluster's explicit Kubernetes provider.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from modules.k8s.common import resource_name
from modules.k8s.objects import KubernetesObject
from modules.k8s.serving.inference_service.drift import DriftImages
from modules.k8s.serving.inference_service.manifests import (
    endpoint_url,
    grpc_endpoint,
    inference_service_manifests,
)
from modules.k8s.serving.inference_service.spec import InferenceServiceSpec

TYPE_TOKEN = "gpuplatform:workloads:InferenceService"


class InferenceService(pulumi.ComponentResource):
    """A registered model version served by KServe on one node pool.

    Args:
        resource_name_: the component's Pulumi name (children are named after it).
        spec: the validated service description.
        proxy_image: the kube-rbac-proxy image in the in-region registry.
        provider: the cluster's Kubernetes provider (default providers are disabled).
        depends_on: what must exist first (KServe, its runtimes, the team namespace).
        drift: the drift service's images: with them, the request logger feeds a drift
            service (`drift`); without, no drift is measured.
        opts: options of the component itself.

    Outputs: ``name``, ``namespace``, ``endpoint`` (HTTPS), ``grpc_endpoint`` (gRPC, TLS).
    """

    def __init__(
        self,
        resource_name_: str,
        spec: InferenceServiceSpec,
        proxy_image: str,
        provider: pulumi.ProviderResource,
        *,
        depends_on: Sequence[pulumi.Resource] = (),
        drift: DriftImages | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(TYPE_TOKEN, resource_name_, None, opts)
        self.objects: list[KubernetesObject] = []
        for manifest in inference_service_manifests(spec, proxy_image, drift):
            self.objects.append(
                KubernetesObject(
                    f"{resource_name_}-{resource_name(manifest)}",
                    manifest,
                    pulumi.ResourceOptions(
                        parent=self, provider=provider, depends_on=list(depends_on)
                    ),
                )
            )
        self.name = pulumi.Output.from_input(spec.name)
        self.namespace = pulumi.Output.from_input(spec.namespace)
        self.endpoint = pulumi.Output.from_input(endpoint_url(spec))
        self.grpc_endpoint = pulumi.Output.from_input(grpc_endpoint(spec))
        self.register_outputs(
            {
                "name": self.name,
                "namespace": self.namespace,
                "endpoint": self.endpoint,
                "grpc_endpoint": self.grpc_endpoint,
            }
        )
