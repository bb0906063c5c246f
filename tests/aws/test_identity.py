"""Who gets into the EKS cluster: a team member, followed from their Identity Center
group to what they may do, in the uae-prod plan (access entry, namespace-scoped access
policy, the RBAC bindings of the group ``team:<name>``); the identity section's
validation, each problem named with its key, all at once."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from modules.aws.identity_spec import (
    ADMIN_POLICY_ARNS,
    CLUSTER_ADMIN_POLICY_ARN,
    EDIT_POLICY_ARN,
    GROUP_ID,
    GROUP_TAG,
    TEAM_TAG,
    TeamAccessSpec,
)
from modules.validation import InvalidArgsError
from policies.model import StackView
from policies.review.plan import parse_plan, stack_resources
from policies.rules import RULES_BY_ID
from policies.settings import Settings
from stacks.config import PROJECT
from stacks.config_parsing import ConfigError
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan
from tests.stacks.test_fleet_config import NS, parsed

STACK = "uae-prod"
ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ADMIN = "arn:aws:iam::123456789012:role/platform-admin"
RBAC_GROUP = "rbac.authorization.k8s.io"
WRITE = ("create", "update", "patch", "delete")
WAY_IN = "k8s-team-has-a-way-in"


def of_type(type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(STACK)
    return sorted((r for r in registrations.values() if r.type == type_token), key=lambda r: r.urn)


# -- a small authorizer over the plan: EKS access policies, then Kubernetes RBAC --------
#
# EKS authorizes a request when one of the principal's access policy associations
# covers it (cluster scope: every namespace; namespace scope: the listed ones), else
# Kubernetes RBAC decides for the principal's Kubernetes groups. AmazonEKSEditPolicy
# and the built-in ClusterRole `edit` allow every verb on namespaced objects except RBAC
# objects; the view policy and role read only; ClusterAdmin allows everything.


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    namespace: str | None  # None: a cluster-scoped object


def _policy_allows(policy: str, request: Request) -> bool:
    name = policy.rsplit("/", 1)[-1]
    if name == "AmazonEKSClusterAdminPolicy":
        return True
    if request.namespace is None:
        return False
    if name in ("AmazonEKSEditPolicy", "edit"):
        return request.group != RBAC_GROUP
    if name in ("AmazonEKSViewPolicy", "view"):
        return request.verb in ("get", "list", "watch") and request.resource != "secrets"
    return False


def _rules_allow(rules: Iterable[dict[str, list[str]]], request: Request) -> bool:
    return any(
        request.group in rule.get("apiGroups", [])
        and request.resource in rule.get("resources", [])
        and request.verb in rule.get("verbs", [])
        for rule in rules
    )


def allowed(principal: str, request: Request) -> bool:
    entries = [e for e in of_type(ENTRY) if e.inputs["principalArn"] == principal]
    if not entries:
        return False  # no access entry: not authenticated at all
    for association in of_type(ASSOCIATION):
        if association.inputs["principalArn"] != principal:
            continue
        scope = association.inputs["accessScope"]
        in_scope = scope["type"] == "cluster" or request.namespace in scope.get("namespaces", [])
        if in_scope and _policy_allows(association.inputs["policyArn"], request):
            return True
    groups = {g for e in entries for g in e.inputs.get("kubernetesGroups", [])}
    roles = {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r for r in of_type(ROLE)
    }
    for binding in of_type(ROLE_BINDING) + of_type(CLUSTER_ROLE_BINDING):
        subjects = {s["name"] for s in binding.inputs["subjects"] if s["kind"] == "Group"}
        namespace = binding.inputs["metadata"].get("namespace")
        if not subjects & groups or (namespace is not None and namespace != request.namespace):
            continue
        ref = binding.inputs["roleRef"]
        if ref["kind"] == "ClusterRole" and _policy_allows(ref["name"], request):
            return True
        role = roles.get((namespace, ref["name"])) if ref["kind"] == "Role" else None
        if role is not None and _rules_allow(role.inputs["rules"], request):
            return True
    return False


def test_a_team_member_is_followed_from_the_group_to_the_permissions() -> None:
    access = next(t for t in parsed(STACK).identity.teams if t.team == "nlp")  # type: ignore[union-attr]
    # The group's entry: found by the group id it serves, for the role the group assumes.
    (entry,) = [
        e for e in of_type(ENTRY) if e.inputs.get("tags", {}).get(GROUP_TAG) == access.group
    ]
    assert entry.inputs["principalArn"] == access.role_arn
    assert entry.inputs["type"] == "STANDARD"
    assert entry.inputs["kubernetesGroups"] == ["team:nlp"]
    assert entry.inputs["tags"][TEAM_TAG] == "nlp"
    # Its one access policy: edit, scoped to the team's namespace.
    (association,) = [
        a for a in of_type(ASSOCIATION) if a.inputs["principalArn"] == access.role_arn
    ]
    assert association.inputs["policyArn"] == EDIT_POLICY_ARN
    assert association.inputs["accessScope"] == {"type": "namespace", "namespaces": ["team-nlp"]}
    # The RBAC bindings of its Kubernetes group: all in team-nlp, none cluster-wide.
    bound = [
        b
        for b in of_type(ROLE_BINDING) + of_type(CLUSTER_ROLE_BINDING)
        if {"kind": "Group", "name": "team:nlp", "apiGroup": RBAC_GROUP} in b.inputs["subjects"]
    ]
    assert {b.inputs["metadata"].get("namespace") for b in bound} == {"team-nlp"}
    assert {b.inputs["metadata"]["name"] for b in bound} == {
        "team-edit",
        "team-queue-viewer",
        "team-trainjob-editor",
    }

    member = access.role_arn
    for verb in WRITE:
        assert allowed(member, Request(verb, "batch", "jobs", "team-nlp"))
        assert allowed(member, Request(verb, "", "pods", "team-nlp"))
    assert allowed(member, Request("list", "kueue.x-k8s.io", "localqueues", "team-nlp"))
    # Not another team's namespace, not cluster-scoped objects, not RBAC in its own.
    for team in ("speech", "llm-research"):
        for verb in ("get", "list", "create"):
            assert not allowed(member, Request(verb, "", "pods", f"team-{team}"))
            assert not allowed(member, Request(verb, "", "secrets", f"team-{team}"))
            assert not allowed(
                member, Request(verb, "kueue.x-k8s.io", "localqueues", f"team-{team}")
            )
    assert not allowed(member, Request("list", "", "nodes", None))
    assert not allowed(member, Request("create", RBAC_GROUP, "rolebindings", "team-nlp"))
    # The administrator, by contrast, may do anything anywhere.
    assert allowed(ADMIN, Request("delete", "", "pods", "team-speech"))
    assert allowed(ADMIN, Request("list", "", "nodes", None))


def test_every_team_role_is_fenced_to_its_namespace_and_admins_are_separate() -> None:
    config = parsed(STACK)
    assert config.identity is not None
    teams = {t.role_arn: t.team for t in config.identity.teams}
    assert set(teams) & set(config.cluster.admin_role_arns) == set()
    by_principal: dict[str, list[dict[str, object]]] = {}
    for association in of_type(ASSOCIATION):
        by_principal.setdefault(association.inputs["principalArn"], []).append(association.inputs)
    assert set(by_principal) == set(teams) | set(config.cluster.admin_role_arns)
    for role, team in teams.items():
        (only,) = by_principal[role]
        assert only["accessScope"] == {"type": "namespace", "namespaces": [f"team-{team}"]}
        assert only["policyArn"] not in ADMIN_POLICY_ARNS
    for admin in config.cluster.admin_role_arns:
        (only,) = by_principal[admin]
        assert only == {
            **only,
            "policyArn": CLUSTER_ADMIN_POLICY_ARN,
            "accessScope": {"type": "cluster"},
        }


def test_the_group_id_pattern_is_the_identity_stores_own() -> None:
    """botocore's identitystore model defines GroupId (optionally as an ARN); the spec
    takes the id itself, with the same pattern."""
    model = botocore.session.get_session().get_service_model("identitystore")
    pattern = (
        model.operation_model("DescribeGroup").input_shape.members["GroupId"].metadata["pattern"]
    )
    assert pattern.endswith(GROUP_ID.pattern.removeprefix("^").removesuffix("$"))
    assert GROUP_ID.match("9067c2b4d1-1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b")
    assert GROUP_ID.match("1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b")
    assert not GROUP_ID.match("team-nlp")


def test_a_team_access_entry_reports_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as raised:
        TeamAccessSpec(team="nlp", group="nlp-group", role_arn="platform-admin", access="admin")  # type: ignore[arg-type]
    assert [p.field for p in raised.value.problems] == ["group", "role_arn", "access"]
    assert "admin rights are for cluster.adminRoleArns only" in str(raised.value)


def _identity(*teams: dict[str, str]) -> dict[str, object]:
    return {"provider": "iam-identity-center", "teams": list(teams)}


NLP = {
    "team": "nlp",
    "group": "9067c2b4d1-3b4c5d6e-7f8a-4b9c-8d0e-2f3a4b5c6d7e",
    "roleArn": "arn:aws:iam::123456789012:role/AWSReservedSSO_gpu-nlp_3c4d5e6f7a8b9c0d",
}


def test_identity_problems_come_together_with_their_keys() -> None:
    admin_as_team = {**NLP, "team": "speech", "roleArn": ADMIN}
    unknown = {**NLP, "team": "vision", "group": NLP["group"]}
    with pytest.raises(ConfigError) as raised:
        parsed(STACK, identity=_identity(NLP, admin_as_team, unknown))
    problems = raised.value.problems
    assert (
        f"{NS}identity.teams[1].roleArn: got '{ADMIN}'; is also in cluster.adminRoleArns"
        in "\n".join(problems)
    )
    assert any(
        p.startswith(f"{NS}identity.teams[2].team: got 'vision'; must be one of the teams")
        for p in problems
    )
    assert any(
        p.startswith(f"{NS}identity.teams[2].roleArn:") and "its own role" in p for p in problems
    )
    # teams[0] and teams[2] share a role: both are named.
    assert any(p.startswith(f"{NS}identity.teams[0].roleArn:") for p in problems)
    assert len(problems) == 4, problems


def test_identity_is_for_aws_stacks_only() -> None:
    with pytest.raises(ConfigError) as raised:
        parsed("onprem-ib", identity=_identity(NLP))
    assert f"{NS}identity: got 'identity'; only for target aws" in "\n".join(raised.value.problems)


def test_the_shipped_identity_section_is_what_the_plan_serves() -> None:
    config = parsed(STACK)
    assert config.identity is not None
    entries = {e.inputs["principalArn"]: e.inputs for e in of_type(ENTRY)}
    for access in config.identity.teams:
        assert json.dumps(entries[access.role_arn]["tags"], sort_keys=True) == json.dumps(
            {**entries[access.role_arn]["tags"], GROUP_TAG: access.group, TEAM_TAG: access.team},
            sort_keys=True,
        )


# -- every shipped team has a way in; the pack flags a team without one -----------------

SHIPPED_STACKS = ("uae-prod", "uae-dev", "smb-cpu", "onprem-ib")
#: How a team gets in: an access entry (AWS), the API server's OIDC settings (on premises).
WAYS_IN = {ENTRY, "kubernetes:core/v1:ConfigMap"}


def _way_in_findings(plan: dict[str, Any]) -> list[tuple[str | None, str]]:
    """What `k8s-team-has-a-way-in` finds in a plan document (that rule alone)."""
    parsed = parse_plan(plan, Path("plan.json"))
    stack = StackView.of(stack_resources(parsed))
    return list(RULES_BY_ID[WAY_IN].check_stack(stack, Settings.from_config(None)))


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_team_has_a_way_in_and_without_it_the_pack_says_so(stack: str) -> None:
    """smb-cpu and uae-dev map their teams' Identity Center groups (``identity``),
    uae-prod its three, onprem-ib its teams' OIDC groups; without those, every team's
    namespace grant is flagged."""
    _, plan = shipped_plan(stack)
    # The plan's config holds each section as its JSON text, as `pulumi preview` does.
    teams = [t["name"] for t in json.loads(plan["config"][f"{PROJECT}:teams"])]
    assert teams and _way_in_findings(plan) == []
    cut = {**plan, "steps": [s for s in plan["steps"] if s["newState"]["type"] not in WAYS_IN]}
    flagged = [message for _, message in _way_in_findings(cut)]
    assert sorted(m.split(":", 1)[0] for m in flagged) == sorted(f"team {t}" for t in teams)
