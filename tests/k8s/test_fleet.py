"""The shipped fleet (onprem-ib bursting to uae-prod): MultiKueue objects on both sides
valid against the vendored Kueue CRDs, pointing at each other consistently; the
worker's identity no wider than Kueue's own setup script; the manager's queues."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from modules.k8s.fleet.spec import (
    BURST_LOCAL_QUEUE,
    KUBECONFIG_OUTPUT,
    MANAGER_RULES,
    MULTIKUEUE_CONTROLLER,
    RENDEZVOUS_PORT,
    RENDEZVOUS_SERVICE,
    SITE_OUTPUT,
    TRAINING_POD_LABELS,
    manager_kubeconfig,
)
from modules.k8s.names import CHECKPOINT_CLAIM_NAME, LOCAL_QUEUE_NAME, team_namespace
from modules.k8s.trainer.training_job.manifests import APP_LABELS, RDZV_PORT, training_job_manifests
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from stacks.config import PROJECT
from stacks.offline_runtime import STACK_OUTPUTS_DIR
from tests.conftest import shipped_plan
from tests.k8s.kueue_crds import kueue_errors
from tests.support.pools import P5EN

VENDOR = Path(__file__).resolve().parent / "vendor" / "kueue"
MANAGER, WORKER = "onprem-ib", "uae-prod"


def objects(stack: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [
        r.inputs
        for r in registrations.values()
        if r.type.startswith("kubernetes:") and "helm.sh" not in r.type
    ]


def of_kind(stack: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects(stack) if o.get("kind") == kind]


def names(stack: str, kind: str, namespace: str | None = None) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in of_kind(stack, kind)
        if namespace is None or o["metadata"].get("namespace") == namespace
    }


def test_every_kueue_object_of_the_fleet_passes_the_vendored_crds_strictly() -> None:
    for stack in (MANAGER, WORKER):
        kueue = [o for o in objects(stack) if str(o.get("apiVersion")).startswith("kueue.x-k8s")]
        assert kueue
        assert kueue_errors(kueue) == []
    kinds = {o["kind"] for o in objects(MANAGER)}
    assert {"MultiKueueConfig", "MultiKueueCluster", "AdmissionCheck"} <= kinds


def test_the_strict_validation_catches_a_misspelt_field() -> None:
    (config,) = of_kind(MANAGER, "MultiKueueConfig")
    broken = {**config, "spec": {"cluster": config["spec"]["clusters"]}}
    assert any("'cluster' was unexpected" in e for e in kueue_errors([broken]))


def test_the_manager_objects_point_at_each_other() -> None:
    configs = {o["metadata"]["name"]: o for o in of_kind(MANAGER, "MultiKueueConfig")}
    clusters = {o["metadata"]["name"]: o for o in of_kind(MANAGER, "MultiKueueCluster")}
    checks = {o["metadata"]["name"]: o for o in of_kind(MANAGER, "AdmissionCheck")}
    secrets = {
        o["metadata"]["name"]: o
        for o in of_kind(MANAGER, "Secret")
        if o["metadata"].get("namespace") == "kueue-system"
    }
    for check in checks.values():
        assert check["spec"]["controllerName"] == MULTIKUEUE_CONTROLLER
        assert check["spec"]["parameters"]["kind"] == "MultiKueueConfig"
        assert check["spec"]["parameters"]["name"] in configs
    for config in configs.values():
        assert config["spec"]["clusters"]
        assert set(config["spec"]["clusters"]) <= set(clusters)
    for cluster in clusters.values():
        source = cluster["spec"]["clusterSource"]["kubeConfig"]
        assert source["locationType"] == "Secret"
        # The secret exists, holds the key Kueue reads, and is masked in the plan.
        assert secrets[source["location"]]["stringData"] == {"kubeconfig": "[secret]"}
    burst = [
        q for q in of_kind(MANAGER, "ClusterQueue") if q["spec"].get("admissionChecksStrategy")
    ]
    assert burst
    for queue in burst:
        for rule in queue["spec"]["admissionChecksStrategy"]["admissionChecks"]:
            assert rule["name"] in checks
    queues = {q["metadata"]["name"] for q in of_kind(MANAGER, "ClusterQueue")}
    for local in of_kind(MANAGER, "LocalQueue"):
        assert local["spec"]["clusterQueue"] in queues


def test_the_site_keeps_its_own_queue_and_adds_a_burst_queue_for_nlp_only() -> None:
    local = {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in of_kind(MANAGER, "LocalQueue")
    }
    assert (team_namespace("nlp"), LOCAL_QUEUE_NAME) in local
    assert (team_namespace("nlp"), BURST_LOCAL_QUEUE) in local
    assert (team_namespace("vision"), BURST_LOCAL_QUEUE) not in local
    site_queues = [
        q for q in of_kind(MANAGER, "ClusterQueue") if not q["spec"].get("admissionChecksStrategy")
    ]
    assert site_queues  # steady work never waits for MultiKueue
    (burst,) = [
        q for q in of_kind(MANAGER, "ClusterQueue") if q["metadata"]["name"].endswith("-burst")
    ]
    quotas = {
        r["name"]: r["nominalQuota"]
        for r in burst["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    }
    # uae-prod gives nlp 8 GPUs on its p5en pool (a whole node: 192 vCPU and 2048 GiB less
    # the platform's reserve of 5%, rounded up: 10 vCPU, 103 GiB; modules/k8s/tenancy/quotas.py)
    # and 32 vCPU / 128 GiB on its preprocess pool.
    assert quotas == {
        "nvidia.com/gpu": "8",
        "cpu": str(192 - 10 + 32),
        "memory": f"{2048 - 103 + 128}Gi",
    }


def test_the_worker_mirrors_the_bursting_team() -> None:
    """MultiKueue creates the Job in the same namespace and queue on the worker, and
    the Job mounts the claim of the same name: the worker's own checkpoint volume."""
    namespace = team_namespace("nlp")
    assert namespace in names(WORKER, "Namespace")
    assert LOCAL_QUEUE_NAME in names(WORKER, "LocalQueue", namespace)
    assert CHECKPOINT_CLAIM_NAME in names(WORKER, "PersistentVolumeClaim", namespace)
    assert CHECKPOINT_CLAIM_NAME in names(MANAGER, "PersistentVolumeClaim", namespace)


