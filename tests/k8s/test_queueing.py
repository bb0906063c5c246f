"""Kueue: flavors per pool, a ClusterQueue per team in one cohort, LocalQueues,
PriorityClasses, and the controller configuration."""

from __future__ import annotations

import pytest
import yaml

from modules.k8s.names import COHORT_NAME
from modules.k8s.queueing.spec import (
    QueueingSpec,
    cluster_queue,
    kueue_manager_config,
    kueue_values,
    local_queue,
    priority_classes,
    resource_flavor,
)
from modules.validation import InvalidArgsError
from tests.k8s.crd_checks import crd_errors
from tests.k8s.fixtures import CPU, G6, P5EN, SYSTEM, TEAMS
from tests.k8s.programs import of_kind, registrations

POOLS = (SYSTEM, P5EN, G6, CPU)
VISION = TEAMS[0]


def test_a_flavor_per_pool_selects_its_nodes_and_requires_its_taints_tolerated() -> None:
    flavor = resource_flavor(P5EN)
    assert flavor["metadata"]["name"] == "gpu-p5en"
    assert flavor["spec"]["nodeLabels"] == P5EN.labels
    assert flavor["spec"]["nodeTaints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "gpuplatform.ae/fabric", "value": "efa", "effect": "NoSchedule"},
    ]
    # No injected tolerations: only a job that asked for EFA gets the EFA flavor.
    assert "tolerations" not in flavor["spec"]
    assert "nodeTaints" not in resource_flavor(CPU)["spec"]
    flavors = of_kind(registrations("eks"), "ResourceFlavor")
    assert sorted(f["metadata"]["name"] for f in flavors) == ["cpu-pre", "gpu-g6", "gpu-p5en"]


def test_team_cluster_queue_quotas_cohort_fair_sharing_and_preemption() -> None:
    cq = cluster_queue(VISION, POOLS, QueueingSpec())
    spec = cq["spec"]
    assert cq["metadata"]["name"] == "team-vision"
    assert spec["cohortName"] == COHORT_NAME
    assert spec["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-vision"}
    }
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
    }
    assert spec["fairSharing"] == {"weight": "2"}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert [f["name"] for f in group["flavors"]] == ["cpu-pre", "gpu-g6", "gpu-p5en"]
    gpu = flavors["gpu-p5en"]["nvidia.com/gpu"]
    assert (gpu["nominalQuota"], gpu["borrowingLimit"]) == ("16", "8")
    assert flavors["gpu-p5en"]["memory"]["nominalQuota"] == "3890Gi"  # 2 x (2048 - 103)
    assert flavors["cpu-pre"]["nvidia.com/gpu"]["nominalQuota"] == "0"
    assert crd_errors([cq]) == []


def test_each_team_has_a_local_queue_feeding_its_cluster_queue() -> None:
    queue = local_queue(VISION)
    assert queue["metadata"] == {
        **queue["metadata"],
        "name": "training",
        "namespace": "team-vision",
    }
    assert queue["spec"] == {"clusterQueue": "team-vision"}
    records = registrations("eks")
    queues = {
        q["metadata"]["namespace"]: q["spec"]["clusterQueue"]
        for q in of_kind(records, "LocalQueue")
    }
    cluster_queues = {c["metadata"]["name"] for c in of_kind(records, "ClusterQueue")}
    assert set(queues.values()) == cluster_queues
    assert set(queues) == {"team-vision", "team-nlp"}


def test_priority_classes() -> None:
    classes = {p["metadata"]["name"]: p for p in priority_classes()}
    assert set(classes) == {"production", "research", "preemptible"}
    assert (
        classes["production"]["value"]
        > classes["research"]["value"]
        > classes["preemptible"]["value"]
    )
    assert not any(p["globalDefault"] for p in classes.values())
    assert classes["preemptible"]["preemptionPolicy"] == "Never"


def test_kueue_configuration() -> None:
    values = kueue_values(QueueingSpec(wait_for_pods_ready_minutes=45))
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["manageJobsWithoutQueueName"] is False
    assert config["waitForPodsReady"]["timeout"] == "45m"
    assert "preemptionStrategies" in config["fairSharing"]
    assert "vpc.amazonaws.com/efa" in config["resources"]["excludeResourcePrefixes"]
    assert values["controllerManager"]["nodeSelector"] == {"gpuplatform.ae/role": "system"}
    assert values["enablePrometheus"] is True
    assert "fairSharing" not in kueue_manager_config(QueueingSpec(fair_sharing=False))


def test_queueing_spec_reports_every_problem() -> None:
    with pytest.raises(InvalidArgsError) as error:
        QueueingSpec(reclaim_within_cohort="Always", wait_for_pods_ready_minutes=1)  # type: ignore[arg-type]
    assert {p.field for p in error.value.problems} == {
        "reclaim_within_cohort",
        "wait_for_pods_ready_minutes",
    }
