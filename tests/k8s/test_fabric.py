"""Fabric plugins: EFA on EFA pools only, the RDMA shared device plugin on IB pools only."""

from __future__ import annotations

import json

import pytest

from modules.k8s.fabric.spec import (
    InfinibandSpec,
    efa_device_plugin_values,
    ipoib_network,
    nic_cluster_policy,
    rdma_shared_device_plugin_config,
)
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.pools import FABRIC_LABEL
from modules.validation import InvalidArgsError
from tests.k8s.crd_checks import crd_errors
from tests.k8s.fixtures import IB, P5EN, SYSTEM, eks_args, onprem_args
from tests.k8s.programs import of_kind, registrations, releases


def test_efa_plugin_lands_on_efa_pools_only() -> None:
    values = efa_device_plugin_values("me-central-1")
    assert values["nodeSelector"] == {FABRIC_LABEL: "efa"}
    # The chart's required node affinity: our fabric label instead of instance types.
    assert values["supportedInstanceLabels"] == {"keys": [FABRIC_LABEL], "values": ["efa"]}
    keys = {t["key"] for t in values["tolerations"]}
    assert keys == {"nvidia.com/gpu", "gpuplatform.ae/fabric"}


def test_efa_plugin_image_comes_from_the_stacks_own_region() -> None:
    image = efa_device_plugin_values("me-central-1")["image"]["repository"]
    assert image == "759879836304.dkr.ecr.me-central-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    assert "image" not in efa_device_plugin_values("xx-nowhere-1")


def test_efa_plugin_installed_on_eks_with_efa_pools_only() -> None:
    assert "aws-efa-k8s-device-plugin" in releases(registrations("eks"))
    assert "aws-efa-k8s-device-plugin" not in releases(registrations("onprem"))
    assert "network-operator" not in releases(registrations("eks"))


def test_rdma_plugin_runs_on_infiniband_pools_only() -> None:
    (policy,) = of_kind(registrations("onprem"), "NicClusterPolicy")
    terms = policy["spec"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": FABRIC_LABEL, "operator": "In", "values": ["infiniband"]}]}
    ]
    assert {t["key"] for t in policy["spec"]["tolerations"]} == {
        "nvidia.com/gpu",
        "gpuplatform.ae/fabric",
    }


def test_rdma_plugin_advertises_the_configured_resource() -> None:
    spec = InfinibandSpec(
        resource_name="rdma/hca_ib", hca_device_ids=("101b",), interface_names=("ibs1",)
    )
    entry = json.loads(rdma_shared_device_plugin_config(spec))["configList"][0]
    assert (entry["resourcePrefix"], entry["resourceName"]) == ("rdma", "hca_ib")
    assert entry["selectors"] == {"vendors": ["15b3"], "deviceIDs": ["101b"], "ifNames": ["ibs1"]}
    assert entry["rdmaHcaMax"] == 63


def test_nic_cluster_policy_components_have_pinned_images() -> None:
    full = nic_cluster_policy(InfinibandSpec(install_ofed_driver=True, secondary_network=True))
    assert set(full["spec"]) >= {
        "rdmaSharedDevicePlugin",
        "ofedDriver",
        "secondaryNetwork",
        "nvIpam",
    }
    assert crd_errors([full]) == []
    bare = nic_cluster_policy(InfinibandSpec())
    assert "ofedDriver" not in bare["spec"] and "secondaryNetwork" not in bare["spec"]


def test_secondary_network_per_team_namespace() -> None:
    networks = of_kind(registrations("onprem"), "IPoIBNetwork")
    assert {n["spec"]["networkNamespace"] for n in networks} == {
        "team-vision",
        "team-nlp",
        "team-hpc",
    }
    network = ipoib_network("vision", InfinibandSpec(secondary_network_interface="ib1"))
    assert network["spec"]["master"] == "ib1"
    assert json.loads(network["spec"]["ipam"]) == {"type": "nv-ipam", "poolName": "ib-pool"}
    assert of_kind(registrations("onprem"), "IPPool")[0]["spec"]["subnet"] == "192.168.100.0/22"


def test_no_secondary_network_unless_asked() -> None:
    args = onprem_args(secondary_network=False)
    assert args.secondary_network is False


def test_infiniband_spec_reports_every_problem() -> None:
    with pytest.raises(InvalidArgsError) as error:
        InfinibandSpec(
            resource_name="ib",
            hca_vendor_ids=("MLNX",),
            secondary_network_cidr="300.1.0.0/16",
            max_pods_per_hca=0,
        )
    fields = {p.field for p in error.value.problems}
    assert fields == {
        "resource_name",
        "hca_vendor_ids[0]",
        "secondary_network_cidr",
        "max_pods_per_hca",
    }


def test_fabric_placement_is_checked_against_the_cluster_kind() -> None:
    with pytest.raises(InvalidArgsError) as error:
        onprem_args(pools=(SYSTEM, IB, P5EN))
    assert "pools[gpu-p5en].fabric" in {p.field for p in error.value.problems}
    with pytest.raises(InvalidArgsError) as error:
        eks_args(pools=(SYSTEM, IB))
    assert "pools[gpu-ib].fabric" in {p.field for p in error.value.problems}


def test_ib_pools_need_the_infiniband_settings_and_matching_resource() -> None:
    with pytest.raises(InvalidArgsError) as error:
        onprem_args(infiniband=None)
    assert "infiniband" in {p.field for p in error.value.problems}
    with pytest.raises(InvalidArgsError) as error:
        onprem_args(infiniband=InfinibandSpec(resource_name="rdma/other"))
    assert "pools[gpu-ib].rdma_resource" in {p.field for p in error.value.problems}
    assert isinstance(onprem_args(), KubernetesPlatformArgs)