def _upstream_rules() -> list[dict[str, Any]]:
    script = (VENDOR / "create-multikueue-kubeconfig.sh").read_text()
    first = script.split("kubectl apply -f - <<EOF\n", 1)[1].split("\nEOF", 1)[0]
    documents = list(yaml.safe_load_all(re.sub(r"\$\{[A-Z_]+\}", "x", first)))
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    return role["rules"]  # type: ignore[no-any-return]


def test_the_worker_identity_grants_nothing_beyond_kueues_setup_script() -> None:
    upstream = {
        (group, resource, verb)
        for rule in _upstream_rules()
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    (role,) = [
        r for r in of_kind(WORKER, "ClusterRole") if r["metadata"]["name"] == "multikueue-onprem-ib"
    ]
    ours = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ours and ours <= upstream
    assert role["rules"] == [dict(r) for r in MANAGER_RULES]
    assert not any(g == "" for g, _, _ in ours)  # no core objects: no secrets, no pods
    (binding,) = [
        b
        for b in of_kind(WORKER, "ClusterRoleBinding")
        if b["metadata"]["name"] == "multikueue-onprem-ib"
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "multikueue-onprem-ib", "namespace": "kueue-system"}
    ]
    (account,) = [
        a
        for a in of_kind(WORKER, "ServiceAccount")
        if a["metadata"]["name"] == "multikueue-onprem-ib"
    ]
    assert account["automountServiceAccountToken"] is False


def test_the_manager_kubeconfig_carries_only_the_token() -> None:
    admin = json.dumps(
        {
            "clusters": [
                {
                    "name": "c",
                    "cluster": {"server": "https://x.eks", "certificate-authority-data": "Q0E="},
                }
            ],
            "users": [{"name": "c", "user": {"exec": {"command": "aws"}}}],
        }
    )
    config = json.loads(manager_kubeconfig(admin, "tok", "onprem-ib"))
    assert config["clusters"][0]["cluster"] == {
        "server": "https://x.eks",
        "certificate-authority-data": "Q0E=",
    }
    assert config["users"] == [{"name": "multikueue-onprem-ib", "user": {"token": "tok"}}]


def test_the_offline_outputs_fixture_matches_what_the_worker_exports() -> None:
    """The StackReference fixture names outputs the worker really exports, with the
    same secrecy (one offline run of uae-prod's program, ~40 s)."""
    from stacks.offline_plan import load_stack_file, offline_program  # noqa: PLC0415
    from stacks.offline_runtime import run_program  # noqa: PLC0415

    config, secret_keys = load_stack_file(WORKER)
    _, mocks = run_program(
        offline_program(WORKER),
        project=PROJECT,
        stack=WORKER,
        config=config,
        secret_keys=secret_keys,
    )
    fixture = json.loads((STACK_OUTPUTS_DIR / f"{WORKER}.json").read_text())
    assert set(fixture["outputs"]) == {KUBECONFIG_OUTPUT, SITE_OUTPUT}
    assert set(fixture["outputs"]) <= set(mocks.stack_exports)
    assert mocks.stack_exports[KUBECONFIG_OUTPUT] is True
    assert mocks.stack_exports[SITE_OUTPUT] is False
    assert set(fixture["secretOutputNames"]) == {
        n for n in fixture["outputs"] if mocks.stack_exports[n]
    }


def test_a_burst_training_job_finds_its_rendezvous_on_the_worker() -> None:
    """The same TrainingJob, submitted to `burst` with the fleet's shared rendezvous
    Service: its pods are selected by the Service every worker has in the namespace.
    A burst job is an Indexed Job (MultiKueue dispatches it; a TrainJob needs its
    runtime on the manager, which holds runtimes for its own pools only)."""
    assert TRAINING_POD_LABELS == APP_LABELS and RENDEZVOUS_PORT == RDZV_PORT
    spec = TrainingJobSpec(
        name="burst-350m",
        namespace=team_namespace("nlp"),
        pool=P5EN,
        local_queue=BURST_LOCAL_QUEUE,
        priority_class="research",
        service_account="trainer",
        image="123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu/training:0.1.0",
        checkpoint_claim=CHECKPOINT_CLAIM_NAME,
        nodes=2,
        rendezvous_service=RENDEZVOUS_SERVICE,
        launcher="indexed-job",
    )
    (job,) = training_job_manifests(spec)  # no per-job Service: the worker has one
    pod = job["spec"]["template"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == BURST_LOCAL_QUEUE
    assert pod["spec"]["subdomain"] == RENDEZVOUS_SERVICE
    assert f"--rdzv_endpoint=burst-350m-0.{RENDEZVOUS_SERVICE}:{RDZV_PORT}" in str(pod["spec"])
    (service,) = [
        s
        for s in of_kind(WORKER, "Service")
        if s["metadata"]["name"] == RENDEZVOUS_SERVICE
        and s["metadata"]["namespace"] == team_namespace("nlp")
    ]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert RENDEZVOUS_SERVICE not in names(MANAGER, "Service")  # only where jobs run
