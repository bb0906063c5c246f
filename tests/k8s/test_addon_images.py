"""The cluster add-ons (the Cluster Autoscaler, the FSx CSI driver, OpenCost, the GPU
Operator, Kueue, the monitoring stack; on premises the Network Operator too) pull their
images from the stack's mirror: values checked against the charts' vendored values.yaml,
and the shipped plans' releases and repositories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.autoscaler import spec as autoscaler
from modules.k8s.cost.spec import OPENCOST, OPENCOST_IMAGE, CostInputs, UnitPrices, opencost_values
from modules.k8s.gpu.spec import (
    GPU_OPERATOR_IMAGES,
    NFD_IMAGE,
    gpu_operator_repositories,
    gpu_operator_values,
)
from modules.k8s.mirror import mirror_path
from modules.k8s.monitoring.spec import MIRRORED_REPOSITORIES as MONITORING_REPOSITORIES
from modules.k8s.monitoring.spec import MonitoringSpec, kube_prometheus_stack_values
from modules.k8s.queueing.spec import KUEUE_IMAGE, QueueingSpec, kueue_values
from modules.k8s.storage.spec import FSX_CSI_IMAGES, fsx_csi_values
from modules.k8s.versions import CLUSTER_AUTOSCALER, CLUSTER_AUTOSCALER_IMAGE_TAGS, FSX_CSI_DRIVER
from tests.conftest import shipped_plan
from tests.k8s.test_serving import chart_values, unknown_keys

MIRROR = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-test"
AWS_STACKS = ("uae-prod", "uae-dev", "smb-cpu")


def _release(stack: str, chart: str) -> dict[str, Any] | None:
    records, _ = shipped_plan(stack)
    found = [
        r.inputs
        for r in records.values()
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("chart") == chart
    ]
    return found[0] if found else None


def _repositories(stack: str) -> set[str]:
    records, _ = shipped_plan(stack)
    return {r.inputs["name"] for r in records.values() if r.type == "aws:ecr/repository:Repository"}


def test_the_autoscaler_image_key_is_the_charts_and_names_the_mirror() -> None:
    defaults = chart_values(f"cluster-autoscaler-{CLUSTER_AUTOSCALER.version}-values.yaml")
    values = autoscaler.cluster_autoscaler_values("c", "me-central-1", "1.33", MIRROR)
    assert unknown_keys({"image": values["image"]}, defaults) == []
    # The chart's own image, moved under the mirror: same repository path, pulled always.
    upstream = defaults["image"]["repository"]
    assert upstream == f"{autoscaler.UPSTREAM_REGISTRY}/{autoscaler.REPOSITORY}"
    assert values["image"] == {
        "repository": f"{MIRROR}/{autoscaler.REPOSITORY}",
        "tag": CLUSTER_AUTOSCALER_IMAGE_TAGS["1.33"],
        "pullPolicy": "Always",
    }
    # The chart's default tag is the version this chart release was made for.
    assert defaults["image"]["tag"] in CLUSTER_AUTOSCALER_IMAGE_TAGS.values()
    unmirrored = autoscaler.cluster_autoscaler_values("c", "me-central-1", "1.33")
    assert unmirrored["image"]["repository"] == upstream


def test_the_fsx_driver_images_are_the_charts_own_moved_under_the_mirror() -> None:
    defaults = chart_values(f"aws-fsx-csi-driver-{FSX_CSI_DRIVER.version}-values.yaml")
    values = fsx_csi_values(MIRROR)
    assert unknown_keys({k: values[k] for k in ("image", "sidecars")}, defaults) == []
    for repository, (upstream, tag, sidecar) in FSX_CSI_IMAGES.items():
        chart = defaults["sidecars"][sidecar]["image"] if sidecar else defaults["image"]
        ours = values["sidecars"][sidecar]["image"] if sidecar else values["image"]
        # What the chart pulls by default is exactly what the mirror must hold.
        assert (chart["repository"], chart["tag"]) == (f"{upstream}/{repository}", tag)
        assert ours == {"repository": f"{MIRROR}/{repository}", "tag": tag, "pullPolicy": "Always"}
    assert set(values["sidecars"]) == set(defaults["sidecars"])


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_on_aws_the_add_ons_pull_from_repositories_the_stack_creates(stack: str) -> None:
    mirror = f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}"
    repositories = _repositories(stack)
    release = _release(stack, CLUSTER_AUTOSCALER.chart)
    assert release is not None
    assert release["values"]["image"]["repository"] == f"{mirror}/{autoscaler.REPOSITORY}"
    assert f"gpu-{stack}/{autoscaler.REPOSITORY}" in repositories
    fsx = _release(stack, FSX_CSI_DRIVER.chart)
    wanted = {f"gpu-{stack}/{name}" for name in FSX_CSI_IMAGES}
    if fsx is None:  # a stack without FSx mirrors none of its images
        assert not wanted & repositories
        return
    assert fsx["values"]["image"]["repository"].startswith(f"{mirror}/")
    assert all(
        s["image"]["repository"].startswith(f"{mirror}/")
        for s in fsx["values"]["sidecars"].values()
    )
    assert wanted <= repositories


def test_opencost_runs_the_charts_own_image_digest_from_the_mirror() -> None:
    vendored = Path(__file__).resolve().parent / "vendor" / "opencost" / "values.yaml"
    defaults = yaml.safe_load(vendored.read_text(encoding="utf-8"))
    chart = defaults["opencost"]["exporter"]["image"]
    # The exporter image the pinned chart pulls, digest included, is the one mirrored.
    assert (chart["registry"], chart["repository"], chart["tag"]) == OPENCOST_IMAGE
    assert OPENCOST.version == "2.5.17"
    inputs = CostInputs("aws-me-central-1", UnitPrices(0.1, 0.01, 1.0, "test"), registry=MIRROR)
    image = opencost_values(inputs)["opencost"]["exporter"]["image"]
    assert image == {
        "registry": MIRROR,
        "repository": OPENCOST_IMAGE[1],
        "tag": OPENCOST_IMAGE[2],
        "pullPolicy": "Always",
    }
    # The UI (another image) stays off.
    assert opencost_values(inputs)["opencost"]["ui"] == {"enabled": False}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_on_aws_opencost_pulls_from_the_stacks_own_ecr(stack: str) -> None:
    release = _release(stack, OPENCOST.chart)
    if release is None:  # no verified prices: no OpenCost (docs/cost.md)
        return
    mirror = f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}"
    assert release["values"]["opencost"]["exporter"]["image"]["registry"] == mirror
    assert f"gpu-{stack}/{OPENCOST_IMAGE[1]}" in _repositories(stack)


VENDOR = Path(__file__).resolve().parent / "vendor"


def _dig(values: dict[str, Any], key: str) -> dict[str, Any]:
    for part in key.split("."):
        values = values[part]
    return values


def test_the_gpu_operator_images_are_the_charts_own_moved_under_the_mirror() -> None:
    defaults = yaml.safe_load((VENDOR / "llm" / "gpu-operator-v25.10.1-values.yaml").read_text())
    values = gpu_operator_values((), install_driver=False, install_toolkit=False, registry=MIRROR)
    for key, (repository, image, version) in GPU_OPERATOR_IMAGES.items():
        chart = _dig(defaults, key)
        # The chart's own image: repository, name and version (none: the release's).
        assert (chart["repository"], chart["image"]) == (repository, image), key
        assert (chart.get("version") or "v25.10.1") == version, key
        ours = _dig(values, key)
        assert ours["repository"] == f"{MIRROR}/{mirror_path(repository)}", key
        assert ours["imagePullPolicy"] == "Always" and "imagePullPolicy" in chart, key
    nfd_defaults = yaml.safe_load(
        (VENDOR / "charts" / "node-feature-discovery-0.18.2-values.yaml").read_text()
    )
    assert nfd_defaults["image"]["repository"] == NFD_IMAGE[0]
    nfd = values["node-feature-discovery"]["image"]
    assert nfd == {"repository": f"{MIRROR}/nfd/node-feature-discovery", "pullPolicy": "Always"}
    assert unknown_keys({"image": nfd}, nfd_defaults) == []
    # Without a mirror (on premises) the chart's defaults stand.
    plain = gpu_operator_values((), install_driver=False, install_toolkit=False)
    assert "repository" not in plain["operator"] and "node-feature-discovery" in plain


def test_the_mirrors_repositories_follow_the_components_that_run() -> None:
    aws = gpu_operator_repositories(False, False, uses_mig=False, cc=False)
    assert aws == [
        "nvidia/gpu-operator",
        "nvidia/cuda",
        "nvidia/k8s-device-plugin",
        "nvidia/k8s/dcgm-exporter",
        "nfd/node-feature-discovery",
    ]
    every = gpu_operator_repositories(True, True, uses_mig=True, cc=True)
    assert set(every) - set(aws) == {
        "nvidia/driver",
        "nvidia/cloud-native/k8s-driver-manager",
        "nvidia/k8s/container-toolkit",
        "nvidia/cloud-native/k8s-mig-manager",
        "nvidia/cloud-native/k8s-cc-manager",
    }


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_on_aws_the_gpu_operator_pulls_from_the_stacks_own_ecr(stack: str) -> None:
    release = _release(stack, "gpu-operator")
    repositories = _repositories(stack)
    if release is None:  # no GPU pool, no operator, no mirror of its images
        assert f"gpu-{stack}/nvidia/gpu-operator" not in repositories
        return
    mirror = f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}"
    values = release["values"]
    for key in ("operator", "validator", "devicePlugin", "gfd", "dcgmExporter"):
        path = mirror_path("/".join(GPU_OPERATOR_IMAGES[key][:2]))
        assert _dig(values, key)["repository"].startswith(f"{mirror}/"), key
        assert f"gpu-{stack}/{path}" in repositories, key


def test_kueue_runs_its_released_image_from_the_mirror() -> None:
    # Kueue 0.19.2's chart values (the pinned 0.19.6 could not be read here; the keys
    # are a patch release's, vendor/kueue/README.md): the keys set exist there.
    defaults = yaml.safe_load((VENDOR / "charts" / "kueue-0.19.2-values.yaml").read_text())
    values = kueue_values(QueueingSpec(), registry=MIRROR)
    image = values["controllerManager"]["manager"]["image"]
    assert unknown_keys({"controllerManager": {"manager": {"image": image}}}, defaults) == []
    assert image == {
        "repository": f"{MIRROR}/kueue/kueue",
        "tag": "v0.19.6",
        "pullPolicy": "Always",
    }
    # The git values name the staging registry; released charts the promoted one.
    assert defaults["controllerManager"]["manager"]["image"]["repository"].endswith("/kueue/kueue")
    assert KUEUE_IMAGE[:2] == ("registry.k8s.io", "kueue/kueue")
    # No mirror (on premises): the released chart's own image.
    assert "manager" not in kueue_values(QueueingSpec())["controllerManager"]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_on_aws_kueue_pulls_from_the_stacks_own_ecr(stack: str) -> None:
    release = _release(stack, "oci://registry.k8s.io/kueue/charts/kueue")
    assert release is not None
    mirror = f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}"
    image = release["values"]["controllerManager"]["manager"]["image"]
    assert image["repository"] == f"{mirror}/kueue/kueue"
    assert f"gpu-{stack}/kueue/kueue" in _repositories(stack)


def _image_repositories(values: Any) -> set[str]:
    """Every ``{registry, repository}`` image of a chart's values.yaml."""
    found: set[str] = set()
    if isinstance(values, dict):
        if isinstance(values.get("repository"), str) and isinstance(values.get("registry"), str):
            found.add(values["repository"])
        for value in values.values():
            found |= _image_repositories(value)
    return found


