"""`FleetManager` and `FleetWorker`: register the MultiKueue objects that `spec` builds, on
the manager and on a worker."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.common import register
from modules.k8s.fleet.spec import (
    BURST_LOCAL_QUEUE,
    FleetManagerInputs,
    FleetWorkerInputs,
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


def _decode_token(data: Mapping[str, str] | None) -> str:
    return base64.b64decode((data or {}).get("token", "")).decode()


class FleetManager(pulumi.ComponentResource):
    """MultiKueue on the manager: worker Secrets and clusters, config, admission check,
    the teams' burst queues."""

    def __init__(
        self,
        name: str,
        fleet: FleetManagerInputs,
        provider: k8s.Provider,
        *,
        depends_on: Sequence[pulumi.Resource],
        team_namespaces: Mapping[str, pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:FleetManager", name, None, opts)
        deps = list(depends_on)
        secrets = [
            register(worker_secret(w.stack, w.kubeconfig), self, provider, depends_on=deps)
            for w in fleet.workers
        ]
        clusters = [
            register(multikueue_cluster(w.stack, w.site), self, provider, depends_on=[*deps, s])
            for w, s in zip(fleet.workers, secrets, strict=True)
        ]
        config = register(
            multikueue_config([w.stack for w in fleet.workers]),
            self,
            provider,
            depends_on=[*deps, *clusters],
        )
        check = register(admission_check(), self, provider, depends_on=[config])
        flavor = register(burst_flavor(), self, provider, depends_on=deps)
        self.local_queues: dict[str, pulumi.Resource] = {}
        for quota in fleet.burst_quotas:
            cq = register(burst_queue(quota), self, provider, depends_on=[check, flavor])
            self.local_queues[quota.team] = register(
                burst_local_queue(quota.team),
                self,
                provider,
                depends_on=[cq, team_namespaces[quota.team]],
            )
        self.register_outputs(
            {
                "workers": [worker_cluster_name(w.stack) for w in fleet.workers],
                "burstQueues": {t: BURST_LOCAL_QUEUE for t in self.local_queues},
            }
        )


class FleetWorker(pulumi.ComponentResource):
    """The manager's identity on a worker, and its kubeconfig as a secret output."""

    def __init__(
        self,
        name: str,
        worker: FleetWorkerInputs,
        provider: k8s.Provider,
        *,
        depends_on: Sequence[pulumi.Resource],
        team_namespaces: Mapping[str, Sequence[pulumi.Resource]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpuplatform:k8s:FleetWorker", name, None, opts)
        deps = list(depends_on)
        identity = [
            register(m, self, provider, depends_on=deps) for m in manager_identity(worker.manager)
        ]
        for team in worker.burst_teams:
            register(
                rendezvous_service(team),
                self,
                provider,
                depends_on=[*deps, *team_namespaces.get(team, ())],
            )
        secret_manifest = token_secret(worker.manager)
        # A typed Secret, so its token (filled in by the token controller) is an output.
        token = k8s.core.v1.Secret(
            f"secret-{KUEUE_NAMESPACE}-{manager_service_account(worker.manager)}",
            metadata=secret_manifest["metadata"],
            type=secret_manifest["type"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=provider,
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
        self.register_outputs({"manager": worker.manager})
