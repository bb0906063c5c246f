"""The LLM gateway (Envoy Gateway with Envoy AI Gateway, docs/llm-gateway.md): prompts
and answers stay in the cluster, and no one calls a model without a team's credential
and a limit on its tokens.

* Backends in the cluster: a gateway backend is a Service of the cluster or an
  InferencePool (its pods are the cluster's). Envoy Gateway's ``Backend`` names only
  ``<service>.<namespace>.svc[.cluster.local]`` hosts (no IP address, which cannot be
  shown to be the cluster's, no dynamic resolver, which forwards to any host); an
  ``AIServiceBackend`` and an ``AIGatewayRoute`` reference only those kinds. An external
  provider (``api.openai.com``, a cloud endpoint abroad) would send every prompt out of
  the country.
* Every ``AIGatewayRoute`` is covered, on itself or on its parent Gateway, by a
  ``SecurityPolicy`` that authenticates callers (API keys from a Secret, or JWTs from an
  issuer) and by a ``BackendTrafficPolicy`` with rate limit rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policies.catalogue import resource_rule, stack_rule
from policies.k8s import kind_of, metadata
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.checks import in_cluster_host
from policies.settings import Settings
from policies.values import Deferred, dig, known

EG_GROUP = "gateway.envoyproxy.io"
AIGW_GROUP = "aigateway.envoyproxy.io"
INFERENCE_GROUP = "inference.networking.k8s.io"
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
ROUTE_TYPES = tuple(
    f"kubernetes:{AIGW_GROUP}/{version}:AIGatewayRoute" for version in ("v1beta1", "v1alpha1")
)
SECURITY_TYPES = tuple(
    f"kubernetes:{EG_GROUP}/{version}:SecurityPolicy" for version in ("v1alpha1",)
)
TRAFFIC_TYPES = tuple(
    f"kubernetes:{EG_GROUP}/{version}:BackendTrafficPolicy" for version in ("v1alpha1",)
)


def _group(resource: ResourceView) -> str:
    return str(resource.props.get("apiVersion", "")).rpartition("/")[0]


def gateway_backend(resource: ResourceView) -> bool:
    """Envoy Gateway's Backends and AI Gateway's AIServiceBackends and AIGatewayRoutes."""
    kind, group = kind_of(resource), _group(resource)
    return (group, kind) in (
        (EG_GROUP, "Backend"),
        (AIGW_GROUP, "AIServiceBackend"),
        (AIGW_GROUP, "AIGatewayRoute"),
    )


def _backend_problems(spec: Mapping[str, Any]) -> Iterator[str]:
    if known(spec.get("type"), "spec.type") == "DynamicResolver":
        yield "`spec.type` is DynamicResolver: it forwards to whatever host a request names"
        return
    endpoints = known(spec.get("endpoints"), "spec.endpoints")
    if not isinstance(endpoints, list) or not endpoints:
        yield "names no endpoint, so it cannot be shown to be in the cluster"
        return
    for index, endpoint in enumerate(endpoints):
        path = f"spec.endpoints[{index}]"
        if not isinstance(endpoint, Mapping):
            yield f"`{path}` is not an endpoint"
            continue
        host = known(dig(endpoint, "fqdn", "hostname"), f"{path}.fqdn.hostname")
        if "ip" in endpoint:
            address = known(dig(endpoint, "ip", "address"), f"{path}.ip.address")
            yield f"`{path}.ip` is {address!r}: an address cannot be shown to be the cluster's"
        elif "unix" in endpoint:
            yield f"`{path}.unix` is a socket path, not a Service of the cluster"
        elif not isinstance(host, str) or not in_cluster_host(host):
            yield (
                f"`{path}.fqdn.hostname` is {host!r}, outside the cluster (not "
                "<service>.<namespace>.svc[.cluster.local])"
            )


def _route_refs(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    rules = known(spec.get("rules"), "spec.rules")
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        refs = rule.get("backendRefs") if isinstance(rule, Mapping) else None
        for position, ref in enumerate(refs if isinstance(refs, list) else []):
            if isinstance(ref, Mapping):
                yield f"spec.rules[{index}].backendRefs[{position}]", ref


@resource_rule("uae-llm-gateway-backends-in-cluster")
def gateway_backends_in_cluster(resource: ResourceView, settings: Settings) -> Iterator[str]:
    spec = resource.props.get("spec")
    if not isinstance(spec, Mapping):
        yield "has no spec, so its backends cannot be checked"
        return
    kind = kind_of(resource)
    if kind == "Backend":
        yield from _backend_problems(spec)
    elif kind == "AIServiceBackend":
        ref = known(spec.get("backendRef"), "spec.backendRef")
        if not isinstance(ref, Mapping):
            yield "names no `spec.backendRef`"
        elif (ref.get("group", ""), ref.get("kind", "Service")) not in (
            (EG_GROUP, "Backend"),
            ("", "Service"),
        ):
            yield (
                f"`spec.backendRef` is a {ref.get('kind')} of {ref.get('group')!r}, not a "
                "Backend or Service whose place can be checked"
            )
    else:
        for path, ref in _route_refs(spec):
            pair = (ref.get("group") or AIGW_GROUP, ref.get("kind") or "AIServiceBackend")
            if pair not in ((AIGW_GROUP, "AIServiceBackend"), (INFERENCE_GROUP, "InferencePool")):
                yield (
                    f"`{path}` is a {pair[1]} of {pair[0]}, not an AIServiceBackend or "
                    "InferencePool"
                )


# -- authentication and rate limits on every route -----------------------------------


def _targets(policy: ResourceView) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of what a policy targets (by name: a label selector
    cannot be resolved in a plan, so it covers nothing here)."""
    spec = policy.props.get("spec")
    if not isinstance(spec, Mapping):
        return set()
    refs = spec.get("targetRefs")
    refs = list(refs) if isinstance(refs, list) else []
    if isinstance(spec.get("targetRef"), Mapping):
        refs.append(spec["targetRef"])
    namespace = str(metadata(policy).get("namespace", "default"))
    return {
        (namespace, str(ref.get("kind")), str(ref.get("name")))
        for ref in refs
        if isinstance(ref, Mapping)
    }


