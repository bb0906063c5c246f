"""Queueing: Kueue decides when a job may start, and where.

* One ResourceFlavor per node pool (except ``system``): the pool's labels become the
  admitted pods' node selector, and the pool's taints are ``nodeTaints``, so a job is
  given a GPU or fabric flavor only if it tolerates that pool's taints itself. A job
  that did not ask for EFA or InfiniBand can never be placed on such a pool by Kueue.
* One ClusterQueue per team, all in one cohort: the team's quotas (see `quotas`) are its
  nominal quota on each flavor; idle quota is lent within the cohort and reclaimed by
  preemption; with fair sharing on, idle capacity goes to the team with the lowest
  weighted share.
* One LocalQueue ``training`` in each team namespace: jobs name it in the label
  ``kueue.x-k8s.io/queue-name``.
* PriorityClasses ``production``, ``research``, ``preemptible``: Kueue orders and
  preempts by the pod priority. (No Kueue WorkloadPriorityClasses: the namespace quota
  gates PriorityClasses per team, and a Kueue label could otherwise bypass that gate.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import yaml

from modules.k8s import netpol
from modules.k8s.common import Manifest, PlatformNamespace, metadata, system_node_selector
from modules.k8s.names import (
    COHORT_NAME,
    KUEUE_NAMESPACE,
    LOCAL_QUEUE_NAME,
    MONITORING_NAMESPACE,
    PRIORITY_CLASSES,
    team_cluster_queue,
    team_namespace,
)
from modules.k8s.tenancy.quotas import COVERED_RESOURCES, borrowable, team_flavor_quotas
from modules.k8s.tenancy.spec import TeamSpec
from modules.k8s.trainer.spec import TRAINJOB_INTEGRATION
from modules.k8s.versions import KUEUE
from modules.pools import NodePoolProfile
from modules.validation import Checker

KUEUE_API = "kueue.x-k8s.io/v1beta2"

#: Extended resources Kueue does not account: the fabric devices (a job on a fabric
#: flavor gets the whole node's devices anyway), hugepages (EFA) and ephemeral storage.
EXCLUDED_RESOURCE_PREFIXES = ("vpc.amazonaws.com/efa", "rdma/", "hugepages-", "ephemeral-storage")

#: Job kinds Kueue manages when they carry a queue label: batch Jobs, JobSets, and
#: Kubeflow Trainer's TrainJobs (Kueue builds a TrainJob's pods from its runtime; the
#: JobSet a TrainJob owns is the TrainJob's, never queued on its own). Kueue sets up an
#: integration whose CRD is not yet installed once the CRD appears.
INTEGRATIONS = ("batch/job", "jobset.x-k8s.io/jobset", TRAINJOB_INTEGRATION)


@dataclass(frozen=True)
class QueueingSpec:
    """Kueue settings (config key ``uae-gpu-platform:queueing``).

    Args:
        fair_sharing: share idle capacity between teams by weighted share (default
            true); false falls back to Kueue's classic borrowing and preemption.
        reclaim_within_cohort: when a team needs its own quota back from borrowers:
            ``Any`` (default: preempt any borrower), ``LowerPriority`` or ``Never``.
        preemption_within_team: whether a team's pending job may preempt the team's own
            running jobs: ``LowerPriority`` (default), ``LowerOrNewerEqualPriority`` or
            ``Never``.
        wait_for_pods_ready_minutes: an admitted job whose pods are not all running
            within this time is evicted and requeued (default 30; GPU nodes scaled from
            zero take several minutes to join).
    """

    fair_sharing: bool = True
    reclaim_within_cohort: Literal["Any", "LowerPriority", "Never"] = "Any"
    preemption_within_team: Literal["LowerPriority", "LowerOrNewerEqualPriority", "Never"] = (
        "LowerPriority"
    )
    wait_for_pods_ready_minutes: int = 30

    def __post_init__(self) -> None:
        check = Checker()
        check.one_of(
            "reclaim_within_cohort", self.reclaim_within_cohort, ("Any", "LowerPriority", "Never")
        )
        check.one_of(
            "preemption_within_team",
            self.preemption_within_team,
            ("LowerPriority", "LowerOrNewerEqualPriority", "Never"),
        )
        check.within("wait_for_pods_ready_minutes", self.wait_for_pods_ready_minutes, 5, 240)
        check.done()


def kueue_manager_config(
    spec: QueueingSpec, multikueue_origin: str | None = None
) -> dict[str, Any]:
    """Kueue's controller configuration (``config.kueue.x-k8s.io/v1beta2``).

    ``multikueue_origin``: on a fleet manager, the label value marking the objects it
    creates on its workers (see `multikueue_settings`)."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        # Only jobs that name a queue are Kueue's; platform jobs run as they are.
        "manageJobsWithoutQueueName": False,
        "waitForPodsReady": {
            "timeout": f"{spec.wait_for_pods_ready_minutes}m",
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60},
        },
        "integrations": {"frameworks": list(INTEGRATIONS)},
        "resources": {"excludeResourcePrefixes": list(EXCLUDED_RESOURCE_PREFIXES)},
    }
    if multikueue_origin is not None:
        config["multiKueue"] = multikueue_settings(multikueue_origin)
    if spec.fair_sharing:
        config["fairSharing"] = {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        }
    return config