def test_the_monitoring_stacks_images_come_from_the_mirror_by_global_registry() -> None:
    charts = VENDOR / "charts"
    stack = yaml.safe_load((charts / "kube-prometheus-stack-88.5.3-values.yaml").read_text())
    grafana = yaml.safe_load((charts / "grafana-12.11.1-values.yaml").read_text())
    ksm = yaml.safe_load((charts / "kube-state-metrics-8.4.0-values.yaml").read_text())
    exporter = yaml.safe_load((charts / "prometheus-node-exporter-4.56.1-values.yaml").read_text())
    # The one key, in the parent chart and in each subchart it passes `global` to.
    for chart in (stack, grafana, ksm, exporter):
        assert "imageRegistry" in chart["global"]
    values = kube_prometheus_stack_values(MonitoringSpec(), "gp3", True, registry=MIRROR)
    assert values["global"] == {"imageRegistry": MIRROR}
    assert "global" not in kube_prometheus_stack_values(MonitoringSpec(), "gp3", True)
    # Each mirrored repository is one of the charts' images ...
    upstream = (
        _image_repositories(stack)
        | _image_repositories(grafana)
        | _image_repositories(ksm)
        | _image_repositories(exporter)
    )
    assert set(MONITORING_REPOSITORIES) <= upstream
    # ... and every image of a component these values run is mirrored.
    running = {
        stack["prometheusOperator"]["image"]["repository"],
        stack["prometheusOperator"]["prometheusConfigReloader"]["image"]["repository"],
        stack["prometheusOperator"]["admissionWebhooks"]["patch"]["image"]["repository"],
        stack["prometheus"]["prometheusSpec"]["image"]["repository"],
        stack["alertmanager"]["alertmanagerSpec"]["image"]["repository"],
        ksm["image"]["repository"],
        exporter["image"]["repository"],
        grafana["image"]["repository"],
        grafana["sidecar"]["image"]["repository"],
    }
    assert running == set(MONITORING_REPOSITORIES)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_on_aws_the_monitoring_stack_pulls_from_the_stacks_own_ecr(stack: str) -> None:
    release = _release(stack, "kube-prometheus-stack")
    assert release is not None
    mirror = f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}"
    assert release["values"]["global"] == {"imageRegistry": mirror}
    assert {f"gpu-{stack}/{r}" for r in MONITORING_REPOSITORIES} <= _repositories(stack)


