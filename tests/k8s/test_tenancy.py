"""Team namespaces: quota, limit range, default-deny policy, Pod Security, RBAC."""

from __future__ import annotations

from typing import Any

import pytest

from modules.k8s.names import (
    MONITORING_NAMESPACE,
    TRAINER_SERVICE_ACCOUNT,
    team_group,
    team_placement,
)
from modules.k8s.tenancy.quotas import FlavorQuota, namespace_ceiling, team_flavor_quotas
from modules.k8s.tenancy.spec import (
    POD_IDENTITY_AGENT_CIDR,
    TeamSpec,
    network_policies,
    team_manifests,
    team_namespace_manifest,
    trainer_service_account,
)
from modules.validation import InvalidArgsError
from tests.k8s.fixtures import CPU, G6, P5EN, SYSTEM, eks_args, onprem_args

VISION = eks_args().teams[0]


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def test_a_team_namespace_gets_quota_limit_range_default_deny_and_psa_labels() -> None:
    args = eks_args()
    namespace = team_namespace_manifest(VISION, args.kubernetes_version)
    objects = team_manifests(VISION, args)

    labels = namespace["metadata"]["labels"]
    assert namespace["metadata"]["name"] == "team-vision"
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.33"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"

    assert all(m["metadata"]["namespace"] == "team-vision" for m in objects)
    quota = next(q for q in by_kind(objects, "ResourceQuota") if "scopeSelector" not in q["spec"])
    assert {"requests.cpu", "requests.memory", "requests.nvidia.com/gpu", "pods"} <= set(
        quota["spec"]["hard"]
    )
    (limits,) = by_kind(objects, "LimitRange")
    assert limits["spec"]["limits"][0]["defaultRequest"] == {"cpu": "250m", "memory": "512Mi"}
    deny = next(
        p for p in by_kind(objects, "NetworkPolicy") if p["metadata"]["name"] == "default-deny-all"
    )
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_quota_follows_the_pools_and_borrowing() -> None:
    pools = (SYSTEM, P5EN, G6, CPU)
    quotas = team_flavor_quotas(VISION, pools)
    # CPU pools first, the system pool is not a queue target.
    assert [q.pool for q in quotas] == ["cpu-pre", "gpu-g6", "gpu-p5en"]
    # 16 GPUs of a p5en (8 GPUs, 192 vCPUs, 2048 GiB) are two nodes' allocatable share:
    # the platform keeps 5% of each node (10 vCPUs, 103 GiB).
    assert quotas[2] == FlavorQuota("gpu-p5en", cpu=2 * 182, memory_gib=2 * 1945, gpus=16)
    # A time-sliced g6 advertises 4 x 4 = 16 GPU slices per node (48 - 3 vCPUs, 192 - 10 GiB).
    assert quotas[1] == FlavorQuota("gpu-g6", cpu=45, memory_gib=182, gpus=16)
    assert quotas[0] == FlavorQuota("cpu-pre", cpu=64, memory_gib=256, gpus=0)
    ceiling = namespace_ceiling(VISION, pools)  # 50% borrowing on top
    assert ceiling.gpus == (16 + 16) * 3 // 2
    assert ceiling.cpu == (364 + 45 + 64) * 3 // 2


def test_a_team_cannot_use_priorities_above_its_maximum() -> None:
    nlp = TeamSpec("nlp", gpu_quota=8)  # max_priority research
    quotas = by_kind(team_manifests(nlp, eks_args()), "ResourceQuota")
    (gate,) = [q for q in quotas if "scopeSelector" in q["spec"]]
    assert gate["spec"]["hard"] == {"pods": "0"}
    assert gate["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["production"]
    assert nlp.allowed_priorities == ("research", "preemptible")
    # A production team has no gate at all.
    assert all(
        "scopeSelector" not in q["spec"]
        for q in by_kind(team_manifests(VISION, eks_args()), "ResourceQuota")
    )


def _allows(policies: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    return [rule for p in policies for rule in p["spec"].get(direction, [])]


def test_network_policies_allow_only_what_training_needs_on_eks() -> None:
    policies = network_policies(VISION, vpc_cidr="10.42.0.0/16")
    egress = _allows(policies, "egress")
    ingress = _allows(policies, "ingress")
    dns = [r for r in egress if {"protocol": "UDP", "port": 53} in r.get("ports", [])]
    assert dns and dns[0]["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {"to": [{"podSelector": {}}]} in egress  # ranks of a job talk to each other
    assert {"from": [{"podSelector": {}}]} in ingress
    scrape = [r for r in ingress if r.get("ports") == [{"protocol": "TCP", "port": "metrics"}]]
    ns_selector = scrape[0]["from"][0]["namespaceSelector"]["matchLabels"]
    assert ns_selector == {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
    https = [r for r in egress if r.get("ports") == [{"protocol": "TCP", "port": 443}]]
    assert https[0]["to"] == [{"ipBlock": {"cidr": "10.42.0.0/16"}}]
    identity = [r for r in egress if r["to"] == [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}]]
    assert identity, "pods could not fetch their team role's credentials"
    # Nothing else: no egress to the internet.
    cidrs = [b["ipBlock"]["cidr"] for r in egress for b in r["to"] if "ipBlock" in b]
    assert "0.0.0.0/0" not in cidrs


def test_on_prem_policies_open_only_the_configured_destinations() -> None:
    args = onprem_args()
    policies = by_kind(team_manifests(VISION, args), "NetworkPolicy")
    cidrs = [
        b["ipBlock"]["cidr"] for r in _allows(policies, "egress") for b in r["to"] if "ipBlock" in b
    ]
    assert cidrs == ["10.20.0.0/24"]
    assert not any(p["metadata"]["name"] == "allow-pod-identity-agent" for p in policies)


def test_the_team_group_may_edit_only_its_namespace() -> None:
    objects = team_manifests(VISION, eks_args())
    bindings = by_kind(objects, "RoleBinding")
    assert not by_kind(objects, "ClusterRoleBinding")
    edit = next(b for b in bindings if b["roleRef"]["name"] == "edit")
    assert edit["roleRef"]["kind"] == "ClusterRole"  # bound in the namespace only
    assert edit["subjects"] == [
        {"kind": "Group", "name": "team:vision", "apiGroup": "rbac.authorization.k8s.io"}
    ]
    assert team_group("vision") == "team:vision"


def test_trainer_service_account_has_no_api_token() -> None:
    account = trainer_service_account(VISION)
    assert account["metadata"]["name"] == TRAINER_SERVICE_ACCOUNT == "trainer"
    assert account["automountServiceAccountToken"] is False


def test_placement_is_what_the_training_job_needs() -> None:
    placement = team_placement("vision", secondary_network=True)
    assert placement.namespace == "team-vision"
    assert placement.local_queue == "training"
    assert placement.service_account == "trainer"
    assert placement.checkpoint_claim == "checkpoints"
    assert placement.priority_classes == ("production", "research", "preemptible")
    assert placement.secondary_network == "ipoib-vision"


def test_team_spec_reports_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as error:
        TeamSpec(
            "Vision_Team",
            gpu_quota=-1,
            borrow_limit_percent=5000,
            fair_share_weight=0,
            pod_security="privileged",  # type: ignore[arg-type]
        )
    fields = {p.field for p in error.value.problems}
    assert fields == {
        "name",
        "gpu_quota",
        "borrow_limit_percent",
        "fair_share_weight",
        "pod_security",
    }
