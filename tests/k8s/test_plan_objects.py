"""What each shipped stack's plan must contain for its teams and platform services: a
test fails when any of these objects is dropped from a plan or loses its setting
(found missing by `tests/tools/deletion_check.py`; see tests/README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from modules.k8s.fleet.spec import BURST_FLAVOR
from stacks.config import parse_stack_config
from stacks.offline_plan import load_stack_file
from tests.conftest import SHIPPED_STACKS, shipped_plan

PSA = "pod-security.kubernetes.io"


def objects(stack: str, kind: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [
        r.inputs
        for r in registrations.values()
        if r.type.startswith("kubernetes:") and r.type.endswith(f":{kind}")
    ]


def by_place(stack: str, kind: str) -> dict[tuple[str | None, str], dict[str, Any]]:
    return {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects(stack, kind)
    }


def teams(stack: str) -> list[str]:
    return [t.name for t in parse_stack_config(load_stack_file(stack)[0]).teams]


def oidc_groups(stack: str, team: str) -> list[str]:
    onprem = parse_stack_config(load_stack_file(stack)[0]).onprem
    return [onprem.oidc.team_group(team)] if onprem and onprem.oidc else []


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_team_namespace_is_fenced_in(stack: str) -> None:
    namespaces = by_place(stack, "Namespace")
    denies = by_place(stack, "NetworkPolicy")
    quotas = by_place(stack, "ResourceQuota")
    limits = by_place(stack, "LimitRange")
    accounts = by_place(stack, "ServiceAccount")
    bindings = by_place(stack, "RoleBinding")
    claims = by_place(stack, "PersistentVolumeClaim")
    for team in teams(stack):
        ns = f"team-{team}"
        labels = namespaces[(None, ns)]["metadata"]["labels"]
        assert labels[f"{PSA}/enforce"] in ("restricted", "baseline"), ns
        assert labels[f"{PSA}/audit"] == labels[f"{PSA}/warn"] == "restricted", ns
        assert labels[f"{PSA}/enforce-version"].startswith("v1."), ns
        assert denies[(ns, "default-deny-all")]["spec"] == {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
        }
        hard = quotas[(ns, "team-quota")]["spec"]["hard"]
        assert {"requests.cpu", "requests.memory", "requests.nvidia.com/gpu", "pods"} <= set(hard)
        assert limits[(ns, "container-defaults")]["spec"]["limits"][0]["type"] == "Container"
        assert (ns, "trainer") in accounts
        # The team's group; on premises with OpenID Connect also the team's
        # identity-provider group as the API server names it (prefixed).
        groups = [f"team:{team}", *oidc_groups(stack, team)]
        for name in ("team-edit", "team-queue-viewer"):
            assert bindings[(ns, name)]["subjects"] == [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                for group in groups
            ]
        assert (ns, "checkpoints") in claims
        # The queue-viewer binding grants read-only access to the team's queue status.
        assert by_place(stack, "Role")[(ns, "queue-viewer")]["rules"] == [
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": ["localqueues", "workloads"],
                "verbs": ["get", "list", "watch"],
            }
        ]
        assert bindings[(ns, "team-queue-viewer")]["roleRef"]["name"] == "queue-viewer"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_team_queues_into_its_own_cluster_queue(stack: str) -> None:
    cluster_queues = by_place(stack, "ClusterQueue")
    local_queues = by_place(stack, "LocalQueue")
    # The fleet's burst flavor belongs to the MultiKueue queues only (tests/k8s/test_fleet.py).
    flavors = {name for _, name in by_place(stack, "ResourceFlavor")} - {BURST_FLAVOR}
    assert flavors
    for team in teams(stack):
        queue = cluster_queues[(None, f"team-{team}")]["spec"]
        assert queue["namespaceSelector"] == {
            "matchLabels": {"kubernetes.io/metadata.name": f"team-{team}"}
        }
        assert {f["name"] for g in queue["resourceGroups"] for f in g["flavors"]} == flavors
        assert local_queues[(f"team-{team}", "training")]["spec"] == {
            "clusterQueue": f"team-{team}"
        }
    assert {name for _, name in by_place(stack, "PriorityClass")} == {
        "production",
        "research",
        "preemptible",
    }


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_platform_services_are_installed_and_watched(stack: str) -> None:
    charts = {o["chart"].rsplit("/", 1)[-1] for o in objects(stack, "Release")}
    assert {"kueue", "kube-prometheus-stack"} <= charts
    if parse_stack_config(load_stack_file(stack)[0]).target == "aws":
        assert "cluster-autoscaler" in charts
    namespaces = {name for _, name in by_place(stack, "Namespace")}
    assert {"monitoring", "kueue-system"} <= namespaces
    monitors = {m["metadata"]["name"]: m for m in objects(stack, "PodMonitor")}
    selector = monitors["training-jobs"]["spec"]["namespaceSelector"]
    assert sorted(selector["matchNames"]) == sorted(f"team-{t}" for t in teams(stack))
    rules = {r["metadata"]["name"]: r for r in objects(stack, "PrometheusRule")}
    groups = rules["gpuplatform-alerts"]["spec"]["groups"]
    assert any(r.get("alert") == "GpuXidError" for g in groups for r in g["rules"])


@pytest.mark.parametrize("stack", ["uae-prod", "uae-dev", "smb-cpu"])
def test_eks_volumes_are_encrypted_with_the_stacks_storage_key(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    (storage_key,) = [
        r.id
        for r in registrations.values()
        if r.type == "aws:kms/key:Key" and r.name.endswith("storage")
    ]
    classes = by_place(stack, "StorageClass")
    assert {name for _, name in classes} == {"gp3-encrypted", "gp3-encrypted-retain"}
    for (_, name), storage_class in classes.items():
        parameters = storage_class["parameters"]
        assert parameters["encrypted"] == "true", name
        assert parameters["kmsKeyId"].endswith(f":key/{storage_key}"), name
    assert classes[(None, "gp3-encrypted-retain")]["reclaimPolicy"] == "Retain"


def test_fsx_team_volumes_are_bound_to_their_claims() -> None:
    volumes = by_place("uae-prod", "PersistentVolume")
    for team in teams("uae-prod"):
        volume = volumes[(None, f"fsx-team-{team}")]["spec"]
        assert volume["claimRef"] == {"name": "checkpoints", "namespace": f"team-{team}"}
        assert volume["csi"]["driver"] == "fsx.csi.aws.com"
