"""Spark tenancy: each team's jobs run in a namespace of that team only.

Checked on the shipped Spark stacks and on uae-prod with a second team's job (the
shipped stacks have one team with a job each, which could not show a cross-team
grant): each SparkApplication, its driver and executors live in ``spark-<team>``; the
Spark Operator watches exactly those namespaces; no team's ServiceAccount holds any
Kubernetes right outside its own namespace (the plan's Roles, ClusterRoles and their
bindings evaluated as the API server's RBAC authorizer does, groups included); each
namespace is fenced with its own team's jobs only; on AWS each team's role is
associated with exactly (``spark-<team>``, ``spark-<team>``) and reaches only that
team's prefixes."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from modules.k8s.spark import spec as ss
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import load_stack_file, plan_registrations
from stacks.offline_runtime import Registration
from tests.conftest import shipped_plan

HELM = "kubernetes:helm.sh/v3:Release"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
#: uae-prod with a job of a second team (llm-research) next to nlp's.
TWO_TEAMS = "uae-prod+llm-research"
SECOND_JOB = {
    "name": "prepare-papers",
    "team": "llm-research",
    "source": "papers/2026-07",
    "dataset": "papers-v1",
    "executors": 2,
    "cores": 8,
    "memoryGib": 8,
    "pythonMemoryGib": 8,
}
#: Each plan with the teams that have a job in it.
PLANS = {
    "smb-cpu": ("analytics",),
    "uae-prod": ("nlp",),
    TWO_TEAMS: ("nlp", "llm-research"),
}


def two_teams_config() -> dict[str, str]:
    config, _ = load_stack_file("uae-prod")
    config = dict(config)
    section = json.loads(config["uae-gpu-platform:spark"])
    section["jobs"] = [*section["jobs"], SECOND_JOB]
    config["uae-gpu-platform:spark"] = json.dumps(section)
    return config


@functools.cache
def _two_teams_plan() -> dict[str, Registration]:
    _, secret_keys = load_stack_file("uae-prod")
    return plan_registrations("uae-prod", two_teams_config(), secret_keys)


def registrations(plan: str) -> dict[str, Registration]:
    if plan == TWO_TEAMS:
        return _two_teams_plan()
    return shipped_plan(plan)[0]


def kube_objects(plan: str, kind: str) -> list[dict[str, Any]]:
    """Every Kubernetes object of ``kind`` the plan registers (any component)."""
    return [
        r.inputs
        for r in registrations(plan).values()
        if isinstance(r.inputs, Mapping) and r.inputs.get("kind") == kind and r.type != HELM
    ]


def operator_values(plan: str) -> dict[str, Any]:
    (release,) = [
        r.inputs
        for r in registrations(plan).values()
        if r.type == HELM and r.inputs.get("name") == ss.OPERATOR_RELEASE
    ]
    return release["values"]  # type: ignore[no-any-return]


# -- an RBAC authorizer over the plan ------------------------------------------------------


def _subject_matches(subject: Mapping[str, Any], namespace: str, account: str) -> bool:
    """Whether a binding's subject is the ServiceAccount ``namespace/account`` (by name or
    through one of the groups the API server puts every ServiceAccount in)."""
    if subject["kind"] == "ServiceAccount":
        return bool(subject["name"] == account and subject.get("namespace") == namespace)
    if subject["kind"] == "Group":
        groups = {
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        }
        return subject["name"] in groups
    return False


def reach(plan: str, namespace: str, account: str) -> dict[str, list[Mapping[str, Any]]]:
    """Where the ServiceAccount holds rights (namespace, or ``*`` for cluster-wide) and
    the rules it holds there, from every Role, ClusterRole and binding of the plan."""
    roles = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o.get("rules") or []
        for o in kube_objects(plan, "Role")
    }
    cluster_roles = {
        o["metadata"]["name"]: o.get("rules") or [] for o in kube_objects(plan, "ClusterRole")
    }
    found: dict[str, list[Mapping[str, Any]]] = {}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for binding in kube_objects(plan, kind):
            if not any(
                _subject_matches(s, namespace, account) for s in binding.get("subjects") or []
            ):
                continue
            where = binding["metadata"].get("namespace", "*") if kind == "RoleBinding" else "*"
            ref = binding["roleRef"]
            if ref["kind"] == "ClusterRole":
                # An unknown ClusterRole (a built-in one such as edit) is counted as a
                # right: any right outside the team's namespace fails the tests.
                rules = cluster_roles.get(ref["name"], [{"unknown": ref["name"]}])
            else:
                rules = roles.get((where, ref["name"]), [])
            if rules:
                found.setdefault(where, []).extend(rules)
    return found


def _names(values: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {(v["metadata"]["namespace"], v["metadata"]["name"]) for v in values}


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("plan", PLANS)
def test_each_application_and_its_pods_live_in_their_teams_namespace(plan: str) -> None:
    applications = kube_objects(plan, "SparkApplication")
    assert sorted({a["metadata"]["labels"]["gpuplatform.ae/team"] for a in applications}) == (
        sorted(PLANS[plan])
    )
    for application in applications:
        team = application["metadata"]["labels"]["gpuplatform.ae/team"]
        assert application["metadata"]["namespace"] == f"spark-{team}"
        for role in ("driver", "executor"):
            part = application["spec"][role]
            assert part["serviceAccount"] == f"spark-{team}"
            assert part["template"]["spec"]["serviceAccountName"] == f"spark-{team}"
            assert part["labels"]["gpuplatform.ae/team"] == team


@pytest.mark.parametrize("plan", PLANS)
def test_the_operator_watches_exactly_the_teams_namespaces(plan: str) -> None:
    spark = operator_values(plan)["spark"]
    expected = [f"spark-{team}" for team in PLANS[plan]]
    # Never empty and never "": the chart reads either as every namespace, with a
    # ClusterRole over pods for the controller (charts/.../controller/rbac.yaml).
    assert spark["jobNamespaces"] == expected
    assert spark.get("jobNamespaceSelector", "") == ""
    # The platform's own ServiceAccounts and Role, not the chart's (whose Role would let
    # every Spark pod update and patch pods, Services and volume claims).
    assert spark["serviceAccount"] == {"create": False} and spark["rbac"] == {"create": False}
    applications = {a["metadata"]["namespace"] for a in kube_objects(plan, "SparkApplication")}
    assert applications == set(expected)
    namespaces = {n["metadata"]["name"] for n in kube_objects(plan, "Namespace")}
    assert set(expected) <= namespaces
    # No other spark-* namespace (the shared spark-jobs of before is gone).
    assert {n for n in namespaces if n.startswith("spark-")} == {
        *expected,
        ss.OPERATOR_NAMESPACE,
    }


@pytest.mark.parametrize("plan", PLANS)
def test_no_teams_spark_account_holds_a_right_outside_its_namespace(plan: str) -> None:
    for team in PLANS[plan]:
        own = f"spark-{team}"
        rights = reach(plan, own, own)
        assert set(rights) == {own}, (team, rights)
        # There: the drivers' rules only (their executors' pods and ConfigMaps).
        assert rights[own] == [dict(rule) for rule in ss.DRIVER_RULES]
    # Every Role and binding in a team's Spark namespace is that team's: a Role, bound to
    # that team's ServiceAccount alone.
    for team in PLANS[plan]:
        own = f"spark-{team}"
        bindings = [
            b for b in kube_objects(plan, "RoleBinding") if b["metadata"]["namespace"] == own
        ]
        assert _names(bindings) == {(own, ss.DRIVER_ROLE)}
        for binding in bindings:
            assert binding["roleRef"]["kind"] == "Role"
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": own, "namespace": own}
            ]
        roles = [r for r in kube_objects(plan, "Role") if r["metadata"]["namespace"] == own]
        assert _names(roles) == {(own, ss.DRIVER_ROLE)}


def test_the_authorizer_sees_a_cross_team_binding() -> None:
    """The check above is not vacuous: a binding of one team's account in another
    team's namespace is found."""
    plan = TWO_TEAMS
    bindings = kube_objects(plan, "RoleBinding")
    (binding,) = [b for b in bindings if b["metadata"]["namespace"] == "spark-nlp"]
    subjects = binding["subjects"]
    try:
        subjects.append(
            {
                "kind": "ServiceAccount",
                "name": "spark-llm-research",
                "namespace": "spark-llm-research",
            }
        )
        assert set(reach(plan, "spark-llm-research", "spark-llm-research")) == {
            "spark-llm-research",
            "spark-nlp",
        }
    finally:
        subjects.pop()
    assert set(reach(plan, "spark-llm-research", "spark-llm-research")) == {"spark-llm-research"}


