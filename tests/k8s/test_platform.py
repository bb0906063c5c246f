"""The whole layer under Pulumi mocks: what the engine would receive.

Every object the program registers (not the charts' internals) is validated against the
OpenAPI schema of each supported Kubernetes version (strict), every CRD object against
its required fields, and every child must carry the cluster's provider explicitly and
sit under the KubernetesPlatform component.
"""

from __future__ import annotations

from collections import Counter

import kubernetes_validate
import pulumi_kubernetes as k8s
import pytest

from modules.k8s.common import POD_SECURITY_REASON_ANNOTATION
from modules.k8s.names import (
    CLUSTER_AUTOSCALER_SERVICE_ACCOUNT,
    KUBE_SYSTEM,
    SITE_CONFIGMAP_NAME,
    TeamPlacement,
)
from modules.k8s.platform.component import KubernetesPlatform
from modules.k8s.platform.summary import installed_charts, pool_plugins
from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS
from tests.k8s.crd_checks import crd_errors
from tests.k8s.fixtures import eks_args, onprem_args
from tests.k8s.mock_runtime import run
from tests.k8s.programs import STACKS, manifests, of_kind, registrations, releases
from tests.support.k8s_schema import is_builtin, schema_errors


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES_VERSIONS)
def test_every_registered_builtin_object_passes_the_strict_schema(stack: str, version: str) -> None:
    objects = [m for m in manifests(registrations(stack, version)) if is_builtin(m)]
    assert len(objects) > 40
    assert schema_errors(objects, version) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_registered_crd_object_has_its_required_fields(stack: str) -> None:
    crds = [m for m in manifests(registrations(stack)) if not is_builtin(m)]
    kinds = {m["kind"] for m in crds}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue", "PodMonitor", "PrometheusRule"} <= kinds
    assert crd_errors(crds) == []


def test_the_schema_check_is_strict_enough_to_fail() -> None:
    namespace = of_kind(registrations("eks"), "Namespace")[0]
    broken = {**namespace, "spec": {"finalizer": ["kubernetes"]}}  # misspelt field
    assert schema_errors([broken], "1.33")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.33.0", strict=True)


