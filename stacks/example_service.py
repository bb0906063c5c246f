"""The bundled example model service every shipped stack deploys, stopped until released."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.platform.component import KubernetesPlatform
from modules.k8s.serving.inference_service.component import InferenceService
from modules.k8s.serving.inference_service.drift import DriftImages
from modules.k8s.serving.inference_service.spec import InferenceServiceSpec, ModelVersion
from modules.k8s.serving.spec import ServingSpec
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError

from .config import PROJECT, ExampleServiceSpec
from .config_parsing import ConfigError

#: The spec's field -> the key a user writes under ``exampleService``.
_KEYS = {
    "model.storage_path": "storagePath",
    "model.version": "modelVersion",
    "canary.storage_path": "canaryStoragePath",
    "canary.version": "canaryVersion",
    "canary_traffic_percent": "canaryTrafficPercent",
    "client_namespaces": "clientNamespaces",
    "min_replicas": "minReplicas",
    "max_replicas": "maxReplicas",
    "model_name": "modelName",
}


def example_service_spec(
    service: ExampleServiceSpec,
    pools: tuple[NodePoolProfile, ...],
    platform: KubernetesPlatform,
    bucket: pulumi.Input[str] | None,
) -> InferenceServiceSpec:
    """The example's typed spec; its problems become config problems (``exampleService``).

    Args:
        service: the ``exampleService`` section.
        pools: the stack's node pools.
        platform: the Kubernetes layer (team placements).
        bucket: the data bucket's name on AWS; ``None`` on premises, where the models
            are on the team's volume claim.
    """
    pool = next(p for p in pools if p.name == service.pool)
    placement = platform.placements[service.team]
    canary = None
    if service.canary_version is not None and service.canary_storage_path is not None:
        canary = ModelVersion(service.canary_version, service.canary_storage_path)
    try:
        return InferenceServiceSpec(
            name=f"example-{service.model_name}"[:36].rstrip("-"),
            namespace=placement.namespace,
            model_name=service.model_name,
            model=ModelVersion(service.model_version, service.storage_path),
            pool=pool,
            client_namespaces=service.client_namespaces or (placement.namespace,),
            store="s3" if bucket is not None else "pvc",
            bucket=bucket,
            claim=None if bucket is not None else placement.checkpoint_claim,
            min_replicas=service.min_replicas,
            max_replicas=service.max_replicas,
            canary=canary,
            canary_traffic_percent=service.canary_traffic_percent,
            released=service.released,
        )
    except InvalidArgsError as err:
        raise ConfigError(
            [
                p.describe(f"{PROJECT}:exampleService.{_KEYS.get(p.field, p.field)}")
                for p in err.problems
            ]
        ) from None


def build_example_service(
    service: ExampleServiceSpec,
    serving: ServingSpec,
    pools: tuple[NodePoolProfile, ...],
    platform: KubernetesPlatform,
    *,
    provider: k8s.Provider,
    bucket: pulumi.Input[str] | None,
    region: str | None = None,
) -> InferenceService:
    """Deploy the example service in its team's namespace, stopped unless released, with
    its drift service (fed by KServe's request logger; ``region``: the data bucket's)."""
    spec = example_service_spec(service, pools, platform, bucket)
    return InferenceService(
        "example-service",
        spec,
        serving.rbac_proxy_image,
        provider,
        depends_on=[*platform.serving_ready, *platform.team_ready[service.team]],
        drift=DriftImages(serving.predictor_image, serving.storage_initializer_image, region),
    )
