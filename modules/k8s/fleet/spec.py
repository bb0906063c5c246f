"""Bursting across clusters with Kueue's MultiKueue (manager and worker sides).

A *fleet* is one manager cluster (the on-premises site, where teams queue their work)
and worker clusters in the UAE (cloud stacks, or other sites) that take the overflow.

Manager (the stack with a ``fleet:`` section):

* one Secret per worker in ``kueue-system`` holding the worker's kubeconfig (read from
  the worker stack's secret output through ``pulumi.StackReference``; never in config);
* one ``MultiKueueCluster`` per worker pointing at that Secret, annotated with the
  worker's site (the residency rule ``uae-fleet-worker-residency`` reads it);
* one ``MultiKueueConfig`` listing the workers in order of preference, and one
  ``AdmissionCheck`` (controller ``kueue.x-k8s.io/multikueue``) using it;
* per bursting team, a ClusterQueue ``team-<name>-burst`` with that admission check and
  a LocalQueue ``burst`` in the team namespace. Kueue does not support the manager as
  its own worker, and a Job queued to a MultiKueue ClusterQueue is marked
  ``managedBy: kueue.x-k8s.io/multikueue`` at creation (it can then never run on the
  manager), so steady work stays on the site's own queue ``training`` and overflow is
  sent to ``burst``; the burst queue borrows nothing (its quota is what the workers give
  the team).

Worker (the stack with a ``fleetWorker:`` section):

* a ServiceAccount for the manager in ``kueue-system`` with a long-lived token Secret,
  a ClusterRole with exactly the rules of Kueue's ``create-multikueue-kubeconfig.sh``
  for the integrations the platform enables (batch Jobs, JobSets, Kueue Workloads and
  queues; nothing else), and its binding;
* the manager's kubeconfig built from that token and the cluster's API endpoint,
  exported as a *secret* stack output ``multikueueKubeconfig``.

The teams' namespaces, LocalQueues ``training`` and checkpoint claims already exist on
the worker (each worker declares the bursting teams in its own ``teams``; the fleet
validation checks it), which is all MultiKueue needs: the dispatched Job lands in the
same namespace, queue name and claim name on the worker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import yaml

from modules.k8s import rbac
from modules.k8s.common import Manifest, metadata
from modules.k8s.names import KUEUE_NAMESPACE, team_cluster_queue, team_namespace
from modules.k8s.queueing.spec import team_queue
from modules.k8s.site.spec import SiteSpec
from modules.k8s.tenancy.quotas import COVERED_RESOURCES
from modules.validation import Checker

KUEUE_API = "kueue.x-k8s.io/v1beta2"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
ADMISSION_CHECK_NAME = "multikueue"
MULTIKUEUE_CONFIG_NAME = "fleet"
BURST_FLAVOR = "fleet-burst"
BURST_LOCAL_QUEUE = "burst"
#: The key of the kubeconfig in each worker Secret (what Kueue reads).
KUBECONFIG_KEY = "kubeconfig"
#: Stack output of a worker: the manager's kubeconfig (a Pulumi secret).
KUBECONFIG_OUTPUT = "multikueueKubeconfig"
#: Stack output of a worker: where it runs (name, kind, region, country).
SITE_OUTPUT = "fleetSite"
#: Annotations on each MultiKueueCluster naming the worker's site (residency evidence).
SITE_ANNOTATION_PREFIX = "fleet.gpuplatform.ae/"
#: The headless Service every worker has in each bursting team's namespace, so a
#: dispatched TrainingJob (``rendezvous_service="fleet-rdzv"``) finds pod 0 by DNS:
#: MultiKueue copies the Job to the worker, not a per-job Service.
RENDEZVOUS_SERVICE = "fleet-rdzv"
#: torchrun's c10d port and the labels of every training pod (as
#: ``modules.k8s.trainer.training_job.manifests`` sets them; a test keeps the two in
#: step).
RENDEZVOUS_PORT = 29500
TRAINING_POD_LABELS = {
    "app.kubernetes.io/name": "training",
    "app.kubernetes.io/part-of": "gpuplatform",
}
#: Lowest Kubernetes version of a manager: MultiKueue dispatches batch Jobs through
#: ``spec.managedBy`` (JobManagedBy, on by default since 1.32).
MIN_MANAGER_KUBERNETES = (1, 32)

_STACK = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
_STACK_REFERENCE = re.compile(r"^[\w.-]+/[\w.-]+/[\w.-]+$")


def worker_cluster_name(stack: str) -> str:
    """The MultiKueueCluster name of a worker stack."""
    return f"worker-{stack}"


def worker_secret_name(stack: str) -> str:
    """The kueue-system Secret holding a worker's kubeconfig."""
    return f"multikueue-{stack}"