ONPREM_MIRROR = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-onprem"


def test_on_premises_the_add_ons_pull_from_the_sites_mirror() -> None:
    """onprem-ib names ``onprem.registry``: the GPU and Network Operators, Kueue, the
    monitoring stack, OpenCost, Trainer and the database operator pull from it."""
    stack = "onprem-ib"

    def values(chart: str) -> dict[str, Any]:
        release = _release(stack, chart)
        assert release is not None, chart
        return release["values"]  # type: ignore[no-any-return]

    assert values("gpu-operator")["operator"]["repository"] == f"{ONPREM_MIRROR}/nvidia"
    network = values("network-operator")["operator"]
    assert network["repository"] == f"{ONPREM_MIRROR}/nvidia/cloud-native"
    kueue = values("oci://registry.k8s.io/kueue/charts/kueue")
    assert kueue["controllerManager"]["manager"]["image"]["repository"].startswith(ONPREM_MIRROR)
    assert values("kube-prometheus-stack")["global"] == {"imageRegistry": ONPREM_MIRROR}
    assert values("oci://ghcr.io/kubeflow/charts/kubeflow-trainer")["image"]["registry"] == (
        ONPREM_MIRROR
    )
    operator = values("cloudnative-pg")["image"]
    assert operator["repository"] == f"{ONPREM_MIRROR}/tracking/cloudnative-pg"
    records, _ = shipped_plan(stack)
    (policy,) = [r.inputs for r in records.values() if r.inputs.get("kind") == "NicClusterPolicy"]
    plugin = policy["spec"]["rdmaSharedDevicePlugin"]
    assert plugin["repository"] == f"{ONPREM_MIRROR}/nvidia/mellanox"