def multikueue_settings(origin: str) -> dict[str, Any]:
    """MultiKueue on a fleet manager (docs/fleet.md): workers tried in the listed order,
    one at a time (the incremental dispatcher); a workload whose worker is unreachable
    keeps its place for 15 minutes, then is evicted and queued again (nothing is lost:
    the Job and its checkpoints stay); remote leftovers are garbage-collected."""
    return {
        "gcInterval": "1m",
        "origin": origin,
        "workerLostTimeout": "15m",
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    }


#: The controller's image as Kueue's released charts name it: its release job packages
#: the chart with the promoted registry (``hack/helm-chart-package.sh``:
#: ``registry.k8s.io/kueue``) and the release tag. (registry, repository under it, tag.)
KUEUE_IMAGE = ("registry.k8s.io", "kueue/kueue", f"v{KUEUE.version}")


def kueue_values(
    spec: QueueingSpec, multikueue_origin: str | None = None, registry: str | None = None
) -> dict[str, Any]:
    """Values of the Kueue chart: two controller replicas on the system pool, metrics
    scraped by Prometheus, and our controller configuration; with ``registry`` (on AWS
    the stack's ECR) the controller's image from that mirror, under its upstream path,
    pulled at each start."""
    manager: dict[str, Any] = {}
    if registry is not None:
        _, repository, tag = KUEUE_IMAGE
        image = {"repository": f"{registry}/{repository}", "tag": tag, "pullPolicy": "Always"}
        manager = {"manager": {"image": image}}
    return {
        "controllerManager": {
            "replicas": 2,
            "nodeSelector": system_node_selector(),
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
            **manager,
        },
        "enablePrometheus": True,
        "metrics": {"prometheusNamespace": MONITORING_NAMESPACE},
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(
                kueue_manager_config(spec, multikueue_origin), sort_keys=False
            )
        },
    }


def resource_flavor(pool: NodePoolProfile) -> Manifest:
    """A pool as a Kueue flavor: its labels select its nodes; its taints must be
    tolerated by the job itself (no tolerations are injected)."""
    spec: dict[str, Any] = {"nodeLabels": dict(pool.labels)}
    if pool.taints:
        spec["nodeTaints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints
        ]
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": metadata(pool.name),
        "spec": spec,
    }