def manager_service_account(manager: str) -> str:
    """The ServiceAccount on a worker that a manager stack acts as."""
    return f"multikueue-{manager}"


def burst_cluster_queue(team: str) -> str:
    return f"{team_cluster_queue(team)}-burst"


@dataclass(frozen=True)
class FleetWorkerRef:
    """One worker of a manager's fleet (an entry of ``fleet.workers``).

    Args:
        stack: the worker's stack name in this project (its file is
            ``stacks/Pulumi.<stack>.yaml`` and declares ``fleetWorker.manager``).
        stack_reference: the fully qualified stack the manager reads the kubeconfig
            from (default ``organization/uae-gpu-platform/<stack>``, the name a
            self-managed backend gives it).
    """

    stack: str
    stack_reference: str | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_STACK.match(self.stack)), "stack", self.stack, "a stack name like uae-prod"
        )
        check.require(
            self.stack_reference is None or bool(_STACK_REFERENCE.match(self.stack_reference)),
            "stack_reference",
            self.stack_reference,
            "<organization>/<project>/<stack>, e.g. organization/uae-gpu-platform/uae-prod",
        )
        check.done()

    def reference(self, project: str) -> str:
        """The fully qualified stack name for ``pulumi.StackReference``."""
        return self.stack_reference or f"organization/{project}/{self.stack}"


@dataclass(frozen=True)
class FleetSpec:
    """A manager's fleet (config key ``uae-gpu-platform:fleet``).

    Args:
        workers: the worker stacks, most preferred first (MultiKueue's incremental
            dispatcher tries them in this order).
        burst_teams: the teams that may burst (default: every team of the manager);
            each must be a team of every worker too.
    """

    workers: tuple[FleetWorkerRef, ...] = ()
    burst_teams: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.require(bool(self.workers), "workers", [], "list at least one worker stack")
        stacks = [w.stack for w in self.workers]
        for name in sorted({s for s in stacks if stacks.count(s) > 1}):
            check.require(False, "workers", name, "each worker is listed once")
        check.done()


@dataclass(frozen=True)
class FleetWorkerSpec:
    """A worker's side of a fleet (config key ``uae-gpu-platform:fleetWorker``).

    Args:
        manager: the manager stack allowed to dispatch here (its ``fleet.workers``
            lists this stack); it gets a ServiceAccount limited to what MultiKueue needs.
    """

    manager: str

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_STACK.match(self.manager)), "manager", self.manager, "a stack name like onprem-ib"
        )
        check.done()


@dataclass(frozen=True)
class TeamBurstQuota:
    """What the workers together give one team (the burst ClusterQueue's quota)."""

    team: str
    cpu: int
    memory_gib: int
    gpus: int


@dataclass(frozen=True)
class WorkerInputs:
    """One worker as the manager sees it.

    Args:
        stack: the worker stack name.
        site: the worker's site (from its validated stack file).
        kubeconfig: the kubeconfig of the worker's manager identity (a secret output of
            the worker stack, read through ``pulumi.StackReference``).
        api_server_cidrs: where the worker's API server is (an AWS worker's VPC, where
            its private endpoint is; an on-premises worker's ``apiServerCidrs``): the
            only addresses the manager's Kueue may reach besides its own cluster.
    """

    stack: str
    site: SiteSpec
    kubeconfig: pulumi.Input[str]
    api_server_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetManagerInputs:
    """The manager's side: its workers and each bursting team's quota there."""

    workers: tuple[WorkerInputs, ...]
    burst_quotas: tuple[TeamBurstQuota, ...]


