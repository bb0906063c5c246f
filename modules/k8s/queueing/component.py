"""`Queueing`: installs Kueue and registers the flavors, queues and PriorityClasses that
`spec` builds."""

from __future__ import annotations

import pulumi

from modules.component_base import Outputs
from modules.k8s.names import KUEUE_NAMESPACE, LOCAL_QUEUE_NAME, PRIORITY_CLASSES
from modules.k8s.platform.service import PlatformService
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


class Queueing(PlatformService):
    """Kueue, its flavors and queues, and the PriorityClasses."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        self.priority_classes = [self.add(m) for m in priority_classes()]
        manager = args.fleet.manager if args.fleet is not None else None
        workers = [c for w in manager.workers for c in w.api_server_cidrs] if manager else []
        fenced = self.fenced_namespace(KUEUE_NS, kueue_network_policies(args.network, workers))
        values = kueue_values(
            args.queueing,
            # -- fleet: MultiKueue settings on a manager --
            args.site.name if args.fleet is not None and args.fleet.manager else None,
            registry=args.addon_registry,
        )
        self.release = self.install(
            "kueue", KUEUE, KUEUE_NAMESPACE, values, [*fenced, *self.waits_for]
        )
        flavors = [self.add(resource_flavor(p), [self.release]) for p in queue_pools(args.pools)]
        self.local_queues: dict[str, pulumi.Resource] = {}
        for team in args.teams:
            cq = self.add(cluster_queue(team, args.pools, args.queueing), [self.release, *flavors])
            self.local_queues[team.name] = self.add(
                local_queue(team), [cq, self.team_namespaces[team.name]]
            )
        return {
            "localQueues": {t: LOCAL_QUEUE_NAME for t in self.local_queues},
            "priorityClasses": list(PRIORITY_CLASSES),
        }
