"""The LLM gateway (modules/k8s/gateway, docs/llm-gateway.md): every object valid against
the upstream CRDs it is pinned to (Gateway API v1.5.1 standard, Inference Extension
v1.5.0, Envoy Gateway v1.8.1, Envoy AI Gateway v1.0.0) or the Kubernetes API; the chart
values present in the pinned charts; one route for every model, by model and team, to
in-cluster backends only; the API keys, token limits, TLS 1.3, the internal load
balancer, the fences, the metrics and prices; the ``llmGateway`` section's one-line
problems; and the shipped plans' gateway.

Until the LLM services are wired (modules/k8s/llm), the backends are a literal list of
the shape they expose (`LLMBackend`)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
import yaml

from modules.k8s.gateway import manifests as gm
from modules.k8s.gateway import spec as gs
from modules.k8s.llm.spec import LLMBackend
from modules.k8s.monitoring.spec import INTERNAL_NLB_ANNOTATIONS
from modules.k8s.names import CLUSTER_CA_ISSUER
from modules.k8s.netpol import ClusterNetwork, is_default_deny
from modules.k8s.pki.spec import CA_BUNDLE_SECRET
from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS
from modules.validation import InvalidArgsError
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import load_stack_file
from tests.conftest import shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.shipped import under_component
from tests.k8s.test_features import merged, unknown_keys
from tests.k8s.vendored_crds import vendored_crd_errors
from tests.support.k8s_schema import schema_errors

VENDOR = Path(__file__).resolve().parent / "vendor" / "llm-gateway"
VALKEY = Path(__file__).resolve().parent / "vendor" / "feast"
COMPONENT = "gpuplatform:k8s:LlmGateway"
GATEWAY_STACKS = ("smb-cpu", "uae-prod")
NETWORK = ClusterNetwork(("10.42.0.0/16",), ("10.42.0.0/16",))

#: The mirror of the gateway's images (on AWS the stack's ECR: the foundation sets it).
REGISTRY = "registry.site.ae/gpu"
SPEC = gs.LlmGatewaySpec(
    teams=(
        gs.GatewayTeam("nlp", ("uae-gpt", "jais/13b:chat"), 20_000, 50_000_000),
        gs.GatewayTeam("speech", ("uae-gpt",), 10_000, 10_000_000, key_generation=2),
    ),
    prices=(gs.ModelPrice("uae-gpt", 0.2, 0.6), gs.ModelPrice("jais/13b:chat", 0.1, 0.3)),
    registry=REGISTRY,
)
#: What the LLM services expose, one backend per model (a pool on GPUs, a Service on CPU).
BACKENDS = (
    LLMBackend("uae-gpt", "llm-serving", "InferencePool", "uae-gpt", 8000),
    LLMBackend("jais/13b:chat", "team-nlp", "Service", "jais-13b", 8080),
    LLMBackend("not-offered", "llm-serving", "Service", "other", 8000),
)


def objects(eks: bool = True) -> list[dict[str, Any]]:
    return [
        *gm.manifests(SPEC, BACKENDS, eks=eks),
        gm.pod_monitor(),
        gm.prometheus_rule(SPEC),
    ]


def network_policies() -> list[dict[str, Any]]:
    return [
        *gm.controller_network_policies(SPEC, BACKENDS, NETWORK, ("team-nlp", "team-speech")),
        *gm.ai_gateway_network_policies(NETWORK),
        *gm.gateway_namespace_policies(),
        *gm.backend_ingress_policies(SPEC, BACKENDS),
    ]


def one(kind: str, found: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    (match,) = [o for o in (found if found is not None else objects()) if o["kind"] == kind]
    return match


# -- every object against its schema ---------------------------------------------------


@pytest.mark.parametrize("eks", [True, False], ids=["eks", "onprem"])
def test_every_custom_object_is_valid_against_the_pinned_crds(eks: bool) -> None:
    found = objects(eks)
    assert crd_errors(found) == []
    kinds = {o["kind"] for o in found}
    assert kinds >= {"GatewayClass", "Gateway", "EnvoyProxy", "ClientTrafficPolicy",
                     "SecurityPolicy", "BackendTrafficPolicy", "AIGatewayRoute", "Backend",
                     "AIServiceBackend", "ReferenceGrant", "Certificate"}  # fmt: skip


def test_the_crds_refuse_what_the_gateway_must_not_get_wrong() -> None:
    """The validation notices: a TLS version Envoy does not have, a misspelled field, a
    rate limit unit the service does not know."""
    policy = gm.client_traffic_policy()
    policy["spec"]["tls"]["minVersion"] = "1.4"
    assert any("minVersion" in e for e in vendored_crd_errors(policy))
    security = gm.security_policy()
    security["spec"]["apiKeyAuth"]["forwardClientIdHeader"] = gs.TEAM_HEADER
    assert any("forwardClientIdHeader" in e for e in vendored_crd_errors(security))
    limits = gm.rate_limits(SPEC)
    limits["spec"]["rateLimit"]["global"]["rules"][1]["limit"]["unit"] = "Week"
    assert any("Week" in e for e in vendored_crd_errors(limits))
    route = gm.ai_gateway_route(SPEC, BACKENDS)
    del route["spec"]["rules"]
    assert vendored_crd_errors(route)


def test_namespaces_policies_and_the_keys_secret_are_valid_kubernetes() -> None:
    built_in = [
        gm.CONTROLLER_NS.manifest("1.33"),
        gm.AI_GATEWAY_NS.manifest("1.33"),
        gm.GATEWAY_NS.manifest("1.33"),
        gm.api_keys_secret({"nlp": "sk-x", "speech": "sk-y"}),
        *network_policies(),
    ]
    for version in (SUPPORTED_KUBERNETES_VERSIONS[0], SUPPORTED_KUBERNETES_VERSIONS[-1]):
        assert schema_errors(built_in, version) == []


def chart_defaults(name: str) -> Any:
    return yaml.safe_load((VENDOR / name).read_text(encoding="utf-8"))


def test_the_ai_gateway_values_exist_in_the_pinned_chart() -> None:
    values = gm.ai_gateway_values(SPEC)
    assert unknown_keys(values, chart_defaults("ai-gateway-helm-v1.0.0-values.yaml")) == []
    # The team header becomes a label of every gen_ai metric.
    assert values["controller"]["metricsRequestHeaderAttributes"] == (
        f"{gs.TEAM_HEADER}:{gs.TEAM_ATTRIBUTE}"
    )


def _json_fields() -> set[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in VENDOR.glob("*.go"))
    return set(re.findall(r'json:"([A-Za-z]+)', text))


def _keys(values: Any) -> set[str]:
    if isinstance(values, dict):
        return set(values) | {k for v in values.values() for k in _keys(v)}
    if isinstance(values, list):
        return {k for v in values for k in _keys(v)}
    return set()


def test_the_envoy_gateway_values_exist_in_the_pinned_chart_and_its_config_api() -> None:
    values = gm.envoy_gateway_values(SPEC)
    config = values.pop("config")
    assert unknown_keys(values, chart_defaults("gateway-helm-v1.8.1-values.tmpl.yaml")) == []
    # The rate limit container's variables are Kubernetes EnvVars: checked as a pod's.
    deployment = config["envoyGateway"]["provider"]["kubernetes"]["rateLimitDeployment"]
    env = deployment["container"].pop("env")
    container = {"name": "envoy-ratelimit", "image": "x", "env": env}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ratelimit"},
           "spec": {"containers": [container]}}  # fmt: skip
    assert schema_errors([pod], SUPPORTED_KUBERNETES_VERSIONS[-1]) == []
    assert {e["name"] for e in env} == {"REDIS_TLS_CACERT", "REDIS_AUTH"}
    # config.envoyGateway is the EnvoyGateway API object: every key one of its fields.
    assert _keys(config["envoyGateway"]) - _json_fields() == set()
    assert _keys({"extensionManger": {}}) - _json_fields() == {"extensionManger"}
    gateway = config["envoyGateway"]
    assert gateway["extensionApis"]["enableBackend"] is True
    redis = gateway["rateLimit"]["backend"]["redis"]
    assert redis["url"] == "llm-gateway-counters-valkey.envoy-gateway-system.svc.cluster.local:6379"
    # Mutual TLS with the namespace's cluster-CA client certificate.
    assert redis["tls"] == {"certificateRef": {"name": "gpuplatform-ca"}}
    assert gateway["extensionManager"]["backendResources"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "version": "v1"}
    ]


def test_the_counters_values_pass_the_valkey_charts_schema() -> None:
    values = gm.counters_values(SPEC, "gp3-encrypted")
    defaults = yaml.safe_load((VALKEY / "valkey-0.11.0-values.yaml").read_text())
    assert unknown_keys(values, defaults) == []
    schema = json.loads((VALKEY / "valkey-0.11.0-values.schema.json").read_text())
    errors = jsonschema.Draft202012Validator(schema).iter_errors(merged(defaults, values))
    assert [e.message for e in errors] == []
    # Only the rate limit service gets in: a password and a cluster-CA client certificate.
    assert values["auth"]["enabled"] and values["auth"]["usersExistingSecret"] == (
        gs.COUNTERS_USERS_SECRET
    )
    assert values["tls"]["enabled"] and values["tls"]["requireClientCertificate"]
    server, client = gm.counters_certificates()
    assert server["spec"]["secretName"] == values["tls"]["existingSecret"]
    assert (
        "llm-gateway-counters-valkey.envoy-gateway-system.svc.cluster.local"
        in (server["spec"]["dnsNames"])
    )
    assert client["spec"]["usages"] == ["client auth", "digital signature"]
    assert crd_errors([server, client]) == []
    assert gs.counters_password("s") not in {gs.api_key("s", t.team, 1) for t in SPEC.teams}
    # Monthly budgets survive a restart: an append-only file on a kept volume.
    assert "appendonly yes" in values["valkeyConfig"]
    assert values["dataStorage"]["enabled"] and values["dataStorage"]["keepPvc"]


# -- routing ---------------------------------------------------------------------------


def test_one_route_sends_each_model_to_its_backend_for_the_teams_that_may_call_it() -> None:
    route = gm.ai_gateway_route(SPEC, BACKENDS)
    rules = route["spec"]["rules"]
    # "not-offered" has a backend but no team may call it: no rule.
    assert len(rules) == 2
    pairs = {
        ({h["name"]: h["value"] for h in m["headers"]}[gs.MODEL_HEADER],
         {h["name"]: h["value"] for h in m["headers"]}[gs.TEAM_HEADER])
        for rule in rules for m in rule["matches"]
    }  # fmt: skip
    assert pairs == {("uae-gpt", "nlp"), ("uae-gpt", "speech"), ("jais/13b:chat", "nlp")}
    assert rules[0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "uae-gpt",
         "namespace": "llm-serving"}
    ]  # fmt: skip
    assert route["spec"]["parentRefs"][0]["name"] == gs.GATEWAY_NAME
    assert {c["type"] for c in route["spec"]["llmRequestCosts"]} == {
        "InputToken", "OutputToken", "TotalToken"
    }  # fmt: skip


def test_a_service_backend_is_its_in_cluster_dns_name_only() -> None:
    found = gm.service_backends(SPEC, BACKENDS)
    backend = one("Backend", found)
    assert backend["spec"]["endpoints"] == [
        {"fqdn": {"hostname": "jais-13b.team-nlp.svc.cluster.local", "port": 8080}}
    ]
    ai = one("AIServiceBackend", found)
    assert ai["spec"]["backendRef"]["name"] == backend["metadata"]["name"]
    rule = gm.ai_gateway_route(SPEC, BACKENDS)["spec"]["rules"][1]
    assert rule["backendRefs"] == [{"name": ai["metadata"]["name"]}]


def test_a_service_backend_is_called_over_tls_13_verified_with_the_cluster_ca() -> None:
    """The gateway to a Service backend (a CPU model's interceptor) is TLS 1.3, the
    certificate checked against the cluster CA and its name against the Service's DNS
    name (Envoy Gateway v1.8.1 matches the SAN with the SNI), whose bundle the Backend's
    namespace gets from the cluster CA."""
    found = gm.service_backends(SPEC, BACKENDS)
    tls = one("Backend", found)["spec"]["tls"]
    assert tls == {
        "caCertificateRefs": [{"group": "", "kind": "Secret", "name": CA_BUNDLE_SECRET}],
        "sni": "jais-13b.team-nlp.svc.cluster.local",
        "minVersion": "1.3",
    }
    bundle = one("Certificate", found)
    meta = bundle["metadata"]
    assert (meta["name"], meta["namespace"]) == (CA_BUNDLE_SECRET, gs.GATEWAY_NAMESPACE)
    assert bundle["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    pools_only = [b for b in BACKENDS if b.kind == "InferencePool"]
    assert gm.service_backends(SPEC, pools_only) == []


def test_pools_in_other_namespaces_are_granted_to_the_route_only() -> None:
    (grant,) = gm.reference_grants(SPEC, BACKENDS)
    assert grant["metadata"]["namespace"] == "llm-serving"
    assert {f["kind"] for f in grant["spec"]["from"]} == {"AIGatewayRoute", "HTTPRoute"}
    assert all(f["namespace"] == gs.GATEWAY_NAMESPACE for f in grant["spec"]["from"])


def test_object_names_differ_for_models_that_slug_alike() -> None:
    assert gm.object_name("a/b") != gm.object_name("a:b")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", gm.object_name("Jais/13B:Chat"))


# -- who may call, how much ------------------------------------------------------------


def test_every_request_needs_a_team_key_and_carries_the_team_on() -> None:
    auth = gm.security_policy()["spec"]
    assert auth["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gs.GATEWAY_NAME}
    ]
    keys = auth["apiKeyAuth"]
    assert keys["credentialRefs"] == [{"group": "", "kind": "Secret", "name": gs.KEYS_SECRET}]
    assert keys["extractFrom"] == [{"headers": ["Authorization"]}]
    assert keys["forwardClientIDHeader"] == gs.TEAM_HEADER
    assert keys["sanitize"] is True
    # A caller cannot name a team itself: the header goes before anything reads it.
    client = gm.client_traffic_policy()["spec"]
    assert client["headers"]["earlyRequestHeaders"]["remove"] == [gs.TEAM_HEADER]


def test_each_team_has_its_tokens_per_minute_and_per_month_charged_from_the_answer() -> None:
    rules = gm.rate_limits(SPEC)["spec"]["rateLimit"]["global"]["rules"]
    limits = {
        (r["clientSelectors"][0]["headers"][0]["value"], r["limit"]["unit"]): r["limit"]["requests"]
        for r in rules
    }
    assert limits == {
        ("nlp", "Minute"): 20_000,
        ("nlp", "Month"): 50_000_000,
        ("speech", "Minute"): 10_000,
        ("speech", "Month"): 10_000_000,
    }
    for rule in rules:
        assert rule["clientSelectors"][0]["headers"][0]["name"] == gs.TEAM_HEADER
        assert rule["cost"]["request"] == {"from": "Number", "number": 0}
        assert rule["cost"]["response"]["metadata"] == {
            "namespace": "io.envoy.ai_gateway", "key": gs.TOTAL_TOKENS_KEY
        }  # fmt: skip
        assert rule["shared"] is True


def test_api_keys_are_per_team_per_generation_and_reveal_no_seed() -> None:
    nlp, speech = gs.api_key("seed", "nlp", 1), gs.api_key("seed", "speech", 1)
    assert nlp != speech and nlp.startswith("sk-") and "seed" not in nlp
    assert gs.api_key("seed", "nlp", 2) != nlp
    assert gs.api_key("other", "nlp", 1) != nlp
    assert gs.api_key("seed", "nlp", 1) == nlp


# -- TLS, exposure, fences -------------------------------------------------------------


def test_the_listener_is_https_with_the_cluster_cas_certificate_and_tls_1_3() -> None:
    (listener,) = one("Gateway")["spec"]["listeners"]
    assert (listener["protocol"], listener["port"]) == ("HTTPS", 443)
    assert listener["tls"]["certificateRefs"][0]["name"] == gs.TLS_SECRET
    (cert,) = [
        o["spec"]
        for o in objects()
        if o["kind"] == "Certificate" and o["metadata"]["name"] != CA_BUNDLE_SECRET
    ]
    assert cert["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    assert cert["secretName"] == gs.TLS_SECRET
    assert SPEC.hostname in cert["dnsNames"]
    assert "llm-gateway.envoy-gateway-system.svc" in cert["dnsNames"]
    assert gm.client_traffic_policy()["spec"]["tls"] == {"minVersion": "1.3"}


def test_the_proxies_are_behind_an_internal_load_balancer_only() -> None:
    service = one("EnvoyProxy")["spec"]["provider"]["kubernetes"]["envoyService"]
    assert service["type"] == "LoadBalancer"
    assert service["annotations"] == INTERNAL_NLB_ANNOTATIONS
    onprem = one("EnvoyProxy", objects(eks=False))["spec"]["provider"]["kubernetes"]
    assert "annotations" not in onprem["envoyService"]
    pod = onprem["envoyDeployment"]
    assert pod["container"]["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["pod"]["securityContext"]["runAsNonRoot"] is True


def test_every_gateway_namespace_denies_by_default() -> None:
    policies = network_policies()
    for namespace in (gs.CONTROLLER_NAMESPACE, gs.AI_GATEWAY_NAMESPACE, gs.GATEWAY_NAMESPACE):
        assert any(
            is_default_deny(p) for p in policies if p["metadata"]["namespace"] == namespace
        ), namespace


def test_the_proxies_reach_only_the_llm_namespaces_serving_ports() -> None:
    (egress,) = [p for p in network_policies() if p["metadata"]["name"] == "allow-proxy-egress"]
    out = [
        (json.dumps(rule["to"], sort_keys=True), sorted(p["port"] for p in rule["ports"]))
        for rule in egress["spec"]["egress"]
    ]

    def ns(name: str) -> str:
        peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}
        return json.dumps([peer], sort_keys=True)

    backend_rules = [(to, ports) for to, ports in out if "namespaceSelector" in to]
    # The pool's port and its endpoint picker; the Service's port; not "not-offered".
    assert backend_rules == [(ns("llm-serving"), [8000, 9002]), (ns("team-nlp"), [8080])]
    others = [to for to, _ in out if "namespaceSelector" not in to]
    assert len(others) == 2  # the rate limit service and the controller, same namespace
    (clients,) = [p for p in network_policies() if p["metadata"]["name"] == "allow-gateway-clients"]
    (rule,) = clients["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": gs.PROXY_CONTAINER_PORT}]
    assert rule["from"] == [
        {"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                     "operator": "In",
                                                     "values": ["team-nlp", "team-speech"]}]}},
        {"ipBlock": {"cidr": "10.42.0.0/16"}},
    ]  # fmt: skip
    ingress = {p["metadata"]["namespace"]: p for p in gm.backend_ingress_policies(SPEC, BACKENDS)}
    assert sorted(ingress) == ["llm-serving", "team-nlp"]
    # A team namespace may hold a backend and be a client: the two policies differ in name.
    egress_names = {p["metadata"]["name"] for p in gm.client_egress_policies(["team-nlp"])}
    assert egress_names.isdisjoint(p["metadata"]["name"] for p in ingress.values())


# -- metrics and prices ----------------------------------------------------------------


def test_tokens_and_requests_per_team_are_scraped_and_priced() -> None:
    endpoints = gm.pod_monitor()["spec"]["podMetricsEndpoints"]
    assert {"port": "aigw-admin", "path": "/metrics"} in endpoints
    rules = gm.cost_rules(SPEC)
    prices = {
        (r["labels"]["gen_ai_request_model"], r["labels"]["gen_ai_token_type"]): r["expr"]
        for r in rules if r["record"] == gm.PRICE_SERIES
    }  # fmt: skip
    assert prices == {
        ("uae-gpt", "input"): "vector(0.2)",
        ("uae-gpt", "output"): "vector(0.6)",
        ("jais/13b:chat", "input"): "vector(0.1)",
        ("jais/13b:chat", "output"): "vector(0.3)",
    }
    for rule in rules:
        promql_parser.parse(rule["expr"])
    cost = next(r["expr"] for r in rules if r["record"] == gm.COST_SERIES)
    assert f"sum by ({gs.TEAM_LABEL})" in cost and gm.PRICE_SERIES in cost


# -- the stack section -----------------------------------------------------------------

GOOD = {
    "teams": [{"team": "analytics", "models": ["uae-gpt"], "tokensPerMinute": 100,
               "tokensPerMonth": 1000}],
    "prices": [{"model": "uae-gpt", "inputUsdPerMillionTokens": 0.1,
                "outputUsdPerMillionTokens": 0.2}],
}  # fmt: skip


def problems(section: Any) -> list[str]:
    config, _ = load_stack_file("smb-cpu")
    config = dict(config)
    config["uae-gpu-platform:llmGateway"] = json.dumps(section)
    with pytest.raises(ConfigError) as err:
        parse_stack_config(config)
    return err.value.problems


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s["teams"][0].update(team="ghost"),
         "uae-gpu-platform:llmGateway.teams[0].team: got 'ghost'; not one of the stack's teams"),
        (lambda s: s["teams"][0].update(models=["other"]),
         "uae-gpu-platform:llmGateway.teams[0].models[0]: got 'other'; add its price"),
        (lambda s: s["teams"][0].update(tokensPerMonth=10),
         "uae-gpu-platform:llmGateway.teams[0].tokensPerMonth: got 10; at least tokensPerMinute"),
        (lambda s: s["teams"][0].update(tokensPerMinut=5),
         "uae-gpu-platform:llmGateway.teams[0].tokensPerMinut: got 5; unknown key; did you mean"),
        (lambda s: s["prices"][0].update(inputUsdPerMillionTokens=-1),
         "uae-gpu-platform:llmGateway.prices[0].inputUsdPerMillionTokens: got -1.0; use 0 to"),
        (lambda s: s.update(hostname="gateway"),
         "uae-gpu-platform:llmGateway.hostname: got 'gateway'; a DNS name with a domain"),
    ],
    ids=["unknown-team", "unpriced-model", "month-below-minute", "typo", "negative-price",
         "bare-hostname"],
)  # fmt: skip
def test_a_bad_section_gets_one_line_naming_its_key(change: Any, expected: str) -> None:
    section = copy.deepcopy(GOOD)
    change(section)
    found = problems(section)
    assert len(found) == 1 and "\n" not in found[0], found
    assert found[0].startswith(expected), found


def test_the_good_section_parses() -> None:
    config, _ = load_stack_file("smb-cpu")
    config = dict(config)
    config["uae-gpu-platform:llmGateway"] = json.dumps(GOOD)
    parsed = parse_stack_config(config).llm_gateway
    assert parsed is not None and parsed.teams[0].tokens_per_month == 1000


def test_two_backends_for_one_model_are_refused() -> None:
    twice = (*BACKENDS, LLMBackend("uae-gpt", "x", "Service", "y", 80))
    assert gs.backend_problems(SPEC, twice) == ["model uae-gpt: more than one backend"]
    with pytest.raises(InvalidArgsError):
        gs.GatewayTeam("nlp", (), 1, 1)


# -- the shipped plans -----------------------------------------------------------------


@pytest.mark.parametrize("stack", GATEWAY_STACKS)
def test_the_shipped_plans_hold_the_gateway_with_keys_and_limits(stack: str) -> None:
    registrations, document = shipped_plan(stack)
    found = [r.inputs for r in under_component(registrations, COMPONENT)]
    kinds = {o.get("kind") for o in found if "kind" in o}
    assert {"Gateway", "SecurityPolicy", "BackendTrafficPolicy", "ClientTrafficPolicy",
            "EnvoyProxy", "Secret", "PodMonitor", "PrometheusRule"} <= kinds  # fmt: skip
    assert crd_errors([o for o in found if o.get("kind") in gm_kinds()]) == []
    config = parse_stack_config(load_stack_file(stack)[0]).llm_gateway
    assert config is not None
    (secret,) = [
        o for o in found if o.get("kind") == "Secret" and o["metadata"]["name"] == gs.KEYS_SECRET
    ]
    assert secret["stringData"] == {t.team: "[secret]" for t in config.teams}
    # The counters' password too: every Secret of the gateway is built from secrets.
    secrets = [o for o in found if o.get("kind") == "Secret"]
    assert len(secrets) == 2
    assert all(v == "[secret]" for o in secrets for v in o["stringData"].values())
    (limits,) = [o for o in found if o.get("kind") == "BackendTrafficPolicy"]
    assert len(limits["spec"]["rateLimit"]["global"]["rules"]) == 2 * len(config.teams)
    charts = {o["chart"]: o["version"] for o in found if "chart" in o}
    assert charts[gs.ENVOY_GATEWAY.chart] == "v1.8.1"
    assert charts[gs.AI_GATEWAY.chart] == "v1.0.0"
    steps = [s["newState"] for s in document["steps"]]
    secrets = [s for s in steps if s["inputs"].get("kind") == "Secret"
               and s["inputs"]["metadata"]["name"] == gs.KEYS_SECRET]  # fmt: skip
    assert secrets and all(
        v == "[secret]" for s in secrets for v in s["inputs"]["stringData"].values()
    )


def gm_kinds() -> set[str]:
    return {o["kind"] for o in objects()} - {"Certificate", "PodMonitor", "PrometheusRule"}


# -- make cost ---------------------------------------------------------------------------


def test_make_cost_lists_each_teams_price_per_million_tokens_and_budget_ceiling() -> None:
    from stacks.cost import render_llm_gateway  # noqa: PLC0415

    rows = [line.split() for line in render_llm_gateway(SPEC).splitlines()]
    assert ["nlp", "uae-gpt", "0.2000", "0.6000", "50,000,000", "30.00"] in rows
    assert ["jais/13b:chat", "0.1000", "0.3000"] in rows
    assert ["speech", "uae-gpt", "0.2000", "0.6000", "10,000,000", "6.00"] in rows


def test_make_cost_prints_the_gateway_of_a_shipped_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from stacks.cost import main  # noqa: PLC0415

    assert main(["smb-cpu"]) == 0
    out = capsys.readouterr().out
    assert "LLM gateway: price per million tokens, per team (USD)" in out
    assert ["analytics", "uae-gpt-cpu", "0.0500", "0.1500", "100,000,000", "15.00"] in [
        line.split() for line in out.splitlines()
    ]


def test_every_gateway_image_comes_from_the_mirror() -> None:
    """The controllers, the rate limit service, the proxies, the external processor
    the AI Gateway injects and the counters: each from `gs.MIRRORED_IMAGES` under the
    registry, none from Docker Hub, each chart image pulled at every start."""
    images = gm.envoy_gateway_values(SPEC)["global"]["images"]
    ai = gm.ai_gateway_values(SPEC)
    counters = gm.counters_values(SPEC, "gp3-encrypted")["image"]
    (proxy,) = [m for m in gm.manifests(SPEC, BACKENDS, eks=True) if m["kind"] == "EnvoyProxy"]
    container = proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]["container"]
    found = {
        images["envoyGateway"]["image"],
        images["ratelimit"]["image"],
        container["image"],
        f"{ai['controller']['image']['repository']}:{ai['controller']['image']['tag']}",
        f"{ai['extProc']['image']['repository']}:{ai['extProc']['image']['tag']}",
        f"{counters['registry']}/{counters['repository']}:{counters['tag']}",
    }
    assert found == {f"{REGISTRY}/{name}:{tag}" for name, (_, tag) in gs.MIRRORED_IMAGES.items()}
    policies = {images[n]["pullPolicy"] for n in images}
    policies |= {ai["controller"]["imagePullPolicy"], ai["extProc"]["imagePullPolicy"]}
    assert policies | {counters["pullPolicy"]} == {"Always"}
    # The proxy image the EnvoyProxy names is the one Envoy Gateway v1.8.1 defaults to.
    shared = (VENDOR / "shared_types.go").read_text(encoding="utf-8")
    source, tag = gs.MIRRORED_IMAGES["llm-gateway/envoy"]
    assert f'DefaultEnvoyProxyImage = "{source}:{tag}"' in shared
    source, tag = gs.MIRRORED_IMAGES["llm-gateway/ratelimit"]
    assert f'DefaultRateLimitImage = "{source}:{tag}"' in shared


def test_the_gateway_images_need_a_resolved_registry() -> None:
    unresolved = gs.LlmGatewaySpec(teams=SPEC.teams, prices=SPEC.prices)
    with pytest.raises(ValueError, match=r"llmGateway\.registry is unresolved"):
        gm.envoy_gateway_values(unresolved)