def _route_subjects(route: ResourceView) -> set[tuple[str, str, str]]:
    """The route itself (and the HTTPRoute AI Gateway makes of it, same name) and each
    parent Gateway, as (namespace, kind, name)."""
    namespace = str(metadata(route).get("namespace", "default"))
    name = str(metadata(route).get("name", route.name))
    subjects = {(namespace, "AIGatewayRoute", name), (namespace, "HTTPRoute", name)}
    parents = dig(route.props, "spec", "parentRefs")
    for parent in parents if isinstance(parents, list) else []:
        if isinstance(parent, Mapping) and parent.get("kind", "Gateway") == "Gateway":
            subjects.add(
                (str(parent.get("namespace", namespace)), "Gateway", str(parent.get("name")))
            )
    return subjects


def _authenticates(policy: ResourceView) -> bool:
    spec = policy.props.get("spec")
    if not isinstance(spec, Mapping):
        return False
    keys = known(spec.get("apiKeyAuth"), "spec.apiKeyAuth")
    jwt = known(spec.get("jwt"), "spec.jwt")
    return bool(
        (isinstance(keys, Mapping) and keys.get("credentialRefs") and keys.get("extractFrom"))
        or (isinstance(jwt, Mapping) and jwt.get("providers"))
    )


def _limits(policy: ResourceView) -> bool:
    rules = known(dig(policy.props, "spec", "rateLimit", "global", "rules"), "spec.rateLimit")
    local = dig(policy.props, "spec", "rateLimit", "local", "rules")
    found = [r for r in (rules or []) + (local or []) if isinstance(r, Mapping)]
    return bool(found) and all(
        isinstance(dig(r, "limit", "requests"), int) and dig(r, "limit", "unit") for r in found
    )


def _uncovered(stack: StackView, types: tuple[str, ...], covers: Any, what: str) -> StackFindings:
    deferred = Deferred()
    covering: set[tuple[str, str, str]] = set()
    for policy in stack.of_type(*types):
        with deferred.each():
            if covers(policy):
                covering |= _targets(policy)
    for route in stack.of_type(*ROUTE_TYPES):
        subjects = _route_subjects(route)
        if not subjects & covering:
            name = metadata(route).get("name", route.name)
            gateways = sorted(s[2] for s in subjects if s[1] == "Gateway")
            yield (
                route.urn,
                (
                    f"AIGatewayRoute {name}: {what} targets it or its Gateway "
                    f"({', '.join(gateways) or 'no parentRefs'})"
                ),
            )
    deferred.finish()


@stack_rule("uae-llm-gateway-authentication")
def gateway_authentication(stack: StackView, settings: Settings) -> StackFindings:
    yield from _uncovered(
        stack, SECURITY_TYPES, _authenticates, "no SecurityPolicy with apiKeyAuth or jwt"
    )


@stack_rule("uae-llm-gateway-rate-limits")
def gateway_rate_limits(stack: StackView, settings: Settings) -> StackFindings:
    yield from _uncovered(
        stack, TRAFFIC_TYPES, _limits, "no BackendTrafficPolicy with rate limit rules"
    )
