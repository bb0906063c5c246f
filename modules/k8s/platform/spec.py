"""The typed arguments of the Kubernetes platform layer, checked together.

The composition builds one `KubernetesPlatformArgs` from the stack config and the AWS
foundation's outputs; ``__post_init__`` checks the combination (an EFA pool on an
on-premises cluster, an InfiniBand pool without its settings, a team asking for baseline
Pod Security on a stack without a fabric...) and reports every problem at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import pulumi_kubernetes as k8s

from modules.k8s.cost.spec import CostInputs
from modules.k8s.fabric.spec import InfinibandSpec
from modules.k8s.fleet.spec import FleetInputs
from modules.k8s.monitoring.spec import MonitoringSpec
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.queueing.spec import QueueingSpec
from modules.k8s.serving.spec import ServingSpec
from modules.k8s.site.eks import EksInputs
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.site.spec import SiteSpec
from modules.k8s.tenancy.spec import TeamSpec
from modules.k8s.tracking.spec import TrackingInputs, TrackingSpec
from modules.k8s.trainer.spec import TrainerInputs, TrainerSpec
from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS
from modules.pools import NodePoolProfile
from modules.validation import Checker

_MIG_PROFILE = re.compile(r"^all-\d+g\.\d+gb$")


@dataclass(frozen=True)
class KubernetesPlatformArgs:
    """Everything the Kubernetes platform layer needs.

    Args:
        provider: the cluster's Kubernetes provider; every object uses it explicitly.
        cluster_kind: ``eks`` (the AWS stacks) or ``onprem`` (an existing cluster).
        kubernetes_version: the cluster's minor version, e.g. ``"1.33"``.
        site: where the cluster runs (`SiteSpec`).
        pools: the node pools (their labels and taints decide what runs where).
        teams: the tenants (`TeamSpec`).
        monitoring: monitoring settings (`MonitoringSpec`).
        queueing: Kueue settings (`QueueingSpec`).
        eks: AWS inputs, required for ``eks`` and absent on premises.
        onprem: on-premises settings (`OnPremSpec`), required for ``onprem``.
        infiniband: InfiniBand settings (`InfinibandSpec`), required with IB pools.
        tracking: MLflow tracking server settings (`TrackingSpec`); ``None`` (the
            default) or ``enabled: false`` deploys none.
        tracking_inputs: its admin password and, on EKS, its database and bucket
            (`TrackingInputs`); required when tracking is deployed.
        serving: model serving (`ServingSpec`, KServe); ``None`` installs none. Its
            ``registry`` must be resolved (the stack's ECR, or the site's registry).
        fleet: MultiKueue manager or worker inputs (`FleetInputs`), or None.
        cost: OpenCost prices and team budgets (`CostInputs`), or None for no cost
            allocation.
        trainer: Kubeflow Trainer settings (`TrainerSpec`), installed by default.
        trainer_inputs: the training image and each pool's trainer environment
            (`TrainerInputs`) the platform's runtimes are built from; None installs the
            trainer without runtimes.
        confidential_computing_pools: GPU pools whose nodes may run their GPUs in
            confidential-computing mode (the GPU Operator's CC manager;
            `modules.k8s.gpu.spec.ConfidentialComputingSpec`); default none.
    """

    provider: k8s.Provider
    cluster_kind: Literal["eks", "onprem"]
    kubernetes_version: str
    site: SiteSpec
    pools: tuple[NodePoolProfile, ...]
    teams: tuple[TeamSpec, ...] = ()
    monitoring: MonitoringSpec = field(default_factory=MonitoringSpec)
    queueing: QueueingSpec = field(default_factory=QueueingSpec)
    eks: EksInputs | None = None
    onprem: OnPremSpec | None = None
    infiniband: InfinibandSpec | None = None
    tracking: TrackingSpec | None = None
    tracking_inputs: TrackingInputs | None = None
    serving: ServingSpec | None = None
    fleet: FleetInputs | None = None
    cost: CostInputs | None = None
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    trainer_inputs: TrainerInputs | None = None
    confidential_computing_pools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check = Checker()
        kind = self.cluster_kind
        check.require(kind in ("eks", "onprem"), "cluster_kind", kind, "one of 'eks', 'onprem'")
        check.require(
            self.kubernetes_version in SUPPORTED_KUBERNETES_VERSIONS,
            "kubernetes_version",
            self.kubernetes_version,
            f"supported versions: {', '.join(SUPPORTED_KUBERNETES_VERSIONS)}",
        )
        expected_site = {"eks": "aws-eks", "onprem": "on-premises"}.get(kind)
        check.require(
            self.site.kind == expected_site,
            "site.kind",
            self.site.kind,
            f"a {kind} cluster's site kind is {expected_site!r}",
        )
        if kind == "eks":
            check.require(self.eks is not None, "eks", None, "an EKS platform needs EksInputs")
            check.require(self.onprem is None, "onprem", self.onprem, "only for on-premises")
        else:
            check.require(self.eks is None, "eks", self.eks, "no AWS inputs on premises")
            check.require(
                self.onprem is not None, "onprem", None, "an on-premises platform needs OnPremSpec"
            )
        self._check_pools(check)
        self._check_teams(check)
        # Model serving (KServe): its images need a registry in the country.
        if self.serving is not None:
            check.require(
                self.serving.registry is not None,
                "serving.registry",
                None,
                "the registry serving images come from: required on premises",
            )
        check.require(
            self.monitoring.grafana_access != "internal-load-balancer" or kind == "eks",
            "monitoring.grafana_access",
            self.monitoring.grafana_access,
            "an internal load balancer exists only on EKS; use port-forward on premises",
        )
        self._check_tracking(check)
        check.done()

    @property
    def network(self) -> ClusterNetwork:
        """Where the API server and the nodes are (NetworkPolicies name them by address):
        on EKS the VPC (the private endpoint's interfaces and the nodes are in it), on
        premises the addresses the site declares."""
        if self.eks is not None:
            return ClusterNetwork((self.eks.vpc_cidr,), (self.eks.vpc_cidr,))
        if self.onprem is not None:
            return ClusterNetwork(self.onprem.api_server_cidrs, self.onprem.node_cidrs)
        raise ValueError("a platform needs EksInputs or OnPremSpec")  # checked above

    @property
    def tracking_enabled(self) -> bool:
        """True where the layer deploys the MLflow tracking server."""
        return self.tracking is not None and self.tracking.enabled

    def _check_tracking(self, check: Checker) -> None:
        if self.tracking is None or not self.tracking.enabled:
            return
        inputs = self.tracking_inputs
        check.require(inputs is not None, "tracking_inputs", None, "tracking needs TrackingInputs")
        if inputs is None:
            return
        if self.cluster_kind == "eks":
            check.require(
                inputs.store is not None,
                "tracking_inputs.store",
                None,
                "on EKS the tracking server needs its RDS database and bucket",
            )
            check.require(
                self.tracking.database_backup is None,
                "tracking.database_backup",
                "(given)",
                "on EKS the database is RDS (automated backups, AWS Backup)",
            )
        else:
            check.require(
                inputs.store is None,
                "tracking_inputs.store",
                "RDS",
                "on premises the database is a CloudNativePG cluster, not RDS",
            )
            shared = self.onprem is not None and self.onprem.checkpoint_access_mode == (
                "ReadWriteMany"
            )
            check.require(
                shared or self.tracking.replicas == 1,
                "tracking.replicas",
                self.tracking.replicas,
                "more than one replica shares the artifact volume: needs a ReadWriteMany "
                "checkpointStorageClass (onprem.checkpointAccessMode)",
            )
            check.require(
                self.tracking.database_backup is None or inputs.backup_credentials is not None,
                "tracking_inputs.backup_credentials",
                None,
                "database backups need the object store's access key (secret config)",
            )

    def _check_pools(self, check: Checker) -> None:
        names = [p.name for p in self.pools]
        for name in sorted({n for n in names if names.count(n) > 1}):
            check.require(False, "pools", name, "pool names must be unique")
        check.require(
            any(p.role == "system" for p in self.pools),
            "pools",
            names,
            "a pool with role 'system' is needed for the platform services",
        )
        check.require(
            any(p.role != "system" for p in self.pools),
            "pools",
            names,
            "at least one pool besides 'system' is needed to run jobs",
        )
        for pool in self.pools:
            key = f"pools[{pool.name}]"
            if pool.fabric == "efa":
                check.require(
                    self.cluster_kind == "eks", f"{key}.fabric", "efa", "EFA exists only on EKS"
                )
            if pool.fabric == "infiniband":
                check.require(
                    self.cluster_kind == "onprem",
                    f"{key}.fabric",
                    "infiniband",
                    "InfiniBand pools are on-premises only",
                )
                check.require(
                    self.infiniband is not None,
                    "infiniband",
                    None,
                    f"pool {pool.name} has InfiniBand: set uae-gpu-platform:infiniband",
                )
                if self.infiniband is not None:
                    check.require(
                        pool.rdma_resource == self.infiniband.resource_name,
                        f"{key}.rdma_resource",
                        pool.rdma_resource,
                        f"must be the RDMA resource the plugin advertises "
                        f"({self.infiniband.resource_name})",
                    )
            if pool.gpu_sharing != "none":
                check.require(
                    pool.has_gpus, f"{key}.gpu_sharing", pool.gpu_sharing, "only for GPU pools"
                )
            if pool.gpu_sharing == "time-slicing":
                check.require(
                    2 <= pool.gpu_replicas <= 48,
                    f"{key}.gpu_replicas",
                    pool.gpu_replicas,
                    "time-slicing needs 2 to 48 replicas per GPU",
                )
            if pool.gpu_sharing == "mig":
                check.require(
                    bool(_MIG_PROFILE.match(pool.mig_strategy_profile or "")),
                    f"{key}.mig_strategy_profile",
                    pool.mig_strategy_profile,
                    "a uniform MIG profile such as all-1g.10gb",
                )

    def _check_teams(self, check: Checker) -> None:
        names = [t.name for t in self.teams]
        for name in sorted({n for n in names if names.count(n) > 1}):
            check.require(False, "teams", name, "team names must be unique")
        has_fabric = any(p.fabric != "none" for p in self.pools)
        oidc = self.onprem.oidc if self.onprem is not None else None
        for grouped in sorted(oidc.team_groups if oidc is not None else ()):
            check.require(
                grouped in names,
                f"onprem.oidc.team_groups.{grouped}",
                grouped,
                f"must be one of the teams: {', '.join(names) or '(none declared)'}",
            )
        for team in self.teams:
            check.require(
                team.pod_security == "restricted" or has_fabric,
                f"teams[{team.name}].pod_security",
                team.pod_security,
                "baseline is only for teams on EFA or InfiniBand pools; this stack has none",
            )

    @property
    def addon_registry(self) -> str | None:
        """The mirror the cluster add-ons pull their images from: on EKS the stack's own
        ECR, on premises ``onprem.registry``; None: their upstream registries."""
        if self.eks is not None:
            return self.eks.registry
        return (self.onprem.registry or None) if self.onprem is not None else None

    @property
    def gpu_pools(self) -> tuple[NodePoolProfile, ...]:
        return tuple(p for p in self.pools if p.has_gpus)

    def pools_with_fabric(self, fabric: str) -> tuple[NodePoolProfile, ...]:
        return tuple(p for p in self.pools if p.fabric == fabric)

    @property
    def secondary_network(self) -> bool:
        """True where team pods get an IPoIB secondary network."""
        return bool(
            self.infiniband
            and self.infiniband.secondary_network
            and self.pools_with_fabric("infiniband")
        )