@pytest.mark.parametrize("stack", STACKS)
def test_every_child_uses_the_cluster_provider_explicitly(stack: str) -> None:
    records = registrations(stack)
    (provider,) = [r for r in records if r.type == "pulumi:providers:kubernetes"]
    children = [r for r in records if r.custom and r is not provider]
    assert children
    assert {r.provider for r in children} == {f"{provider.urn}::{provider.id}"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_is_parented_under_the_platform(stack: str) -> None:
    records = registrations(stack)
    (platform,) = [r for r in records if r.type == "gpuplatform:k8s:KubernetesPlatform"]
    by_urn = {r.urn: r for r in records}
    for record in records:
        if (
            record.type in ("pulumi:pulumi:Stack", "pulumi:providers:kubernetes")
            or record is platform
        ):
            continue
        chain = record
        while chain.parent and chain.parent != platform.urn:
            chain = by_urn[chain.parent]
        assert chain.parent == platform.urn, f"{record.name} is not under the platform"


def test_eks_installs_pinned_charts_into_platform_namespaces() -> None:
    found = releases(registrations("eks"))
    assert set(found) == {
        "cert-manager",
        "kube-prometheus-stack",
        "kueue",
        "kubeflow-trainer",
        "gpu-operator",
        "aws-efa-k8s-device-plugin",
        "cluster-autoscaler",
        "aws-fsx-csi-driver",
    }
    charts = installed_charts(eks_args())
    for name, release in found.items():
        assert release["version"] == charts[name].version
        assert release["chart"] == charts[name].chart
        assert release["namespace"] not in ("", "default")
        assert release["createNamespace"] is False
        if not release["chart"].startswith("oci://"):
            assert release["repositoryOpts"]["repo"].startswith("https://")


def test_onprem_installs_no_aws_parts_and_no_autoscaler() -> None:
    records = registrations("onprem")
    assert set(releases(records)) == {
        "cert-manager",
        "kube-prometheus-stack",
        "kueue",
        "kubeflow-trainer",
        "gpu-operator",
        "network-operator",
    }
    for manifest in manifests(records):
        text = repr(manifest)
        assert "amazonaws.com" not in text and "arn:aws" not in text, manifest["kind"]
    assert of_kind(records, "StorageClass") == []


def test_autoscaler_runs_as_the_service_account_the_aws_side_trusts() -> None:
    values = releases(registrations("eks"))["cluster-autoscaler"]["values"]
    assert values["rbac"]["serviceAccount"]["name"] == CLUSTER_AUTOSCALER_SERVICE_ACCOUNT
    assert releases(registrations("eks"))["cluster-autoscaler"]["namespace"] == KUBE_SYSTEM
    assert values["autoDiscovery"]["tags"] == [
        "k8s.io/cluster-autoscaler/enabled",
        "k8s.io/cluster-autoscaler/uae-prod",
    ]
    assert values["image"]["tag"] == "v1.33.0"


@pytest.mark.parametrize(
    ("stack", "site"), [("eks", "aws-me-central-1"), ("onprem", "ae-abudhabi-dc1")]
)
def test_the_site_is_declared_in_kube_system(stack: str, site: str) -> None:
    (configmap,) = [
        m
        for m in of_kind(registrations(stack), "ConfigMap")
        if m["metadata"]["name"] == SITE_CONFIGMAP_NAME
    ]
    assert configmap["metadata"]["namespace"] == KUBE_SYSTEM
    assert configmap["data"]["site"] == site
    assert configmap["data"]["country"] == "AE"


def test_platform_namespaces_say_why_they_are_not_restricted() -> None:
    for stack in STACKS:
        for ns in of_kind(registrations(stack), "Namespace"):
            labels = ns["metadata"]["labels"]
            if labels["pod-security.kubernetes.io/enforce"] != "restricted":
                assert ns["metadata"]["annotations"][POD_SECURITY_REASON_ANNOTATION]


def test_checkpoint_claims_are_protected() -> None:
    for stack in STACKS:
        claims = [
            r
            for r in registrations(stack)
            if r.type == "kubernetes:core/v1:PersistentVolumeClaim"
            and r.inputs["metadata"]["namespace"].startswith("team-")
        ]
        assert claims and all(r.protect for r in claims)


def test_counts_by_kind_are_what_the_plan_summary_shows() -> None:
    kinds = Counter(m["kind"] for m in manifests(registrations("eks")))
    # Two teams: a namespace, two quotas at most, a LimitRange, six policies on EKS...
    assert kinds["LocalQueue"] == kinds["ClusterQueue"] == 2
    assert kinds["ResourceFlavor"] == 3  # every pool but system
    team_policies = [
        m
        for m in manifests(registrations("eks"))
        if m["kind"] == "NetworkPolicy" and m["metadata"]["namespace"].startswith("team-")
    ]
    assert len(team_policies) == 2 * 6
    assert kinds["PriorityClass"] == 3


def test_pool_plugins_say_which_agents_land_on_which_pool() -> None:
    eks = pool_plugins(eks_args())
    assert "aws-efa-k8s-device-plugin" in eks["gpu-p5en"]
    assert "aws-efa-k8s-device-plugin" not in eks["gpu-g6"]
    assert "dcgm-exporter" in eks["gpu-g6"] and "dcgm-exporter" not in eks["cpu-pre"]
    assert "cluster-autoscaler" in eks["system"] and "prometheus" in eks["system"]
    assert "nvidia-driver" not in eks["gpu-p5en"]
    onprem = pool_plugins(onprem_args())
    assert "rdma-shared-device-plugin" in onprem["gpu-ib"]
    assert "rdma-shared-device-plugin" not in onprem["gpu-mig"]
    assert "mig-manager" in onprem["gpu-mig"] and "nvidia-driver" in onprem["gpu-ib"]
    assert all("cluster-autoscaler" not in plugins for plugins in onprem.values())


def test_placements_give_each_team_only_the_priorities_it_may_use() -> None:
    placements: dict[str, object] = {}

    def program() -> None:
        provider = k8s.Provider("cluster", kubeconfig="{}")
        platform = KubernetesPlatform("platform", onprem_args(provider=provider))
        placements.update(platform.placements)
        assert set(platform.team_ready) == {"vision", "nlp", "hpc"}
        assert platform.platform_ready

    run(program)
    vision, nlp = placements["vision"], placements["nlp"]
    assert isinstance(vision, TeamPlacement) and isinstance(nlp, TeamPlacement)
    assert vision.priority_classes == ("production", "research", "preemptible")
    assert nlp.priority_classes == ("research", "preemptible")
    assert nlp.secondary_network == "ipoib-nlp"
