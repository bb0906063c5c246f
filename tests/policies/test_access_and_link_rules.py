"""The EKS access-scope rule, the team way-in rule and the VPN tunnel rule on a compliant
twin (team access scoped to its namespace through an access entry with the team's
group, an admin with cluster-wide access, a VPN with strong tunnels; on premises a team
bound through the API server's OpenID Connect groups), on broken twins and on twins with
the property left out: exactly the expected rule fails, with a message naming the
problem."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from modules.aws.site_link import tunnel_options
from policies.rules import RULES_BY_ID
from policies.values import UNKNOWN_STRING
from tests.policies.builder import PROJECT, compliant_plan, find_step
from tests.policies.conftest import failing_rules, messages
from tests.policies.twins import twin_tests

Plan = dict[str, Any]
ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
VPN = "aws:ec2/vpnConnection:VpnConnection"
POLICY = "arn:aws:eks::aws:cluster-access-policy/"
ADMIN = "arn:aws:iam::123456789012:role/platform-admin"
TEAM = (
    "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/me-central-1/"
    "AWSReservedSSO_gpu-nlp_3c4d5e6f7a8b9c0d"
)
SCOPE = "aws-eks-access-scope"
TUNNELS = "aws-vpn-strong-tunnels"
WAY_IN = "k8s-team-has-a-way-in"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
OIDC_CONFIG = "gpuplatform-authentication-config"


def _add(plan: Plan, kind: str, name: str, inputs: dict[str, Any], **deps: list[str]) -> str:
    provider = find_step(plan, "aws:eks/cluster:Cluster", "cluster")["provider"]
    urn = f"urn:pulumi:test::{PROJECT}::{kind}::{name}"
    state = {
        "urn": urn,
        "type": kind,
        "custom": True,
        "provider": provider,
        "inputs": inputs,
        "propertyDependencies": deps,
        "dependencies": sorted({u for urns in deps.values() for u in urns}),
    }
    plan["steps"].append({"op": "create", "urn": urn, "provider": provider, "newState": state})
    return urn


def _vpn_inputs() -> dict[str, Any]:
    """What `modules.aws.site_link` declares for the tunnels, in the engine's camelCase."""
    options = tunnel_options("add", "arn:aws:logs:me-central-1:123456789012:log-group:vpn")
    camel = {
        key.replace("_ike_", "Ike")
        .replace("_phase1_", "Phase1")
        .replace("_phase2_", "Phase2")
        .replace("encryption_algorithms", "EncryptionAlgorithms")
        .replace("integrity_algorithms", "IntegrityAlgorithms")
        .replace("dh_group_numbers", "DhGroupNumbers")
        .replace("versions", "Versions"): value
        for key, value in options.items()
        if "log_options" not in key and "startup" not in key
    }
    return {"customerGatewayId": "cgw-1", "type": "ipsec.1", "vpnGatewayId": "vgw-1", **camel}


def _add_object(plan: Plan, kind: str, name: str, manifest: dict[str, Any]) -> None:
    """A Kubernetes object, with the compliant plan's cluster provider."""
    provider = find_step(plan, "kubernetes:core/v1:Namespace", "team-a")["provider"]
    urn = f"urn:pulumi:test::{PROJECT}::{kind}::{name}"
    state = {"urn": urn, "type": kind, "custom": True, "provider": provider, "inputs": manifest}
    plan["steps"].append({"op": "create", "urn": urn, "provider": provider, "newState": state})


