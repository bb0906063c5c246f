"""`Queueing`: installs Kueue and registers the flavors, queues and PriorityClasses that
`spec` builds."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from modules.k8s.common import helm_release, register, register_namespace
from modules.k8s.names import KUEUE_NAMESPACE, LOCAL_QUEUE_NAME, PRIORITY_CLASSES
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.queueing.spec import (
    KUEUE_NS,
    cluster_queue,
    kueue_network_policies,
    kueue_values,
    local_queue,
    priority_classes,
    resource_flavor,
)
from modules.k8s.tenancy.quotas import queue_pools
from modules.k8s.versions import KUEUE


class Queueing(pulumi.ComponentResource):
    """Kueue, its flavors and queues, and the PriorityClasses."""

    def __init__(
        self,
        name: str,
        args: KubernetesPlatformArgs,
        team_namespaces: dict[str, pulumi.Resource],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:Queueing", name, None, opts)
        provider = args.provider
        self.priority_classes = [register(m, self, provider) for m in priority_classes()]
        manager = args.fleet.manager if args.fleet is not None else None
        workers = [c for w in manager.workers for c in w.api_server_cidrs] if manager else []
        fenced = register_namespace(
            KUEUE_NS.manifest(args.kubernetes_version),
            kueue_network_policies(args.network, workers),
            self,
            provider,
        )
        self.release = helm_release(
            "kueue",
            KUEUE,
            KUEUE_NAMESPACE,
            values=kueue_values(
                args.queueing,
                # -- fleet: MultiKueue settings on a manager --
                args.site.name if args.fleet is not None and args.fleet.manager else None,
            ),
            parent=self,
            provider=provider,
            depends_on=[*fenced, *depends_on],
        )
        flavors = [
            register(resource_flavor(p), self, provider, depends_on=[self.release])
            for p in queue_pools(args.pools)
        ]
        self.local_queues: dict[str, pulumi.Resource] = {}
        for team in args.teams:
            cq = register(
                cluster_queue(team, args.pools, args.queueing),
                self,
                provider,
                depends_on=[self.release, *flavors],
            )
            self.local_queues[team.name] = register(
                local_queue(team), self, provider, depends_on=[cq, team_namespaces[team.name]]
            )
        self.register_outputs(
            {
                "localQueues": {t: LOCAL_QUEUE_NAME for t in self.local_queues},
                "priorityClasses": list(PRIORITY_CLASSES),
            }
        )
