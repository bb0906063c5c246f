"""Composition of LLM serving (``uae-gpu-platform:llm``, docs/llm-cluster.md).

`build_llm_aws` adds the LLM images' ECR repositories; `build_llm` places each model
(its pool's profile, its team's namespace, its weights' URI in the stack's own store)
and declares `modules.k8s.llm.component.LLMServing`. A model's problems with its pool
(too many GPUs for a node, a CPU pool asked for GPUs) become config problems here,
once the pools' profiles are known, each one line naming the key to fix.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.llm.component import LLMInputs, LLMServing
from modules.k8s.llm.spec import LLM_MIRRORED_IMAGES, LLMModelSpec, LLMServiceSpec
from modules.k8s.names import TeamPlacement
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.serving.spec import ServingSpec
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError

from .config import PROJECT, StackConfig
from .config_parsing import ConfigError, stack_key
from .workload_aws import WorkloadAws


def build_llm_aws(config: StackConfig, aws: WorkloadAws) -> None:
    """One ECR repository per image the LLM layer pulls (`LLM_MIRRORED_IMAGES`)."""
    if config.llm is None:
        return
    aws.mirror(LLM_MIRRORED_IMAGES)


def model_source(
    model: LLMModelSpec, bucket: pulumi.Input[str] | None, placement: TeamPlacement
) -> pulumi.Input[str]:
    """The weights' URI: ``source`` as written, else ``storagePath`` in the stack's own
    store: the data bucket on AWS, the team's volume claim on premises."""
    if model.source is not None:
        return model.source
    assert model.storage_path is not None  # LLMModelSpec: exactly one of the two
    path = model.storage_path.strip("/")
    if bucket is not None:
        return pulumi.Output.concat("s3://", bucket, "/", path)
    return f"pvc://{placement.checkpoint_claim}/{path}"


def llm_services(
    config: StackConfig,
    pools: tuple[NodePoolProfile, ...],
    placements: dict[str, TeamPlacement],
    bucket: pulumi.Input[str] | None,
) -> tuple[LLMServiceSpec, ...]:
    """Each model, placed; every problem of every model at once (`ConfigError`)."""
    assert config.llm is not None
    by_name = {p.name: p for p in pools}
    gateway_host = config.llm_gateway.hostname if config.llm_gateway is not None else ""
    services: list[LLMServiceSpec] = []
    problems: list[str] = []
    for i, model in enumerate(config.llm.models):
        placement = placements[model.team]
        try:
            services.append(
                LLMServiceSpec(
                    model=model,
                    pool=by_name[model.pool],
                    namespace=placement.namespace,
                    source=model_source(model, bucket, placement),
                    gateway_host=gateway_host if not by_name[model.pool].has_gpus else "",
                )
            )
        except InvalidArgsError as err:
            problems += [
                p.describe(f"{PROJECT}:" + stack_key(f"llm.models[{i}].{p.field}"))
                for p in err.problems
            ]
    if problems:
        raise ConfigError(problems)
    return tuple(services)


def build_llm(
    config: StackConfig,
    provider: k8s.Provider,
    *,
    serving: ServingSpec,
    pools: tuple[NodePoolProfile, ...],
    placements: dict[str, TeamPlacement],
    bucket: pulumi.Input[str] | None,
    network: ClusterNetwork,
    depends_on: list[pulumi.Resource],
) -> LLMServing:
    """The LLM layer: images from the serving registry (the stack's ECR on AWS, the
    site's registry on premises), after the platform (KServe, team namespaces)."""
    assert config.llm is not None and serving.registry is not None
    inputs = LLMInputs(
        spec=config.llm,
        services=llm_services(config, pools, placements, bucket),
        registry=serving.registry,
        storage_initializer=serving.storage_initializer_image,
        kubernetes_version=config.kubernetes_version,
        network=network,
        provider=provider,
        depends_on=depends_on,
    )
    return LLMServing("llm", inputs)
