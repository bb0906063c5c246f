"""Composition of the LLM gateway (``uae-gpu-platform:llmGateway``, docs/llm-gateway.md).

The teams' API keys are derived from one secret config value, ``llmGatewayApiKeySeed``
(`modules.k8s.gateway.spec.api_key`), inside ``apply``: they exist only as Pulumi
secrets (in the cluster's Secret and the stack output ``llmGatewayApiKeys``), never in
the stack file or the plan.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.gateway import spec as gs
from modules.k8s.gateway.component import GatewayInputs, LlmGateway
from modules.k8s.llm.spec import LLMBackend
from modules.k8s.names import team_namespace
from modules.k8s.netpol import ClusterNetwork

from .config import StackConfig
from .config_parsing import ConfigError
from .secrets import required_secret

#: The secret config value the teams' API keys are derived from.
KEY_SEED_SECRET = "llmGatewayApiKeySeed"
ENDPOINT_OUTPUT = "llmGatewayEndpoint"
KEYS_OUTPUT = "llmGatewayApiKeys"


def build_llm_gateway(
    config: StackConfig,
    provider: k8s.Provider,
    *,
    backends: Sequence[LLMBackend],
    network: ClusterNetwork,
    storage_class: str,
    eks: bool,
    depends_on: list[pulumi.Resource],
    registry: str | None = None,
) -> LlmGateway:
    """The gateway in front of ``backends`` (one per model; the LLM services'), with a
    key per team of the section. Exports the endpoint and the keys (secret).
    ``registry``: on AWS the stack's ECR the gateway's images are mirrored in (on
    premises the section names its own)."""
    spec = config.llm_gateway
    assert spec is not None  # the caller checks
    if registry is not None:
        spec = replace(spec, registry=registry)
    problems = gs.backend_problems(spec, backends)
    if problems:
        raise ConfigError([f"llmGateway: {p}" for p in problems])
    served = {b.model for b in backends}
    for model in spec.models:
        if model not in served:
            # Until the LLM service of the model exists, no route leads to it (404).
            pulumi.log.warn(f"llmGateway: no LLM service serves model {model}: no route to it")
    seed = required_secret(
        KEY_SEED_SECRET,
        "the secret the LLM gateway's per-team API keys are derived from",
        "remove the llmGateway section",
    )
    keys: dict[str, pulumi.Input[str]] = {
        team.team: pulumi.Output.secret(
            seed.apply(
                functools.partial(gs.api_key, team=team.team, generation=team.key_generation)
            )
        )
        for team in spec.teams
    }
    gateway = LlmGateway(
        "llm-gateway",
        GatewayInputs(
            spec=spec,
            backends=tuple(backends),
            api_keys=keys,
            counters_password=pulumi.Output.secret(seed.apply(gs.counters_password)),
            network=network,
            client_namespaces=tuple(team_namespace(t.team) for t in spec.teams),
            storage_class=storage_class,
            kubernetes_version=config.kubernetes_version,
            eks=eks,
        ),
        provider,
        pulumi.ResourceOptions(depends_on=depends_on),
        pki_ready=depends_on,
        monitoring_ready=depends_on,
    )
    pulumi.export(ENDPOINT_OUTPUT, gateway.endpoint)
    pulumi.export(KEYS_OUTPUT, pulumi.Output.secret(keys))
    return gateway