@dataclass(frozen=True)
class FleetWorkerInputs:
    """The worker's side: its manager, the cluster's own admin kubeconfig (the API
    endpoint and CA of the kubeconfig handed to the manager come from it) and the teams
    the manager bursts here."""

    manager: str
    cluster_kubeconfig: pulumi.Input[str]
    burst_teams: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetInputs:
    """Exactly one of ``manager`` / ``worker`` (a stack is never both: no nesting)."""

    manager: FleetManagerInputs | None = None
    worker: FleetWorkerInputs | None = None


# -- manager objects ------------------------------------------------------------------


def site_annotations(site: SiteSpec, stack: str) -> dict[str, str]:
    """The worker's site on its MultiKueueCluster, for the residency rule and reviewers."""
    return {
        f"{SITE_ANNOTATION_PREFIX}stack": stack,
        f"{SITE_ANNOTATION_PREFIX}site": site.name,
        f"{SITE_ANNOTATION_PREFIX}site-kind": site.kind,
        f"{SITE_ANNOTATION_PREFIX}region": site.region,
        f"{SITE_ANNOTATION_PREFIX}country": site.country,
    }


def worker_secret(stack: str, kubeconfig: pulumi.Input[str]) -> Manifest:
    """The Secret Kueue reads a worker's kubeconfig from (key ``kubeconfig``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(worker_secret_name(stack), KUEUE_NAMESPACE),
        "type": "Opaque",
        "stringData": {KUBECONFIG_KEY: pulumi.Output.secret(kubeconfig)},
    }


def multikueue_cluster(stack: str, site: SiteSpec) -> Manifest:
    return {
        "apiVersion": KUEUE_API,
        "kind": "MultiKueueCluster",
        "metadata": metadata(worker_cluster_name(stack), annotations=site_annotations(site, stack)),
        "spec": {
            "clusterSource": {
                "kubeConfig": {"locationType": "Secret", "location": worker_secret_name(stack)}
            }
        },
    }


def multikueue_config(workers: Sequence[str]) -> Manifest:
    return {
        "apiVersion": KUEUE_API,
        "kind": "MultiKueueConfig",
        "metadata": metadata(MULTIKUEUE_CONFIG_NAME),
        "spec": {"clusters": [worker_cluster_name(w) for w in workers]},
    }


def admission_check() -> Manifest:
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": metadata(ADMISSION_CHECK_NAME),
        "spec": {
            "controllerName": MULTIKUEUE_CONTROLLER,
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "MultiKueueConfig",
                "name": MULTIKUEUE_CONFIG_NAME,
            },
        },
    }


def burst_flavor() -> Manifest:
    """A flavor with no node labels: the manager never runs burst pods itself."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": metadata(BURST_FLAVOR),
        "spec": {},
    }


def burst_queue(quota: TeamBurstQuota) -> Manifest:
    """The team's burst ClusterQueue: what the workers give it, checked by MultiKueue.

    It is in the platform cohort (so ``kubectl get cohort`` shows all of a team's
    queues) but neither lends nor borrows: its flavor exists on no node here."""
    values = {"cpu": str(quota.cpu), "memory": f"{quota.memory_gib}Gi"}
    values[COVERED_RESOURCES[2]] = str(quota.gpus)
    flavor = {
        "name": BURST_FLAVOR,
        "resources": [
            {"name": r, "nominalQuota": values[r], "borrowingLimit": "0", "lendingLimit": "0"}
            for r in COVERED_RESOURCES
        ],
    }
    return team_queue(
        burst_cluster_queue(quota.team),
        quota.team,
        [flavor],
        {"admissionChecksStrategy": {"admissionChecks": [{"name": ADMISSION_CHECK_NAME}]}},
    )


