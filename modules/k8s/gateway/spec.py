"""The LLM gateway's settings and the pinned parts it installs (docs/llm-gateway.md).

One OpenAI-compatible endpoint for every model the cluster serves: Envoy Gateway
programs the Envoy proxies, Envoy AI Gateway (its extension) reads the request's
``model`` field into the ``x-ai-eg-model`` header, routes on it and counts the tokens
of each answer. Pinned here, one place to bump (the versions KServe v0.20.0 builds
against): Envoy Gateway v1.8.1 (charts ``gateway-crds-helm`` and ``gateway-helm``, its
CRDs and Gateway API v1.5.1's standard channel), Envoy AI Gateway v1.0.0 (charts
``ai-gateway-crds-helm`` and ``ai-gateway-helm``). The rate limit service's counters
live in Valkey (the chart the feature store pins).

`LlmGatewaySpec` is the ``uae-gpu-platform:llmGateway`` section: the teams that may
call, the models each may call, their token limits per minute and per month, and the
price per million tokens of each model (the stack owner's chargeback price: a figure
the stack file sets, never one this code invents).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from modules.k8s.features.spec import VALKEY_TAG
from modules.k8s.llm.spec import LLMBackend
from modules.k8s.mirror import mirror_image
from modules.k8s.versions import Chart
from modules.validation import Checker, Problem, TextFormat, bounded

ENVOY_GATEWAY_VERSION = "v1.8.1"
AI_GATEWAY_VERSION = "v1.0.0"
#: Envoy Gateway's install guide: the CRD chart (Gateway API and Envoy Gateway's own
#: CRDs, as Helm templates so that upgrades update them), then the controller chart
#: with ``--skip-crds``.
ENVOY_GATEWAY_CRDS = Chart("oci://docker.io/envoyproxy/gateway-crds-helm", ENVOY_GATEWAY_VERSION)
ENVOY_GATEWAY = Chart("oci://docker.io/envoyproxy/gateway-helm", ENVOY_GATEWAY_VERSION)
#: Envoy AI Gateway's install guide: ``ai-gateway-crds-helm`` then ``ai-gateway-helm``.
AI_GATEWAY_CRDS = Chart("oci://docker.io/envoyproxy/ai-gateway-crds-helm", AI_GATEWAY_VERSION)
AI_GATEWAY = Chart("oci://docker.io/envoyproxy/ai-gateway-helm", AI_GATEWAY_VERSION)
#: The Gateway API release and channel the CRD chart installs (``crds.gatewayAPI``).
GATEWAY_API_VERSION = "v1.5.1"
#: Every image the gateway runs, by repository under the registry it pulls from
#: (`LlmGatewaySpec.registry`, or on AWS the stack's own ECR) -> (upstream image, tag) to
#: mirror it from (docs/llm-gateway.md): Envoy Gateway's controller (also its shutdown
#: manager) and rate limit service and the Envoy proxies it runs, at the tags v1.8.1
#: builds in (``api/v1alpha1/shared_types.go``, vendored); AI Gateway's controller and
#: the external processor it injects into the proxies (the chart's appVersion); Valkey,
#: the rate limit counters (the valkey chart's appVersion). Nothing from outside the
#: country.
MIRRORED_IMAGES: dict[str, tuple[str, str]] = {
    "llm-gateway/envoy-gateway": ("docker.io/envoyproxy/gateway", ENVOY_GATEWAY_VERSION),
    "llm-gateway/ratelimit": ("docker.io/envoyproxy/ratelimit", "ff287602"),
    "llm-gateway/envoy": ("docker.io/envoyproxy/envoy", "distroless-v1.38.1"),
    "llm-gateway/ai-gateway-controller": (
        "docker.io/envoyproxy/ai-gateway-controller",
        AI_GATEWAY_VERSION,
    ),
    "llm-gateway/ai-gateway-extproc": (
        "docker.io/envoyproxy/ai-gateway-extproc",
        AI_GATEWAY_VERSION,
    ),
    "llm-gateway/valkey": ("docker.io/valkey/valkey", VALKEY_TAG),
}
GATEWAY_API_CHANNEL = "standard"

#: Where each part runs. The controllers' namespaces are their install guides' (the AI
#: Gateway chart's ``envoyGateway.namespace`` and its rate limit address name the first);
#: Envoy Gateway runs the proxies and the rate limit service in its own namespace.
CONTROLLER_NAMESPACE = "envoy-gateway-system"
AI_GATEWAY_NAMESPACE = "envoy-ai-gateway-system"
#: The Gateway, its routes, policies, certificate and the teams' keys.
GATEWAY_NAMESPACE = "llm-gateway"
ENVOY_GATEWAY_RELEASE = "eg"
ENVOY_GATEWAY_CRDS_RELEASE = "eg-crds"
AI_GATEWAY_RELEASE = "aieg"
AI_GATEWAY_CRDS_RELEASE = "aieg-crd"
COUNTERS_RELEASE = "llm-gateway-counters"
#: The counters' server certificate, and their one user and its password's Secret.
COUNTERS_TLS_SECRET = "llm-gateway-counters-tls"
COUNTERS_USERS_SECRET = "llm-gateway-counters-users"
COUNTERS_USER = "default"

GATEWAY_CLASS = "gpuplatform-llm"
GATEWAY_NAME = "llm-gateway"
ENVOY_PROXY = "llm-gateway"
ROUTE_NAME = "llm-models"
#: Envoy Gateway's controller name (its chart's ``config.envoyGateway.gateway``).
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
#: The listener: HTTPS on 443. Envoy listens on the port plus 10000 in its container
#: (Envoy Gateway's mapping of privileged ports), which the NetworkPolicy names.
LISTENER_PORT = 443
PROXY_CONTAINER_PORT = 10443
#: The header AI Gateway writes the request's model into and routes on.
MODEL_HEADER = "x-ai-eg-model"
#: The header the API key check writes the caller's team into (the key's client id).
#: Removed from every request first, so a caller cannot name another team.
TEAM_HEADER = "x-gpuplatform-team"
#: The Prometheus label AI Gateway's metrics carry the team in (``team.id`` as an
#: OpenTelemetry attribute, ``gpuplatform_team`` once exported to Prometheus).
TEAM_ATTRIBUTE = "gpuplatform.team"
TEAM_LABEL = "gpuplatform_team"
#: The Secret of the teams' API keys (one entry per team, the team as client id).
KEYS_SECRET = "llm-gateway-api-keys"
#: The listener's certificate (the cluster CA's; clients verify it with ``ca.crt``).
TLS_SECRET = "llm-gateway-tls"
#: Where AI Gateway puts the token counts of an answer (its fixed metadata namespace)
#: and the keys it uses for each kind of token (`token_costs`).
COST_METADATA_NAMESPACE = "io.envoy.ai_gateway"
TOTAL_TOKENS_KEY = "llm_total_token"
INPUT_TOKENS_KEY = "llm_input_token"
OUTPUT_TOKENS_KEY = "llm_output_token"

#: The ports the parts listen on (their charts' and sources' own numbers): Envoy Gateway's
#: xDS (18000), rate limit xDS (18001), wasm (18002) and metrics (19001); the rate limit
#: service's gRPC (8081); AI Gateway's webhook (9443), extension server (1063),
#: metrics (8080) and its external processor's admin and metrics port in each proxy
#: pod (1064); Envoy's own metrics (19001).
EG_XDS_PORT = 18000
EG_RATELIMIT_XDS_PORT = 18001
EG_WASM_PORT = 18002
EG_METRICS_PORT = 19001
EG_WEBHOOK_PORT = 9443
RATELIMIT_PORT = 8081
AIGW_WEBHOOK_PORT = 9443
AIGW_EXTENSION_PORT = 1063
AIGW_METRICS_PORT = 8080
EXTPROC_ADMIN_PORT = 1064
COUNTERS_PORT = 6379

#: Labels of the pods the charts run (their templates' selectors).
EG_CONTROLLER_POD_LABELS = {"control-plane": "envoy-gateway"}
AIGW_CONTROLLER_POD_LABELS = {"app.kubernetes.io/name": "ai-gateway-helm"}
COUNTERS_POD_LABELS = {"app.kubernetes.io/instance": COUNTERS_RELEASE}

_MODEL = TextFormat(
    r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$",
    "a model name as clients send it (letters, digits, . _ : / -; up to 128)",
)
_TEAM = TextFormat(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$", "a team name of the stack's teams")
#: The rate limit service counts a month as 30 days (envoyproxy/ratelimit's
#: ``UnitToDivider``: ``60 * 60 * 24 * 30`` seconds), windows aligned to the Unix epoch.
MONTH_SECONDS = 60 * 60 * 24 * 30


@dataclass(frozen=True)
class GatewayTeam:
    """One team's access to the gateway (``llmGateway.teams[]``).

    Args:
        team: the team (one of the stack's ``teams``); its API key's client id.
        models: the models it may call (each priced in ``llmGateway.prices``).
        tokens_per_minute: tokens (prompt and answer) it may use per minute, across
            models; the answer that crosses the limit completes, the next request
            gets 429 until the minute is over.
        tokens_per_month: its token budget per month (the rate limit service's month:
            30 days from the Unix epoch, not the calendar month); enforced the same way.
        key_generation: bump to give the team a new API key (the old one stops working
            at the next ``pulumi up``); default 1.
    """

    team: str
    models: tuple[str, ...]
    tokens_per_minute: int
    tokens_per_month: int
    key_generation: int = bounded(1, 1000, default=1)

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("team", self.team, _TEAM)
        check.require(bool(self.models), "models", list(self.models), "name at least one model")
        for index, model in enumerate(self.models):
            check.matches(f"models[{index}]", model, _MODEL)
        check.within("tokens_per_minute", self.tokens_per_minute, 1, 100_000_000)
        check.require(
            self.tokens_per_minute <= self.tokens_per_month <= 10**15,
            "tokens_per_month",
            self.tokens_per_month,
            "at least tokensPerMinute and at most 10^15",
        )
        check.ranges(self)
        check.done()


@dataclass(frozen=True)
class ModelPrice:
    """What a million tokens of one model cost a team (``llmGateway.prices[]``): the
    stack owner's chargeback price, as the stack file sets it.

    Args:
        model: the model name.
        input_usd_per_million_tokens: USD per million prompt tokens.
        output_usd_per_million_tokens: USD per million answer tokens.
    """

    model: str
    input_usd_per_million_tokens: float
    output_usd_per_million_tokens: float

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("model", self.model, _MODEL)
        for name in ("input_usd_per_million_tokens", "output_usd_per_million_tokens"):
            check.within(name, getattr(self, name), 0, 10_000, "USD per million tokens")
        check.done()


@dataclass(frozen=True)
class LlmGatewaySpec:
    """The LLM gateway (config key ``uae-gpu-platform:llmGateway``; docs/llm-gateway.md).

    Args:
        teams: who may call and how much (`GatewayTeam`); one entry per team.
        prices: each model's price per million tokens (`ModelPrice`); every model a team
            may call has one, so that every token has a price in ``make cost``.
        hostname: the name clients reach the gateway by, in its certificate besides the
            in-cluster Service names (default ``llm-gateway.internal``); resolve it to
            the internal load balancer in the site's or VPC's DNS.
        replicas: Envoy proxy pods (default 2).
        counters_storage_gib: the rate limit counters' volume (default 5).
        registry: where the gateway's images are pulled from, ``host[/path]`` holding
            `MIRRORED_IMAGES` (``<registry>/llm-gateway/envoy:distroless-v1.38.1``
            ...). AWS stacks leave it unset and get one ECR repository per image in
            their own registry; required on premises (the site's registry).
    """

    teams: tuple[GatewayTeam, ...]
    prices: tuple[ModelPrice, ...] = ()
    hostname: str = "llm-gateway.internal"
    replicas: int = bounded(1, 20, default=2)
    counters_storage_gib: int = bounded(1, 1024, default=5)
    registry: str | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.registry("registry", self.registry)
        check.require(bool(self.teams), "teams", [], "give at least one team access")
        _unique(check, "teams", [t.team for t in self.teams], "team")
        _unique(check, "prices", [p.model for p in self.prices], "model")
        priced = {p.model for p in self.prices}
        # No prices at all is one problem (and, when the list itself was broken, the
        # parser's own): not one per model.
        check.require(bool(self.prices), "prices", [], "give the price of each model teams call")
        for index, team in enumerate(self.teams):
            for position, model in enumerate(team.models):
                check.require(
                    model in priced or not self.prices,
                    f"teams[{index}].models[{position}]",
                    model,
                    "add its price to llmGateway.prices (every token is priced)",
                )
        check.require(
            bool(
                re.fullmatch(
                    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+",
                    self.hostname,
                )
            ),
            "hostname",
            self.hostname,
            "a DNS name with a domain, like llm-gateway.internal",
        )
        check.ranges(self)
        check.done()

    def image(self, repository: str) -> str:
        """``<registry>/<repository>:<tag>`` of one of `MIRRORED_IMAGES`; the registry
        must be resolved by then (the AWS foundation sets it)."""
        return mirror_image(self.registry, "llmGateway", repository, MIRRORED_IMAGES[repository][1])

    @property
    def models(self) -> tuple[str, ...]:
        """Every model some team may call, in order of first mention."""
        return tuple(dict.fromkeys(m for t in self.teams for m in t.models))

    def price(self, model: str) -> ModelPrice:
        return next(p for p in self.prices if p.model == model)


def _unique(check: Checker, field: str, names: Sequence[str], what: str) -> None:
    for index, name in enumerate(names):
        check.require(
            name not in names[:index], f"{field}[{index}].{what}", name, f"one entry per {what}"
        )


def stack_problems(spec: LlmGatewaySpec | None, teams: Iterable[str]) -> list[Problem]:
    """The section against the stack: every team it names is one of the stack's."""
    if spec is None:
        return []
    known = set(teams)
    return [
        Problem(
            f"llm_gateway.teams[{index}].team",
            team.team,
            f"not one of the stack's teams ({', '.join(sorted(known)) or 'none'})",
        )
        for index, team in enumerate(spec.teams)
        if team.team not in known
    ]


def backend_problems(spec: LlmGatewaySpec, backends: Sequence[LLMBackend]) -> list[str]:
    """Backends the gateway cannot route to: two for one model, a bad port."""
    problems = []
    seen: set[str] = set()
    for backend in backends:
        if backend.model in seen:
            problems.append(f"model {backend.model}: more than one backend")
        seen.add(backend.model)
        if not 1 <= backend.port <= 65535:
            problems.append(f"model {backend.model}: port {backend.port} is not a port")
    return problems


def routed_backends(spec: LlmGatewaySpec, backends: Sequence[LLMBackend]) -> list[LLMBackend]:
    """The backends of the models some team may call, in the spec's order of models."""
    by_model = {b.model: b for b in backends}
    return [by_model[m] for m in spec.models if m in by_model]


def api_key(seed: str, team: str, generation: int) -> str:
    """A team's API key: HMAC-SHA256 of the team and its key generation under the
    stack's secret seed (``llmGatewayApiKeySeed``), URL-safe, prefixed ``sk-`` as OpenAI
    keys are. The seed is a Pulumi secret, so every key is one; bumping a team's
    ``keyGeneration`` gives it a new key without touching the others'."""
    digest = hmac.new(
        seed.encode(), f"gpuplatform/llm-gateway/{team}/{generation}".encode(), hashlib.sha256
    ).digest()
    return "sk-" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def counters_password(seed: str) -> str:
    """The rate limit counters' password, derived from the same secret seed as the API
    keys under its own label (so it equals no team's key)."""
    digest = hmac.new(seed.encode(), b"gpuplatform/llm-gateway/counters", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def team_models(spec: LlmGatewaySpec, model: str) -> list[str]:
    """The teams that may call ``model``."""
    return [t.team for t in spec.teams if model in t.models]
