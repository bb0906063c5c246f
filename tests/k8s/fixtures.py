"""Argument sets for the Kubernetes layer's tests: an EKS stack like uae-prod (EFA GPU
pool, a time-sliced small GPU pool, a CPU pool, FSx) and an on-premises one like
onprem-ib (InfiniBand GPU pool, a MIG pool, secondary network)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pulumi_kubernetes as k8s

from modules.k8s.fabric.spec import InfinibandSpec
from modules.k8s.monitoring.spec import MonitoringSpec
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.site.eks import EksInputs, FsxInputs
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.site.spec import SiteSpec
from modules.k8s.tenancy.spec import TeamSpec
from modules.pools import NodePoolProfile
from tests.support.pools import P5EN

#: Pure functions never touch the provider; components get a real one under mocks.
NO_PROVIDER = cast(k8s.Provider, object())

KMS_ARN = "arn:aws:kms:me-central-1:123456789012:key/0b6c2b3e-1111-2222-3333-444455556666"

SYSTEM = NodePoolProfile("system", "system", "m7i.2xlarge", vcpus=8, memory_gib=32, max_size=3)
G6 = NodePoolProfile(
    "gpu-g6",
    "gpu",
    "g6.12xlarge",
    vcpus=48,
    memory_gib=192,
    gpus_per_node=4,
    accelerator="nvidia-l4",
    gpu_memory_gib=24,
    gpu_sharing="time-slicing",
    gpu_replicas=4,
    max_size=2,
)
CPU = NodePoolProfile("cpu-pre", "preprocess", "c7i.8xlarge", vcpus=32, memory_gib=64, max_size=4)
IB = NodePoolProfile(
    "gpu-ib",
    "gpu",
    None,
    vcpus=224,
    memory_gib=2048,
    gpus_per_node=8,
    accelerator="nvidia-h100",
    gpu_memory_gib=80,
    fabric="infiniband",
    rdma_resource="rdma/ib",
    rdma_per_node=1,
    max_size=8,
)
MIG = NodePoolProfile(
    "gpu-mig",
    "gpu",
    None,
    vcpus=128,
    memory_gib=1024,
    gpus_per_node=8,
    accelerator="nvidia-a100",
    gpu_memory_gib=80,
    gpu_sharing="mig",
    mig_strategy_profile="all-1g.10gb",
    max_size=2,
)

TEAMS = (
    TeamSpec(
        "vision",
        gpu_quota=16,
        cpu_quota=64,
        memory_quota_gib=256,
        borrow_limit_percent=50,
        fair_share_weight=2,
        max_priority="production",
    ),
    TeamSpec("nlp", gpu_quota=8, cpu_quota=32, memory_quota_gib=128),
)


def eks_args(
    version: str = "1.33",
    *,
    fsx: bool = True,
    provider: k8s.Provider = NO_PROVIDER,
    **overrides: Any,
) -> KubernetesPlatformArgs:
    fsx_inputs = (
        FsxInputs(
            file_system_id="fs-0123456789abcdef0",
            dns_name="fs-0123456789abcdef0.fsx.me-central-1.amazonaws.com",
            mount_name="abcdefgh",
            capacity_gib=2400,
            init_image="123456789012.dkr.ecr.me-central-1.amazonaws.com/training:1.4.0",
        )
        if fsx
        else None
    )
    args = KubernetesPlatformArgs(
        provider=provider,
        cluster_kind="eks",
        kubernetes_version=version,
        site=SiteSpec("aws-me-central-1", "aws-eks", region="me-central-1"),
        pools=(SYSTEM, P5EN, G6, CPU),
        teams=TEAMS,
        monitoring=MonitoringSpec(grafana_access="internal-load-balancer"),
        eks=EksInputs(
            cluster_name="uae-prod",
            region="me-central-1",
            storage_kms_key_arn=KMS_ARN,
            vpc_cidr="10.42.0.0/16",
            fsx=fsx_inputs,
        ),
    )
    return replace(args, **overrides) if overrides else args


def onprem_args(
    version: str = "1.33",
    *,
    secondary_network: bool = True,
    provider: k8s.Provider = NO_PROVIDER,
    **overrides: Any,
) -> KubernetesPlatformArgs:
    args = KubernetesPlatformArgs(
        provider=provider,
        cluster_kind="onprem",
        kubernetes_version=version,
        site=SiteSpec("ae-abudhabi-dc1", "on-premises"),
        pools=(SYSTEM, IB, MIG),
        teams=(*TEAMS, TeamSpec("hpc", gpu_quota=8, pod_security="baseline")),
        onprem=OnPremSpec(
            storage_class="ceph-rbd-encrypted",
            checkpoint_storage_class="cephfs",
            egress_cidrs=("10.20.0.0/24",),
            api_server_cidrs=("10.20.0.10/32",),
            node_cidrs=("10.20.0.0/22",),
        ),
        infiniband=InfinibandSpec(secondary_network=secondary_network, install_ofed_driver=True),
    )
    return replace(args, **overrides) if overrides else args
