"""No workload namespace allows privileged pods.

Team namespaces enforce ``restricted`` (``baseline`` only by explicit team config on a
fabric stack); ``privileged`` exists only in the platform's own namespaces, where no team
has any RBAC binding.
"""

from __future__ import annotations

from typing import Any

import pytest

from modules.k8s.common import namespace
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.tenancy.spec import TeamSpec, team_namespace_manifest
from modules.validation import InvalidArgsError
from tests.k8s.fixtures import CPU, SYSTEM, eks_args, onprem_args
from tests.k8s.programs import STACKS, of_kind, registrations

ENFORCE = "pod-security.kubernetes.io/enforce"
PLATFORM_NAMESPACES = {
    "cert-manager",
    "monitoring",
    "gpu-operator",
    "nvidia-network-operator",
    "kueue-system",
    "gpuplatform-storage",
    "kubeflow-system",
}


def _enforced(ns: dict[str, Any]) -> str:
    return str(ns["metadata"]["labels"][ENFORCE])


@pytest.mark.parametrize("stack", STACKS)
def test_no_workload_namespace_allows_privileged_pods(stack: str) -> None:
    records = registrations(stack)
    namespaces = of_kind(records, "Namespace")
    workload = [ns for ns in namespaces if ns["metadata"]["name"] not in PLATFORM_NAMESPACES]
    assert workload, "the stack has team namespaces"
    for ns in workload:
        assert ns["metadata"]["name"].startswith("team-")
        assert _enforced(ns) in ("restricted", "baseline"), ns["metadata"]["name"]
    # Privileged namespaces are platform ones, and no team is bound in any of them.
    privileged = {ns["metadata"]["name"] for ns in namespaces if _enforced(ns) == "privileged"}
    assert privileged <= PLATFORM_NAMESPACES
    for binding in of_kind(records, "RoleBinding") + of_kind(records, "ClusterRoleBinding"):
        for subject in binding.get("subjects", []):
            if subject["name"].startswith("team:"):
                team = subject["name"].removeprefix("team:")
                assert binding["metadata"]["namespace"] == f"team-{team}"


def test_every_namespace_enforces_a_level_and_audits_restricted() -> None:
    for stack in STACKS:
        for ns in of_kind(registrations(stack), "Namespace"):
            labels = ns["metadata"]["labels"]
            assert labels[ENFORCE] in ("privileged", "baseline", "restricted")
            assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_a_team_cannot_ask_for_privileged() -> None:
    with pytest.raises(InvalidArgsError):
        TeamSpec("ops", pod_security="privileged")  # type: ignore[arg-type]


def test_baseline_is_refused_on_a_stack_without_a_fabric() -> None:
    with pytest.raises(InvalidArgsError) as error:
        eks_args(pools=(SYSTEM, CPU), teams=(TeamSpec("hpc", pod_security="baseline"),))
    assert [p.field for p in error.value.problems] == ["teams[hpc].pod_security"]


def test_baseline_team_namespace_records_its_reason() -> None:
    hpc = next(t for t in onprem_args().teams if t.pod_security == "baseline")
    ns = team_namespace_manifest(hpc, "1.33")
    assert _enforced(ns) == "baseline"
    assert "sshd" in ns["metadata"]["annotations"]["gpuplatform.ae/pod-security-reason"]


def test_a_namespace_looser_than_restricted_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        namespace(MONITORING_NAMESPACE, "privileged", "1.33")