def cluster_queue(team: TeamSpec, pools: Sequence[NodePoolProfile], spec: QueueingSpec) -> Manifest:
    """The team's ClusterQueue: its quotas per flavor, in the shared cohort."""
    pct = team.borrow_limit_percent

    def quota(name: str, amount: int, unit: str = "") -> dict[str, str]:
        return {
            "name": name,
            "nominalQuota": f"{amount}{unit}",
            "borrowingLimit": f"{borrowable(amount, pct)}{unit}",
        }

    flavors = [
        {
            "name": q.pool,
            "resources": [
                quota("cpu", q.cpu),
                quota("memory", q.memory_gib, "Gi"),
                quota(COVERED_RESOURCES[2], q.gpus),
            ],
        }
        for q in team_flavor_quotas(team, pools)
    ]
    return team_queue(
        team_cluster_queue(team.name),
        team.name,
        flavors,
        {
            "preemption": {
                "reclaimWithinCohort": spec.reclaim_within_cohort,
                "withinClusterQueue": spec.preemption_within_team,
            },
            "fairSharing": {"weight": str(team.fair_share_weight)},
        },
    )


def team_queue(
    name: str, team: str, flavors: list[Manifest], settings: Mapping[str, Any]
) -> Manifest:
    """A ClusterQueue ``name`` in the platform cohort that admits the workloads of
    ``team``'s namespace on ``flavors`` (each with its quota of every covered resource),
    in order of arrival but without head-of-line blocking, with ``settings`` besides
    (preemption, fair sharing, admission checks)."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": metadata(name),
        "spec": {
            "cohortName": COHORT_NAME,
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": team_namespace(team)}
            },
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": list(COVERED_RESOURCES), "flavors": flavors}],
            **settings,
        },
    }


def local_queue(team: TeamSpec) -> Manifest:
    """The ``training`` queue in the team namespace, feeding the team's ClusterQueue."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": metadata(LOCAL_QUEUE_NAME, team_namespace(team.name)),
        "spec": {"clusterQueue": team_cluster_queue(team.name)},
    }


def priority_classes() -> list[Manifest]:
    """``production`` > ``research`` > ``preemptible``; none is the cluster default."""
    descriptions = {
        "production": "Jobs that must finish: preempt research and preemptible jobs.",
        "research": "Normal experiments.",
        "preemptible": "Opportunistic jobs on idle capacity; first to be preempted.",
    }
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": metadata(name),
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "Never" if name == "preemptible" else "PreemptLowerPriority",
            "description": descriptions[name],
        }
        for name, value in PRIORITY_CLASSES.items()
    ]


# The Kueue controller runs non-root with all capabilities dropped: restricted fits.
KUEUE_NS = PlatformNamespace(KUEUE_NAMESPACE)


#: Kueue's controller pods (the chart's selector labels) and their ports: the admission
#: webhook (``webhook-server``, 9443), the visibility API the API server aggregates
#: (``visibility``, 8082) and the metrics endpoint Prometheus scrapes (``metrics``, 8443).
KUEUE_CONTROLLER_LABELS = {"control-plane": "controller-manager"}
KUEUE_WEBHOOK_PORT = "webhook-server"
KUEUE_VISIBILITY_PORT = "visibility"
KUEUE_METRICS_PORT = "metrics"


def kueue_network_policies(
    network: netpol.ClusterNetwork, worker_api_cidrs: Sequence[pulumi.Input[str]] = ()
) -> list[Manifest]:
    """Kueue reaches DNS and the API server; the API server calls its webhook and
    visibility API; Prometheus scrapes its metrics. On a fleet manager, MultiKueue also
    reaches the workers' API servers (``worker_api_cidrs``, over the site link)."""
    ns = KUEUE_NAMESPACE
    policies = [
        *netpol.baseline(ns, network),
        netpol.allow_from_api_server(
            ns,
            network,
            netpol.tcp(KUEUE_WEBHOOK_PORT, KUEUE_VISIBILITY_PORT),
            pod_labels=KUEUE_CONTROLLER_LABELS,
        ),
        netpol.allow_scrape(ns, netpol.tcp(KUEUE_METRICS_PORT), pod_labels=KUEUE_CONTROLLER_LABELS),
    ]
    if worker_api_cidrs:
        policies.append(
            netpol.allow_egress(
                ns,
                "allow-fleet-workers",
                netpol.cidr_peers(worker_api_cidrs),
                netpol.tcp(*netpol.API_SERVER_PORTS),
                pod_labels=KUEUE_CONTROLLER_LABELS,
            )
        )
    return policies
