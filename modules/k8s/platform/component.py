"""The Kubernetes platform layer as one component.

`KubernetesPlatform` composes the concerns in dependency order (each a component of its
own, every object through ``args.provider``):

    site -> storage -> PKI (cert-manager, the cluster CA) -> tenancy (team namespaces)
         -> monitoring (CRDs for monitors) -> GPU operator -> fabric -> queueing (Kueue,
         queues) -> Kubeflow Trainer (runtimes) -> autoscaler (EKS) -> serving (KServe,
         runtimes; where configured)

and exposes, per team, what the workloads' ``TrainingJob`` needs (`TeamPlacement`)
together with the resources to ``depends_on``.
"""

from __future__ import annotations

from typing import TypeVar

import pulumi

from modules.component_base import KubernetesComponent, Outputs
from modules.k8s.autoscaler.component import Autoscaler
from modules.k8s.cost.component import CostAllocation
from modules.k8s.fabric.component import Fabric
from modules.k8s.fleet.component import FleetManager, FleetWorker
from modules.k8s.gpu.component import GpuEnablement
from modules.k8s.monitoring.component import Monitoring
from modules.k8s.names import TeamPlacement, team_placement
from modules.k8s.pki.component import Pki
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.platform.summary import installed_charts, pool_plugins
from modules.k8s.queueing.component import Queueing
from modules.k8s.serving.component import Serving
from modules.k8s.site.component import SiteDeclaration
from modules.k8s.storage.component import Storage
from modules.k8s.tenancy.component import Tenancy
from modules.k8s.tracking.component import Tracking
from modules.k8s.trainer.component import KubeflowTrainer, runtime_site

#: One of the platform's services (`service` in `KubernetesPlatform.declare`).
ServiceT = TypeVar("ServiceT", bound=PlatformService)


class KubernetesPlatform(KubernetesComponent[KubernetesPlatformArgs]):
    """GPU and fabric enablement, monitoring, queueing and tenancy on one cluster.

    Attributes:
        placements: team name -> `TeamPlacement` (namespace, LocalQueue, ServiceAccount,
            checkpoint claim, PriorityClasses, secondary network).
        team_ready: team name -> resources a team's jobs should ``depends_on`` (its
            namespace objects, LocalQueue and checkpoint claim).
        platform_ready: resources every job should ``depends_on`` (device plugins,
            Kueue, PriorityClasses).
        serving_ready: resources every InferenceService should ``depends_on`` (KServe,
            its runtimes, the inference ServiceAccounts); empty without serving.
    """

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)

        oidc = args.onprem.oidc if args.onprem is not None else None
        site = SiteDeclaration(
            f"{name}-site",
            args.site,
            args.provider,
            child,
            oidc=oidc,
            kubernetes_version=args.kubernetes_version,
        )
        storage = Storage(f"{name}-storage", args, opts=child)
        pki = Pki(f"{name}-pki", args, opts=child)
        tenancy = Tenancy(
            f"{name}-tenancy",
            args,
            storage_ready=[*storage.ready.classes, *storage.ready.team_directories],
            opts=child,
            pki_ready=[pki.issuer],
        )

        def service(kind: type[ServiceT], part: str, *after: pulumi.Resource) -> ServiceT:
            """The service ``kind`` of the platform, after ``after`` (and what it puts in
            a team namespace after the namespace)."""
            return kind(f"{name}-{part}", args, tenancy.namespaces, depends_on=after, opts=child)

        monitoring = service(Monitoring, "monitoring", *storage.ready.classes, pki.issuer)
        self.platform_ready: list[pulumi.Resource] = [site.configmap]
        # -- cost allocation (OpenCost, budgets; docs/cost.md) --
        if args.cost is not None:
            CostAllocation(
                f"{name}-cost",
                args.cost,
                args.provider,
                args.kubernetes_version,
                args.network,
                depends_on=[monitoring.release],
                opts=child,
            )
        if args.gpu_pools:
            gpu = service(GpuEnablement, "gpu", monitoring.release)
            self.platform_ready.append(gpu.release)
        fabric = service(Fabric, "fabric")
        self.platform_ready += fabric.releases
        queueing = service(Queueing, "queueing", monitoring.release)
        self.platform_ready += [queueing.release, *queueing.priority_classes]
        # -- Kubeflow Trainer (TrainJobs, the platform's runtimes) --
        if args.trainer.enabled:
            trainer = service(KubeflowTrainer, "trainer", queueing.release)
            self.platform_ready += [trainer.release, *trainer.runtimes]
        # -- fleet (MultiKueue, docs/fleet.md) --
        self.fleet_kubeconfig: pulumi.Output[str] | None = None
        self.burst_queues: dict[str, pulumi.Resource] = {}
        if args.fleet is not None and args.fleet.manager is not None:
            manager = service(FleetManager, "fleet", queueing.release)
            self.burst_queues = manager.local_queues
        if args.fleet is not None and args.fleet.worker is not None:
            worker = service(FleetWorker, "fleet-worker", queueing.release)
            self.fleet_kubeconfig = worker.kubeconfig
        # -- end fleet --
        if args.eks is not None:
            Autoscaler(f"{name}-autoscaler", args, opts=child)
        # -- tracking (MLflow) --
        if args.tracking_enabled:
            service(Tracking, "tracking", monitoring.release, pki.issuer, *storage.ready.classes)
        # Model serving: KServe, its runtimes and monitoring (InferenceServices wait on it).
        self.serving_ready: list[pulumi.Resource] = []
        if args.serving is not None:
            serving = Serving(
                f"{name}-serving",
                args,
                tenancy.namespaces,
                monitoring.release,
                child,
                pki_ready=[pki.issuer],
            )
            self.serving_ready = serving.ready

        self.placements: dict[str, TeamPlacement] = {}
        self.team_ready: dict[str, list[pulumi.Resource]] = {}
        # What every training pod gets from the cluster, as the trainer's runtimes do.
        pods_get = runtime_site(args)
        for team in args.teams:
            self.placements[team.name] = team_placement(
                team.name,
                args.secondary_network,
                team.allowed_priorities,
                tracking=pods_get.tracking,
            )
            self.team_ready[team.name] = [
                tenancy.namespaces[team.name],
                *tenancy.team_objects[team.name],
                queueing.local_queues[team.name],
            ]

        return {
            "teamNamespaces": {t: p.namespace for t, p in self.placements.items()},
            "localQueues": {t: p.local_queue for t, p in self.placements.items()},
            "checkpointClaims": {t: p.checkpoint_claim for t, p in self.placements.items()},
            "charts": {n: c.version for n, c in installed_charts(args).items()},
            "poolPlugins": pool_plugins(args),
        }
