"""The LLM gateway rules: a compliant plan with the gateway's objects as the platform
writes them (`modules.k8s.gateway.manifests`: a route to an InferencePool and to a
Service through a Backend, the API key SecurityPolicy and the token limits on the
Gateway) passes every rule; each object broken one property at a time, or with the
property left out, fails exactly its rule (the failing, passing and missing twins); a
shipped plan given an external provider's Backend is caught."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from modules.k8s.gateway import manifests as gm
from modules.k8s.gateway import spec as gs
from modules.k8s.llm.spec import LLMBackend
from tests.conftest import shipped_plan
from tests.policies.builder import PlanBuilder, compliant_plan
from tests.policies.serving_cases import k8s_provider
from tests.policies.twins import breaking_caught, twin_tests

Plan = dict[str, Any]
BACKENDS_RULE = "uae-llm-gateway-backends-in-cluster"
AUTH_RULE = "uae-llm-gateway-authentication"
LIMITS_RULE = "uae-llm-gateway-rate-limits"
SPEC = gs.LlmGatewaySpec(
    teams=(gs.GatewayTeam("nlp", ("uae-gpt", "jais"), 1000, 100_000),),
    prices=(gs.ModelPrice("uae-gpt", 0.2, 0.6), gs.ModelPrice("jais", 0.1, 0.3)),
    registry="123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-test",
)
BACKENDS = (
    LLMBackend("uae-gpt", "llm-serving", "InferencePool", "uae-gpt", 8000),
    LLMBackend("jais", "team-nlp", "Service", "jais", 8080),
)
#: The kinds the rules read (the rest of the gateway's objects are other rules' concern).
KINDS = ("Backend", "AIServiceBackend", "AIGatewayRoute", "SecurityPolicy",
         "BackendTrafficPolicy", "Gateway")  # fmt: skip


def type_token(manifest: dict[str, Any]) -> str:
    group, _, version = manifest["apiVersion"].rpartition("/")
    return f"kubernetes:{group}/{version}:{manifest['kind']}"


def make_plan() -> Plan:
    plan = compliant_plan()
    provider = k8s_provider(plan)
    builder = PlanBuilder()
    for manifest in gm.manifests(SPEC, BACKENDS, eks=True):
        if manifest["kind"] in KINDS:
            builder.add(
                type_token(manifest), manifest["metadata"]["name"], manifest, provider=provider
            )
    plan["steps"].extend(builder.steps)
    return plan


def spec_of(plan: Plan, kind: str) -> dict[str, Any]:
    (state,) = [
        s["newState"]["inputs"]
        for s in plan["steps"]
        if s["newState"]["type"].endswith(f":{kind}")
        and s["newState"]["type"].startswith("kubernetes:")
    ]
    return state["spec"]  # type: ignore[no-any-return]


def edit(kind: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Plan], None]:
    return lambda plan: change(spec_of(plan, kind))


def _endpoint(**endpoint: Any) -> Callable[[dict[str, Any]], None]:
    return lambda spec: spec.update(endpoints=[endpoint])


def _cors_only(spec: dict[str, Any]) -> None:
    del spec["apiKeyAuth"]
    spec["cors"] = {"allowOrigins": ["*"]}


CASES = [
    # -- backends: compliant is the Service's in-cluster name (make_plan) --
    ("backend-openai", edit("Backend", _endpoint(fqdn={"hostname": "api.openai.com", "port": 443})),
     BACKENDS_RULE, "`spec.endpoints[0].fqdn.hostname` is 'api.openai.com', outside the cluster"),
    ("backend-ip", edit("Backend", _endpoint(ip={"address": "203.0.113.7", "port": 443})),
     BACKENDS_RULE, "`spec.endpoints[0].ip` is '203.0.113.7'"),
    ("backend-no-endpoints", edit("Backend", lambda s: s.pop("endpoints")),
     BACKENDS_RULE, "names no endpoint"),
    ("backend-dynamic", edit("Backend", lambda s: s.update(type="DynamicResolver")),
     BACKENDS_RULE, "DynamicResolver"),
    ("ai-backend-elsewhere",
     edit("AIServiceBackend", lambda s: s["backendRef"].update(kind="ServiceImport",
                                                               group="multicluster.x-k8s.io")),
     BACKENDS_RULE, "`spec.backendRef` is a ServiceImport"),
    ("ai-backend-missing", edit("AIServiceBackend", lambda s: s.pop("backendRef")),
     BACKENDS_RULE, "names no `spec.backendRef`"),
    ("route-to-other-kind",
     edit("AIGatewayRoute", lambda s: s["rules"][0]["backendRefs"][0].update(
         group="gateway.networking.k8s.io", kind="Gateway")),
     BACKENDS_RULE, "`spec.rules[0].backendRefs[0]` is a Gateway"),
    # -- authentication --
    ("auth-cors-only", edit("SecurityPolicy", _cors_only),
     AUTH_RULE, "AIGatewayRoute llm-models: no SecurityPolicy with apiKeyAuth or jwt"),
    ("auth-no-keys", edit("SecurityPolicy", lambda s: s["apiKeyAuth"].pop("credentialRefs")),
     AUTH_RULE, "no SecurityPolicy with apiKeyAuth or jwt targets it or"),
    ("auth-no-target", edit("SecurityPolicy", lambda s: s.pop("targetRefs")),
     AUTH_RULE, "(llm-gateway)"),
    ("auth-other-gateway", edit("SecurityPolicy", lambda s: s["targetRefs"][0].update(name="x")),
     AUTH_RULE, "targets it or its Gateway (llm-gateway)"),
    # -- rate limits --
    ("limits-none", edit("BackendTrafficPolicy", lambda s: s.pop("rateLimit")),
     LIMITS_RULE, "AIGatewayRoute llm-models: no BackendTrafficPolicy with rate limit rules"),
    ("limits-no-rules", edit("BackendTrafficPolicy",
                             lambda s: s["rateLimit"]["global"].update(rules=[])),
     LIMITS_RULE, "no BackendTrafficPolicy with rate limit rules"),
    ("limits-rule-without-limit", edit("BackendTrafficPolicy",
                                       lambda s: s["rateLimit"]["global"]["rules"][0].pop("limit")),
     LIMITS_RULE, "no BackendTrafficPolicy with rate limit rules"),
    ("limits-no-target", edit("BackendTrafficPolicy", lambda s: s.pop("targetRefs")),
     LIMITS_RULE, "targets it or its Gateway"),
]  # fmt: skip

test_the_plan_passes_every_rule, test_the_broken_plan_fails_exactly_the_rule = twin_tests(
    make_plan, CASES
)


def test_jwt_from_an_issuer_authenticates_too() -> None:
    from tests.policies.twins import passes_every_rule  # noqa: PLC0415

    plan = make_plan()
    spec = spec_of(plan, "SecurityPolicy")
    spec.pop("apiKeyAuth")
    spec["jwt"] = {"providers": [{"name": "platform", "remoteJWKS": {
        "uri": "https://keycloak.identity.svc.cluster.local/realms/platform/certs"}}]}  # fmt: skip
    passes_every_rule(plan)


# -- a shipped plan given an external provider ----------------------------------------


def _shipped(stack: str) -> Plan:
    """The shipped plan's document, built once per session (shared with other tests)."""
    return shipped_plan(stack)[1]


def _openai_backend(plan: Plan) -> None:
    builder = PlanBuilder()
    manifest = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "Backend",
        "metadata": {"name": "openai", "namespace": gs.GATEWAY_NAMESPACE},
        "spec": {"endpoints": [{"fqdn": {"hostname": "api.openai.com", "port": 443}}]},
    }
    builder.add(type_token(manifest), "openai", manifest, provider=k8s_provider(plan))
    plan["steps"].extend(builder.steps)


@pytest.mark.parametrize("stack", ["smb-cpu", "uae-prod"])
def test_an_external_provider_in_a_shipped_plan_is_caught(stack: str) -> None:
    breaking_caught(copy.deepcopy(_shipped(stack)), _openai_backend, BACKENDS_RULE)
