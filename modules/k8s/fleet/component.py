"""`FleetManager` and `FleetWorker`: register the MultiKueue objects that `spec` builds, on
the manager and on a worker."""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s

from modules.component_base import Outputs
from modules.k8s.fleet.spec import (
    BURST_LOCAL_QUEUE,
    admission_check,
    burst_flavor,
    burst_local_queue,
    burst_queue,
    manager_identity,
    manager_kubeconfig,
    manager_service_account,
    multikueue_cluster,
    multikueue_config,
    rendezvous_service,
    token_secret,
    worker_cluster_name,
    worker_secret,
)
from modules.k8s.names import KUEUE_NAMESPACE
from modules.k8s.platform.service import PlatformService
from modules.k8s.platform.spec import KubernetesPlatformArgs


def _decode_token(data: Mapping[str, str] | None) -> str:
    return base64.b64decode((data or {}).get("token", "")).decode()


class FleetManager(PlatformService):
    """MultiKueue on the manager (``args.fleet.manager``): worker Secrets and clusters,
    config, admission check, the teams' burst queues."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        fleet = args.fleet.manager if args.fleet is not None else None
        if fleet is None:  # the platform creates a manager only where the stack is one
            raise ValueError("a fleet manager needs FleetManagerInputs")
        deps = self.waits_for
        secrets = [self.add(worker_secret(w.stack, w.kubeconfig), deps) for w in fleet.workers]
        clusters = [
            self.add(multikueue_cluster(w.stack, w.site), [*deps, s])
            for w, s in zip(fleet.workers, secrets, strict=True)
        ]
        config = self.add(multikueue_config([w.stack for w in fleet.workers]), [*deps, *clusters])
        check = self.add(admission_check(), [config])
        flavor = self.add(burst_flavor(), deps)
        self.local_queues: dict[str, pulumi.Resource] = {}
        for quota in fleet.burst_quotas:
            cq = self.add(burst_queue(quota), [check, flavor])
            self.local_queues[quota.team] = self.add(
                burst_local_queue(quota.team), [cq, self.team_namespaces[quota.team]]
            )
        return {
            "workers": [worker_cluster_name(w.stack) for w in fleet.workers],
            "burstQueues": {t: BURST_LOCAL_QUEUE for t in self.local_queues},
        }


class FleetWorker(PlatformService):
    """The manager's identity on a worker (``args.fleet.worker``), and its kubeconfig as a
    secret output."""

    def declare(self, name: str, args: KubernetesPlatformArgs) -> Outputs:
        worker = args.fleet.worker if args.fleet is not None else None
        if worker is None:  # the platform creates a worker only where the stack is one
            raise ValueError("a fleet worker needs FleetWorkerInputs")
        deps = self.waits_for
        identity = [self.add(m, deps) for m in manager_identity(worker.manager)]
        for team in worker.burst_teams:
            # A burst team without a namespace here gets its Service all the same.
            team_ns = self.team_namespaces.get(team)
            self.add(rendezvous_service(team), [*deps, *([team_ns] if team_ns is not None else [])])
        secret_manifest = token_secret(worker.manager)
        # A typed Secret, so its token (filled in by the token controller) is an output.
        token = k8s.core.v1.Secret(
            f"secret-{KUEUE_NAMESPACE}-{manager_service_account(worker.manager)}",
            metadata=secret_manifest["metadata"],
            type=secret_manifest["type"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=identity,
                additional_secret_outputs=["data"],
            ),
        )
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(worker.cluster_kubeconfig, token.data).apply(
                lambda parts: manager_kubeconfig(
                    str(parts[0]), _decode_token(parts[1]), worker.manager
                )
            )
        )
        return {"manager": worker.manager}