def burst_local_queue(team: str) -> Manifest:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": metadata(BURST_LOCAL_QUEUE, team_namespace(team)),
        "spec": {"clusterQueue": burst_cluster_queue(team)},
    }


# -- worker objects -------------------------------------------------------------------

#: The rules of Kueue v0.19's ``site/static/examples/multikueue/create-multikueue-
#: kubeconfig.sh``, kept for the kinds this platform dispatches (batch/job and jobset,
#: see `modules.k8s.queueing.spec.INTEGRATIONS`) and Kueue's own objects. Pods,
#: StatefulSets, LeaderWorkerSets, Kubeflow, Ray and AppWrapper rules are left out:
#: those integrations are not enabled, and TrainJobs are not dispatched (a burst job is
#: an Indexed Job: `modules.k8s.trainer.training_job.spec.TrainingJobSpec.launcher`), so
#: the manager never needs them.
MANAGER_RULES: tuple[Manifest, ...] = (
    {"apiGroups": ["batch"], "resources": ["jobs"],
     "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
     "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets/status"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
     "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"],
     "verbs": ["get", "patch", "update"]},
)  # fmt: skip


def manager_identity(manager: str) -> list[Manifest]:
    """ServiceAccount, ClusterRole and ClusterRoleBinding for the manager stack."""
    name = manager_service_account(manager)
    return [
        # The token is read from its own Secret below; pods never mount it.
        rbac.service_account(metadata(name, KUEUE_NAMESPACE), mount_token=False),
        rbac.role(metadata(name), MANAGER_RULES, cluster=True),
        rbac.role_binding(
            metadata(name),
            name,
            rbac.service_account_subjects(name, [KUEUE_NAMESPACE]),
            role_kind="ClusterRole",
            cluster=True,
        ),
    ]


def rendezvous_service(team: str) -> Manifest:
    """A headless Service over the team's training pods: pod ``<job>-0`` of a job whose
    subdomain is this Service resolves as ``<job>-0.fleet-rdzv`` (Indexed Job
    hostnames are unique per job, so one Service serves every job of the namespace)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(RENDEZVOUS_SERVICE, team_namespace(team)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": dict(TRAINING_POD_LABELS),
            "ports": [
                {
                    "name": "c10d",
                    "port": RENDEZVOUS_PORT,
                    "targetPort": RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def token_secret(manager: str) -> Manifest:
    """A long-lived token for the manager's ServiceAccount (as Kueue's script makes)."""
    name = manager_service_account(manager)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(
            name, KUEUE_NAMESPACE, annotations={"kubernetes.io/service-account.name": name}
        ),
        "type": "kubernetes.io/service-account-token",
    }


def manager_kubeconfig(cluster_kubeconfig: str, token: str, manager: str) -> str:
    """The kubeconfig the manager uses: the cluster's server and CA from its admin
    kubeconfig (YAML or JSON), the ServiceAccount's token as the only credential.

    Raises:
        ValueError: the admin kubeconfig names no cluster server.
    """
    document = yaml.safe_load(cluster_kubeconfig) or {}
    clusters = document.get("clusters") or []
    if not clusters or not (clusters[0].get("cluster") or {}).get("server"):
        raise ValueError("the cluster's kubeconfig names no server; cannot build the worker's")
    cluster = clusters[0]["cluster"]
    user = f"{manager_service_account(manager)}"
    entry: dict[str, Any] = {"server": cluster["server"]}
    if cluster.get("certificate-authority-data"):
        entry["certificate-authority-data"] = cluster["certificate-authority-data"]
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "worker", "cluster": entry}],
            "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": user}}],
            "current-context": "worker",
            "users": [{"name": user, "user": {"token": token}}],
        },
        sort_keys=True,
    )