@pytest.mark.parametrize("plan", PLANS)
def test_each_teams_namespace_is_fenced_for_its_own_jobs(plan: str) -> None:
    policies = _names(kube_objects(plan, "NetworkPolicy"))
    jobs = [a["metadata"] for a in kube_objects(plan, "SparkApplication")]
    for team in PLANS[plan]:
        own = f"spark-{team}"
        within = {
            f"allow-within-{job['name']}"
            for job in jobs
            if job["labels"]["gpuplatform.ae/team"] == team
        }
        assert {name for ns, name in policies if ns == own} == {
            "default-deny-all",
            "allow-dns",
            "allow-object-store",
            "allow-drivers-api-server",
            *within,
        }


@pytest.mark.parametrize("plan", PLANS)
def test_each_teams_role_is_bound_to_its_own_namespace_and_account(plan: str) -> None:
    records = registrations(plan)
    associations = [
        r
        for r in records.values()
        if r.type == ASSOCIATION and r.inputs["namespace"].startswith(ss.JOBS_NAMESPACE_PREFIX)
    ]
    assert sorted((a.inputs["namespace"], a.inputs["serviceAccount"]) for a in associations) == (
        sorted((f"spark-{t}", f"spark-{t}") for t in PLANS[plan])
    )
    for association in associations:
        team = association.inputs["serviceAccount"].removeprefix("spark-")
        assert f":role/spark-{team}-" in association.inputs["roleArn"]
        (policy,) = [
            json.loads(r.inputs["policy"])
            for r in records.values()
            # The inline policy of the role of the association's PodIdentityRole.
            if r.type == ROLE_POLICY
            and r.parent.endswith(f"PodIdentityRole$aws:iam/role:Role::spark-{team}")
            and association.parent.endswith(f"PodIdentityRole::spark-{team}")
        ]
        text = json.dumps(policy)
        assert f"teams/{team}/raw/" in text and f"spark-events/{team}/" in text
        for other in PLANS[plan]:
            if other != team:
                assert f"/{other}/" not in text


def test_a_team_whose_namespace_would_be_the_operators_is_refused() -> None:
    config = two_teams_config()
    teams = json.loads(config["uae-gpu-platform:teams"])
    teams.append({"name": "operator"})
    config["uae-gpu-platform:teams"] = json.dumps(teams)
    section = json.loads(config["uae-gpu-platform:spark"])
    section["jobs"] = [*section["jobs"], {**SECOND_JOB, "name": "j", "team": "operator"}]
    config["uae-gpu-platform:spark"] = json.dumps(section)
    with pytest.raises(ConfigError) as err:
        parse_stack_config(config)
    (problem,) = err.value.problems
    assert problem.startswith("uae-gpu-platform:spark.jobs[2].team") and "spark-operator" in problem


def test_the_operator_is_never_told_to_watch_every_namespace() -> None:
    with pytest.raises(ValueError, match="at least one job namespace"):
        ss.operator_values(ss.SparkSpec(enabled=True), {})