def _team_binding(team: str, *groups: str) -> dict[str, Any]:
    """The tenancy layer's grant of a team's namespace (`team_rbac`)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "team-edit", "namespace": f"team-{team}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups
        ],
    }


def access_plan() -> Plan:
    """The compliant plan plus an admin (cluster-wide) and a team (its namespace, and its
    group team:nlp through its access entry)."""
    plan = compliant_plan()
    plan["config"][f"{PROJECT}:cluster"] = {"adminRoleArns": [ADMIN]}
    for name, principal in (("admin", ADMIN), ("team-nlp", TEAM)):
        _add(plan, ENTRY, name, {"clusterName": "c", "principalArn": principal, "type": "STANDARD"})
    _inputs(plan, ENTRY, "team-nlp")["kubernetesGroups"] = ["team:nlp"]
    _add_object(plan, BINDING, "team-nlp-edit", _team_binding("nlp", "team:nlp"))
    _add(
        plan,
        ASSOCIATION,
        "admin",
        {
            "clusterName": "c",
            "principalArn": ADMIN,
            "policyArn": f"{POLICY}AmazonEKSClusterAdminPolicy",
            "accessScope": {"type": "cluster"},
        },
    )
    _add(
        plan,
        ASSOCIATION,
        "team-nlp",
        {
            "clusterName": "c",
            "principalArn": TEAM,
            "policyArn": f"{POLICY}AmazonEKSEditPolicy",
            "accessScope": {"type": "namespace", "namespaces": ["team-nlp"]},
        },
    )
    _add(plan, VPN, "site-link", _vpn_inputs())
    return plan


def _inputs(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    return find_step(plan, kind, name)["inputs"]  # type: ignore[no-any-return]


def team_scope(**scope: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, ASSOCIATION, "team-nlp")["accessScope"] = scope

    return mutate


def team_policy(name: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, ASSOCIATION, "team-nlp")["policyArn"] = f"{POLICY}{name}"

    return mutate


def drop(kind: str, name: str, key: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, kind, name).pop(key)

    return mutate


def tunnel(key: str, value: list[Any]) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, VPN, "site-link")[key] = value

    return mutate


def no_admins(plan: Plan) -> None:
    plan["config"].pop(f"{PROJECT}:cluster")


def team_groups(*groups: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, ENTRY, "team-nlp")["kubernetesGroups"] = list(groups)

    return mutate


CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("team cluster-wide", team_scope(type="cluster"), SCOPE, "cluster-wide access"),
    ("team admin policy", team_policy("AmazonEKSClusterAdminPolicy"), SCOPE, "can change RBAC"),
    ("team namespace admin", team_policy("AmazonEKSAdminPolicy"), SCOPE, "AmazonEKSAdminPolicy"),
    ("scope missing", drop(ASSOCIATION, "team-nlp", "accessScope"), SCOPE, "no access scope"),
    ("no namespaces", team_scope(type="namespace", namespaces=[]), SCOPE, "names no namespace"),
    ("admin not in config", no_admins, SCOPE, f"gives {ADMIN} cluster-wide"),
    ("team's group given to no one", team_groups("team:speech"), WAY_IN, "team nlp: no one"),
    ("entry's groups missing", drop(ENTRY, "team-nlp", "kubernetesGroups"), WAY_IN, "team:nlp"),
    ("tunnel1 IKEv1", tunnel("tunnel1IkeVersions", ["ikev1", "ikev2"]), TUNNELS, "ikev1"),
    ("tunnel2 IKE missing", drop(VPN, "site-link", "tunnel2IkeVersions"), TUNNELS, "not set"),
    (
        "AES-128",
        tunnel("tunnel2Phase1EncryptionAlgorithms", ["AES128"]),
        TUNNELS,
        "tunnel2Phase1EncryptionAlgorithms` allows AES128",
    ),
    ("SHA-1", tunnel("tunnel1Phase2IntegrityAlgorithms", ["SHA1"]), TUNNELS, "allows SHA1"),
    ("DH group 2", tunnel("tunnel1Phase1DhGroupNumbers", [2, 20]), TUNNELS, "allows 2"),
    (
        "phase 2 DH missing",
        drop(VPN, "site-link", "tunnel1Phase2DhGroupNumbers"),
        TUNNELS,
        "tunnel1Phase2DhGroupNumbers` is not set",
    ),
]
#: Rule ids these cases cover (tests/policies/test_rules.py counts them as covered).
COVERED_RULE_IDS = frozenset(c[2] for c in CASES)


def test_the_compliant_twin_passes() -> None:
    assert failing_rules(access_plan()) == set()
    assert {SCOPE, TUNNELS, WAY_IN} <= set(RULES_BY_ID)


# (The compliant twin's test is the one above: it checks the rules exist too.)
_, test_the_broken_twin_fails_exactly_the_rule = twin_tests(
    lambda: copy.deepcopy(access_plan()), CASES
)


def test_a_principal_known_only_from_its_access_entry_is_still_judged() -> None:
    """In a real preview an association's principalArn is the entry's output (unknown):
    the rule reads the entry's input through the property dependency."""
    plan = access_plan()
    entry = find_step(plan, ENTRY, "team-nlp")["urn"]
    state = find_step(plan, ASSOCIATION, "team-nlp")
    state["inputs"]["principalArn"] = UNKNOWN_STRING
    state["propertyDependencies"] = {"principalArn": [entry]}
    state["inputs"]["accessScope"] = {"type": "cluster"}
    assert any(TEAM in m for m in messages(plan, SCOPE))


# -- on premises: a team's way in is the API server's OpenID Connect groups ------------

OIDC_DOCUMENT = """\
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://sso.dc1.internal/realms/gpu-platform
    audiences: [kubernetes]
  claimMappings:
    username: {claim: email, prefix: 'oidc:'}
    groups: {claim: groups, prefix: 'oidc:'}
"""


def oidc_plan() -> Plan:
    """The compliant plan plus a team bound through its identity provider's group
    (``oidc:ml-vision``) and the API server's configuration that prefixes it."""
    plan = compliant_plan()
    _add_object(plan, BINDING, "team-vision-edit",
                _team_binding("vision", "team:vision", "oidc:ml-vision"))  # fmt: skip
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": OIDC_CONFIG, "namespace": "kube-system"},
        "data": {"authentication-config.yaml": OIDC_DOCUMENT},
    }
    _add_object(plan, CONFIGMAP, OIDC_CONFIG, config)
    return plan


def no_oidc(plan: Plan) -> None:
    plan["steps"] = [s for s in plan["steps"] if s["newState"]["type"] != CONFIGMAP
                     or s["newState"]["inputs"]["metadata"]["name"] != OIDC_CONFIG]  # fmt: skip


def oidc_document(text: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        _inputs(plan, CONFIGMAP, OIDC_CONFIG)["data"]["authentication-config.yaml"] = text

    return mutate


OIDC_CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("no OpenID Connect issuer", no_oidc, WAY_IN, "team vision: no one can sign in"),
    (
        "groups prefix missing",
        oidc_document(OIDC_DOCUMENT.replace(", prefix: 'oidc:'}", "}")),
        WAY_IN,
        "team:vision, oidc:ml-vision",
    ),
]

test_the_oidc_twin_passes, test_the_broken_oidc_twin_fails_exactly_the_rule = twin_tests(
    oidc_plan, OIDC_CASES
)
