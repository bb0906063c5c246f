"""Kubeflow Trainer as the shipped stacks install it: the pinned chart and its values
(every key exists in the vendored upstream values), the platform's
ClusterTrainingRuntimes and the example TrainJobs valid against the vendored upstream
CRDs (v2.3.0), Kueue's TrainJob integration and queue label, and the fabric settings,
devices, preflight, volumes and security each runtime carries for its pool."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.names import (
    CHECKPOINT_CLAIM_NAME,
    LOCAL_QUEUE_NAME,
    PRIORITY_CLASSES,
    TRAINER_SERVICE_ACCOUNT,
    TRAINER_UID,
)
from modules.k8s.trainer.pods import PREFLIGHT_CONTAINER
from modules.k8s.trainer.runtimes import (
    ANCESTOR_LABEL,
    FRAMEWORK_LABEL,
    POOL_LABEL,
    PRIORITY_LABEL,
    SSH_AUTH_MOUNT_PATH,
    runtime_name,
)
from modules.k8s.trainer.spec import (
    FRAMEWORKS,
    JOBSET_VERSION,
    KUBEFLOW_TRAINER,
    MIRRORED_REPOSITORIES,
    TRAINER_NAMESPACE,
    TRAINER_VERSION,
    TRAINJOB_INTEGRATION,
    TrainerSpec,
    horovod_image,
    trainer_values,
)
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from modules.validation import InvalidArgsError
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.fleet import stack_file_config
from stacks.kubernetes_layer import _trainer_inputs
from stacks.offline_plan import PlanError, load_stack_file, plan_registrations
from stacks.offline_runtime import Registration
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.vendored_crds import vendored_crd_errors
from tests.support.pools import P5EN
from workloads.training.config import preset

VENDOR = Path(__file__).resolve().parent / "vendor" / "kubeflow-trainer"
ROOT = Path(__file__).resolve().parents[2]
HELM = "kubernetes:helm.sh/v3:Release"
RUNTIME_TYPE = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"
TRAINJOB_TYPE = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: What JobSet v0.12.0's webhook accepts in a failure policy and the CRD's schema does
#: not say (kubernetes-sigs/jobset, tag v0.12.0, pkg/webhooks/jobset_webhook.go:
#: ``ruleNameFmt`` and ``validOnJobFailureReasons``).
JOBSET_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOBSET_JOB_FAILURE_REASONS = {
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
}
#: The shipped stack whose example job is elastic (``exampleJob.minNodes``).
ELASTIC_STACK = "smb-cpu"

#: Each shipped stack's training pool: (name, fabric, GPUs, the fabric's device resource
#: and count per node, NCCL_NET).
TRAINING_POOLS: dict[str, tuple[str, str, int, str | None, int, str]] = {
    "uae-prod": ("h200", "efa", 8, "vpc.amazonaws.com/efa", 16, "AWS Libfabric"),
    "onprem-ib": ("h100-ib", "infiniband", 8, "rdma/ib", 1, "IB"),
    "uae-dev": ("l4", "none", 1, None, 0, "Socket"),
    "smb-cpu": ("cpu-train", "none", 0, None, 0, "Socket"),
}


def registrations(stack: str, type_: str) -> list[Registration]:
    records, _ = shipped_plan(stack)
    return [r for r in records.values() if r.type == type_]


def all_runtimes(stack: str) -> list[dict[str, Any]]:
    return [r.inputs for r in registrations(stack, RUNTIME_TYPE)]


def all_train_jobs(stack: str) -> list[dict[str, Any]]:
    return [r.inputs for r in registrations(stack, TRAINJOB_TYPE)]


def runtimes(stack: str) -> list[dict[str, Any]]:
    """The platform's framework runtimes (torch, DeepSpeed, MPI); the feature store's
    CPU runtime is tests/k8s/test_features.py's."""
    return [
        r for r in all_runtimes(stack) if r["metadata"]["labels"][FRAMEWORK_LABEL] in FRAMEWORKS
    ]


def train_jobs(stack: str) -> list[dict[str, Any]]:
    """The example training job (the feature store's TrainJob is test_features.py's)."""
    framework_runtimes = {r["metadata"]["name"] for r in runtimes(stack)}
    return [
        j for j in all_train_jobs(stack) if j["spec"]["runtimeRef"]["name"] in framework_runtimes
    ]


def release(stack: str, name: str) -> dict[str, Any]:
    (found,) = [r.inputs for r in registrations(stack, HELM) if r.inputs["name"] == name]
    return found


def pods(runtime: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Replicated job name -> its pod spec."""
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return {j["name"]: j["template"]["spec"]["template"]["spec"] for j in jobs}


def node_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod["containers"] if c["name"] == "node"]
    return container


def literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


# -- the shipped objects against the vendored CRDs -------------------------------------


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_trainjob_and_runtime_of_the_shipped_plans_passes_the_vendored_crds(
    stack: str,
) -> None:
    objects = [*all_runtimes(stack), *all_train_jobs(stack)]
    kinds = {o["kind"] for o in objects}
    assert kinds == {"ClusterTrainingRuntime", "TrainJob"}, stack
    assert crd_errors(objects) == []


def test_the_crd_check_notices_a_misspelt_or_misplaced_field() -> None:
    runtime = copy.deepcopy(runtimes("uae-prod")[0])
    pods(runtime)["node"]["containers"][0]["resourcez"] = {}
    assert any("resourcez" in e for e in crd_errors([runtime]))
    job = copy.deepcopy(train_jobs("uae-prod")[0])
    job["spec"]["trainer"]["numNode"] = 2
    assert any("numNode" in e for e in crd_errors([job]))
    job = copy.deepcopy(train_jobs("uae-prod")[0])
    job["spec"]["suspend"] = "yes"
    assert vendored_crd_errors(job)
    job = copy.deepcopy(train_jobs("uae-prod")[0])
    job["metadata"]["name"] = "1-job"  # the CRD's CEL rule: RFC 1035 label
    assert any("RFC 1035" in e for e in crd_errors([job]))


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_each_training_pool_has_a_runtime_per_framework_and_priority(stack: str) -> None:
    pool = TRAINING_POOLS[stack][0]
    names = {r["metadata"]["name"] for r in runtimes(stack)}
    assert names == {
        runtime_name(f, pool, p) for f in ("torch", "deepspeed", "mpi") for p in PRIORITY_CLASSES
    }
    for runtime in runtimes(stack):
        labels = runtime["metadata"]["labels"]
        assert runtime["metadata"]["name"] == runtime_name(
            labels[FRAMEWORK_LABEL], labels[POOL_LABEL], labels[PRIORITY_LABEL]
        )
        for pod in pods(runtime).values():
            assert pod["priorityClassName"] == labels[PRIORITY_LABEL]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_example_trainjob_names_a_shipped_runtime_and_its_teams_queue(stack: str) -> None:
    (job,) = train_jobs(stack)
    names = {r["metadata"]["name"] for r in runtimes(stack)}
    assert job["spec"]["runtimeRef"]["name"] in names
    assert job["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    # Created suspended; Kueue unsuspends it when the team's queue admits it.
    assert job["spec"]["suspend"] is True
    _, plan = shipped_plan(stack)
    example = plan["config"]["uae-gpu-platform:exampleJob"]
    held = (json.loads(example) if isinstance(example, str) else example).get("suspended", True)
    labels = job["metadata"]["labels"]
    if held:
        assert QUEUE_LABEL not in labels  # out of the queue until released
    else:
        assert labels[QUEUE_LABEL] == LOCAL_QUEUE_NAME
    local_queues = [
        r.inputs
        for r in registrations(stack, "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")
        if r.inputs["metadata"]["name"] == LOCAL_QUEUE_NAME
    ]
    assert job["metadata"]["namespace"] in {q["metadata"]["namespace"] for q in local_queues}


# -- Kueue -----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_kueue_manages_trainjobs(stack: str) -> None:
    values = release(stack, "kueue")["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert TRAINJOB_INTEGRATION in config["integrations"]["frameworks"]
    # Only labelled jobs are Kueue's: a held TrainJob (no label) stays untouched.
    assert config["manageJobsWithoutQueueName"] is False


# -- the fabric, devices and preflight each runtime carries for its pool --------------


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_runtimes_carry_their_pools_fabric_devices_and_preflight(stack: str) -> None:
    pool, fabric, gpus, device, per_node, nccl_net = TRAINING_POOLS[stack]
    for runtime in runtimes(stack):
        for name, pod in pods(runtime).items():
            container = node_container(pod)
            env = literal_env(container)
            assert env["NCCL_NET"] == nccl_net, (runtime["metadata"]["name"], name)
            resources = container["resources"]
            assert resources["requests"] == resources["limits"]  # Guaranteed QoS
            limits = resources["limits"]
            assert limits.get("nvidia.com/gpu") == (str(gpus) if gpus else None)
            if device is not None:
                assert limits[device] == str(per_node)
            if fabric == "efa":
                assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
                assert "rdma/ib" not in limits
            if fabric == "infiniband":
                assert env["NCCL_IB_HCA"] == "mlx5"
                assert "vpc.amazonaws.com/efa" not in limits
            if fabric == "none":
                assert env["NCCL_IB_DISABLE"] == "1"
                assert not {k for k in limits if k.startswith(("rdma/", "vpc.amazonaws"))}
            # Placement on the pool, one pod per node, exactly the pool's taints.
            terms = pod["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            selected = {
                e["key"]: e["values"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]
            }
            assert selected["gpuplatform.ae/pool"] == [pool]
            assert selected["gpuplatform.ae/fabric"] == [fabric]
            (anti,) = pod["affinity"]["podAntiAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            assert anti["matchLabelKeys"] == ["jobset.sigs.k8s.io/jobset-name"]
            assert anti["topologyKey"] == "kubernetes.io/hostname"
            taints = {t["key"] for t in pod["tolerations"]}
            assert ("nvidia.com/gpu" in taints) == bool(gpus)
            assert ("gpuplatform.ae/fabric" in taints) == (fabric != "none")
            # The NVML preflight on GPU pools, with the trainer's GPUs.
            init = pod.get("initContainers", [])
            if gpus:
                (preflight,) = init
                assert preflight["name"] == PREFLIGHT_CONTAINER
                assert preflight["args"][:3] == ["-m", "workloads.health", f"--expect-gpus={gpus}"]
                assert preflight["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
            else:
                assert init == []


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_runtimes_are_restricted_with_the_teams_identity_and_checkpoints(stack: str) -> None:
    for runtime in runtimes(stack):
        for pod in pods(runtime).values():
            assert pod["serviceAccountName"] == TRAINER_SERVICE_ACCOUNT
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert not pod.get("hostNetwork") and not pod.get("hostIPC")
            for container in [*pod["containers"], *pod.get("initContainers", [])]:
                security = container["securityContext"]
                assert security["runAsNonRoot"] is True and security["runAsUser"] == TRAINER_UID
                assert security["allowPrivilegeEscalation"] is False
                assert security["readOnlyRootFilesystem"] is True
                assert security["capabilities"] == {"drop": ["ALL"]}
                assert security["seccompProfile"] == {"type": "RuntimeDefault"}
            volumes = {v["name"]: v for v in pod["volumes"]}
            claim = volumes["checkpoints"]["persistentVolumeClaim"]["claimName"]
            assert claim == CHECKPOINT_CLAIM_NAME
            mounts = {m["mountPath"] for m in node_container(pod)["volumeMounts"]}
            assert {"/checkpoints", "/dev/shm", "/tmp", "/scratch"} <= mounts
            assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"


def test_torch_and_deepspeed_runtimes_run_torchrun_with_a_c10d_rendezvous() -> None:
    for runtime in runtimes("uae-prod"):
        framework = runtime["metadata"]["labels"][FRAMEWORK_LABEL]
        if framework == "mpi":
            continue
        assert runtime["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
        ((name, pod),) = pods(runtime).items()
        assert name == "node"
        container = node_container(pod)
        assert container["command"] == ["torchrun"]
        args = container["args"]
        assert "--rdzv_backend=c10d" in args
        assert "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)" in args
        assert ("--engine=deepspeed" in args) == (framework == "deepspeed")
        assert runtime["spec"]["template"]["spec"]["network"]["publishNotReadyAddresses"]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_torch_runtimes_restart_after_lost_pods_and_end_with_pod_0(stack: str) -> None:
    """A lost pod other than 0 is a disruption the node Job does not count; the loss of
    pod 0 fails the other pods' torchrun (its c10d store is gone), and the JobSet
    recreates every pod rather than failing; a configuration error still fails it; the
    node Job succeeds with pod 0, so a job that finished on fewer nodes ends."""
    for runtime in runtimes(stack):
        jobset = runtime["spec"]["template"]["spec"]
        if runtime["metadata"]["labels"][FRAMEWORK_LABEL] == "mpi":
            assert "failurePolicy" not in jobset
            continue
        policy = jobset["failurePolicy"]
        assert policy["maxRestarts"] >= 1
        names = [rule["name"] for rule in policy["rules"]]
        assert len(set(names)) == len(names)
        assert all(JOBSET_RULE_NAME.match(name) for name in names), names
        actions = {
            reason: rule["action"]
            for rule in policy["rules"]
            for reason in rule["onJobFailureReasons"]
        }
        assert set(actions) <= JOBSET_JOB_FAILURE_REASONS
        assert actions == {
            "PodFailurePolicy": "FailJobSet",
            "BackoffLimitExceeded": "RestartJobSet",
        }
        (node,) = jobset["replicatedJobs"]
        job = node["template"]["spec"]
        assert job["completionMode"] == "Indexed"
        assert job["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
        rules = job["podFailurePolicy"]["rules"]
        assert rules[0]["action"] == "FailJob"  # reason PodFailurePolicy: FailJobSet
        assert {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        } in rules


def test_the_elastic_example_trainjob_runs_torchrun_over_its_node_range() -> None:
    _, plan = shipped_plan(ELASTIC_STACK)
    raw = plan["config"]["uae-gpu-platform:exampleJob"]
    example = json.loads(raw) if isinstance(raw, str) else raw
    (job,) = train_jobs(ELASTIC_STACK)
    assert crd_errors([job]) == []
    trainer = job["spec"]["trainer"]
    # numNodes is the maximum: what Trainer starts pods for and Kueue admits.
    assert trainer["numNodes"] == example["nodes"] > example["minNodes"] >= 1
    args = trainer["args"]
    module = args.index("-m")
    torchrun = args[:module]
    # On torchrun's command line, --nnodes overrides the fixed PET_NNODES Trainer sets.
    assert f"--nnodes={example['minNodes']}:{example['nodes']}" in torchrun
    assert "--rdzv_backend=c10d" in torchrun
    assert "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)" in torchrun
    (restarts,) = [a for a in torchrun if a.startswith("--max_restarts=")]
    assert int(restarts.split("=")[1]) >= 1
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    config = preset(example["preset"])
    full = config.micro_batch_size * config.grad_accum_steps * example["nodes"]
    assert f"--global-batch-size={full * trainer['numProcPerNode']}" in args[module:]
    # The runtime it names survives the loss of a pod (the test above).
    (named,) = [
        r
        for r in runtimes(ELASTIC_STACK)
        if r["metadata"]["name"] == job["spec"]["runtimeRef"]["name"]
    ]
    assert named["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] >= 1


def test_the_other_example_trainjobs_are_fixed_size() -> None:
    for stack in SHIPPED_STACKS:
        if stack == ELASTIC_STACK:
            continue
        (job,) = train_jobs(stack)
        assert not [a for a in job["spec"]["trainer"]["args"] if a.startswith("--nnodes")]


def test_mpi_runtime_runs_horovod_with_a_launcher_node_and_ssh_workers() -> None:
    (runtime,) = [r for r in runtimes("uae-prod") if r["metadata"]["name"] == "mpi-h200-research"]
    policy = runtime["spec"]["mlPolicy"]["mpi"]
    assert policy == {
        "numProcPerNode": 8,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
        "runLauncherAsNode": True,
    }
    template = runtime["spec"]["template"]["spec"]
    assert template["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["launcher"]}
    jobs = {j["name"]: j for j in template["replicatedJobs"]}
    assert jobs["launcher"]["dependsOn"] == [{"name": "node", "status": "Ready"}]
    assert jobs["launcher"]["template"]["metadata"]["labels"][ANCESTOR_LABEL] == "trainer"
    worker = node_container(pods(runtime)["node"])
    assert worker["command"] == ["/usr/sbin/sshd"]
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 2222
    launcher = node_container(pods(runtime)["launcher"])
    command = launcher["command"]
    assert command[0] == "mpirun"
    forwarded = {command[i + 1] for i, word in enumerate(command) if word == "-x"}
    # Processes started over SSH do not inherit the pod's environment: mpirun forwards it.
    assert set(literal_env(launcher)) <= forwarded
    images = {c["image"] for p in pods(runtime).values() for c in p["containers"]}
    (training_image,) = {
        c["image"] for p in pods(runtime).values() for c in p.get("initContainers", [])
    }
    assert images == {horovod_image(training_image, TrainerSpec())}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_kueue_keeps_an_admitted_job_while_a_lost_pod_waits_for_a_node(stack: str) -> None:
    """Kueue admits an elastic TrainJob's maximum and keeps it admitted while the pod of
    a lost node is pending: no ``recoveryTimeout``, which would suspend and requeue
    the whole job once a replacement pod waits longer than it."""
    values = release(stack, "kueue")["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert "recoveryTimeout" not in config["waitForPodsReady"]


# -- the chart -------------------------------------------------------------------------


def unknown_keys(values: Any, defaults: Any, path: str = "") -> list[str]:
    """Key paths of ``values`` the chart's values.yaml does not have."""
    if not isinstance(values, Mapping) or not isinstance(defaults, Mapping):
        return []
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            found.append(where)
        elif defaults[key]:  # an empty default ({}) takes any map
            found += unknown_keys(value, defaults[key], where)
    return found


def vendored_values(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((VENDOR / name).read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_trainer_chart_is_pinned_with_known_values(stack: str) -> None:
    found = release(stack, "kubeflow-trainer")
    assert (found["chart"], found["version"]) == (KUBEFLOW_TRAINER.chart, "2.3.0")
    assert found["namespace"] == TRAINER_NAMESPACE
    values = dict(found["values"])
    jobset = dict(values.pop("jobset"))
    assert unknown_keys(values, vendored_values("values.yaml")) == []
    # jobset.install is the trainer chart's switch for its dependency; the rest goes to
    # JobSet's own chart.
    assert "install" in vendored_values("values.yaml")["jobset"]
    jobset.pop("install")
    assert unknown_keys(jobset, vendored_values("jobset-values.yaml")) == []


def test_trainer_values_install_crds_no_builtin_runtime_and_pin_images() -> None:
    values = trainer_values(TrainerSpec())
    assert values["crds"]["enabled"] is True
    assert values["runtimes"]["defaultEnabled"] is False
    assert all(
        v["enabled"] is False for k, v in values["runtimes"].items() if k != "defaultEnabled"
    )
    assert values["dataCache"]["enabled"] is False
    assert values["manager"]["nodeSelector"] == {"gpuplatform.ae/role": "system"}
    assert values["jobset"]["controller"]["nodeSelector"] == {"gpuplatform.ae/role": "system"}
    assert values["manager"]["config"]["certManagement"]["enable"] is True
    assert values["image"]["tag"] == TRAINER_VERSION
    assert values["jobset"]["image"] == {
        "repository": "registry.k8s.io/jobset/jobset",
        "tag": JOBSET_VERSION,
        "pullPolicy": "Always",
    }
    assert values["image"]["pullPolicy"] == "Always"
    mirrored = trainer_values(TrainerSpec(registry="registry.site.ae/mirror"))
    assert mirrored["image"]["registry"] == "registry.site.ae/mirror"
    assert mirrored["jobset"]["image"]["repository"] == "registry.site.ae/mirror/jobset/jobset"


@pytest.mark.parametrize("stack", ["uae-prod", "smb-cpu", "uae-dev"])
def test_on_aws_trainers_images_come_from_the_stacks_own_ecr(stack: str) -> None:
    (release,) = [
        r.inputs
        for r in registrations(stack, "kubernetes:helm.sh/v3:Release")
        if r.inputs["chart"] == KUBEFLOW_TRAINER.chart
    ]
    ecr = f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}"
    values = release["values"]
    assert values["image"]["registry"] == ecr
    assert values["jobset"]["image"]["repository"] == f"{ecr}/jobset/jobset"
    # ... from repositories the stack creates, one per image.
    repositories = {r.inputs["name"] for r in registrations(stack, "aws:ecr/repository:Repository")}
    assert {f"gpu-{stack}/{name}" for name in MIRRORED_REPOSITORIES} <= repositories


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_trainer_namespace_is_restricted(stack: str) -> None:
    (ns,) = [
        r.inputs
        for r in registrations(stack, "kubernetes:core/v1:Namespace")
        if r.inputs["metadata"]["name"] == TRAINER_NAMESPACE
    ]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# -- the spec --------------------------------------------------------------------------


def test_horovod_image_follows_the_training_image() -> None:
    ecr = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu/training"
    assert horovod_image(f"{ecr}:0.1.0", TrainerSpec()) == f"{ecr}:horovod-0.1.0"
    pinned = f"{ecr}:hvd-2"
    assert horovod_image(f"{ecr}:0.1.0", TrainerSpec(mpi_image=pinned)) == pinned
    with pytest.raises(ValueError, match="no tag"):
        horovod_image("registry.site.ae:5000/training", TrainerSpec())


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"registry": "https://registry.site.ae/"}, {"registry"}),
        ({"frameworks": ("torch", "tensorflow")}, {"frameworks"}),
        ({"frameworks": ()}, {"frameworks"}),
        ({"mpi_image": "registry.site.ae/horovod:latest"}, {"mpi_image"}),
        ({"mpi_image": "registry.site.ae/horovod"}, {"mpi_image"}),
    ],
)
def test_trainer_spec_names_every_bad_field(changes: dict[str, Any], fields: set[str]) -> None:
    with pytest.raises(InvalidArgsError) as err:
        TrainerSpec(**changes)
    assert {p.field for p in err.value.problems} == fields


def test_an_onprem_stack_without_a_training_image_is_told_to_name_one() -> None:
    flat = dict(stack_file_config(ROOT / "stacks" / "Pulumi.onprem-ib.yaml"))
    del flat["uae-gpu-platform:exampleJob"]  # the example job needs the image too
    del flat["uae-gpu-platform:trainingImage"]
    config = parse_stack_config(flat)
    with pytest.raises(ConfigError, match="trainingImage: missing; the training runtimes"):
        _trainer_inputs(config, config.onprem_node_pools, None)
    flat["uae-gpu-platform:trainer"] = '{"enabled": false}'
    disabled = parse_stack_config(flat)
    assert _trainer_inputs(disabled, disabled.onprem_node_pools, None) is None


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_each_team_may_run_trainjobs_in_its_own_namespace_only(stack: str) -> None:
    namespaces = {
        r.inputs["metadata"]["name"]
        for r in registrations(stack, "kubernetes:core/v1:Namespace")
        if r.inputs["metadata"]["name"].startswith("team-")
    }
    roles = {
        r.inputs["metadata"]["namespace"]: r.inputs
        for r in registrations(stack, "kubernetes:rbac.authorization.k8s.io/v1:Role")
        if r.inputs["metadata"]["name"] == "trainjob-editor"
    }
    assert set(roles) == namespaces
    for ns, role in roles.items():
        (trainjobs, *_) = role["rules"]
        assert trainjobs["apiGroups"] == ["trainer.kubeflow.org"]
        assert "create" in trainjobs["verbs"] and "*" not in str(role["rules"])
        bindings = [
            r.inputs
            for r in registrations(stack, "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
            if r.inputs["metadata"] == {**r.inputs["metadata"], "namespace": ns}
        ]
        (binding,) = [b for b in bindings if b["roleRef"]["name"] == "trainjob-editor"]
        (edit,) = [b for b in bindings if b["roleRef"]["name"] == "edit"]
        subjects = binding["subjects"]
        assert subjects[0] == {
            "kind": "Group",
            "name": f"team:{ns.removeprefix('team-')}",
            "apiGroup": "rbac.authorization.k8s.io",
        }
        # Whoever may edit the namespace (on premises also the identity provider's
        # group) may run TrainJobs in it.
        assert subjects == edit["subjects"]
        if stack == "onprem-ib":
            assert len(subjects) == 2 and subjects[1]["name"].startswith("oidc:")


def test_a_stack_without_the_trainer_runs_its_example_job_as_an_indexed_job() -> None:
    """``trainer.enabled: false``: no chart, no runtime, no TrainJob (its CRD would be
    missing); the example job is the platform's own Indexed Job and Service."""
    config, secret_keys = load_stack_file("smb-cpu")
    config = {**config, "uae-gpu-platform:trainer": '{"enabled": false}'}
    # smb-cpu's example job is elastic, which needs the trainer: the plan says so.
    with pytest.raises(PlanError, match=r"exampleJob \(launcher\): .*trainer for an elastic"):
        plan_registrations("smb-cpu", config, secret_keys)
    raw = config["uae-gpu-platform:exampleJob"]
    example = json.loads(raw) if isinstance(raw, str) else dict(raw)
    del example["minNodes"]
    config["uae-gpu-platform:exampleJob"] = json.dumps(example)
    records = plan_registrations("smb-cpu", config, secret_keys)
    types = {r.type for r in records.values()}
    assert RUNTIME_TYPE not in types and TRAINJOB_TYPE not in types
    assert not [r for r in records.values() if r.inputs.get("name") == "kubeflow-trainer"]
    jobs = [r.inputs for r in records.values() if r.type == "kubernetes:batch/v1:Job"]
    assert any(j["metadata"]["name"] == "example-tiny" for j in jobs)
    values = next(
        r.inputs["values"]
        for r in records.values()
        if r.type == HELM and r.inputs.get("name") == "kueue"
    )
    assert "managerConfig" in values


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_runtimes_mount_no_api_token(stack: str) -> None:
    """No process of a training pod calls the Kubernetes API, and EKS Pod Identity
    projects its own token (modules.k8s.rbac): on AWS and on premises alike, no API
    token is mounted (checkov CKV_K8S_38)."""
    for runtime in runtimes(stack):
        for pod in pods(runtime).values():
            assert pod["automountServiceAccountToken"] is False, runtime["metadata"]["name"]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_torch_and_deepspeed_runtimes_log_to_the_clusters_mlflow(stack: str) -> None:
    """Every TrainJob a team submits on these runtimes logs to the tracking server as the
    team's user (the references are followed to their objects in test_tracking.py)."""
    for runtime in runtimes(stack):
        framework = runtime["metadata"]["labels"][FRAMEWORK_LABEL]
        for pod in pods(runtime).values():
            names = {e["name"] for c in pod["containers"] for e in c.get("env", [])}
            tracked = "MLFLOW_TRACKING_URI" in names
            assert tracked is (framework != "mpi"), runtime["metadata"]["name"]


@pytest.mark.parametrize(
    ("field", "floor", "unset"),
    [
        ("min_busbw_gbps", 0, True),
        ("max_restarts", 0, False),
        ("backoff_limit", 0, False),
        ("shm_size_gib", 1, True),
        ("scratch_size_gib", 1, False),
    ],
)
def test_a_training_jobs_counts_and_sizes_have_a_floor(field: str, floor: int, unset: bool) -> None:
    """Each count or size of a `TrainingJobSpec` is refused below its floor, by name, and
    accepted at it (and unset where the field has a default of its own)."""

    def job(value: float | None) -> TrainingJobSpec:
        return TrainingJobSpec(
            name="gpt2-124m",
            namespace="team-a",
            pool=P5EN,
            local_queue="team-a-queue",
            priority_class="research",
            service_account="team-a-training",
            image="registry.example/training:0.1.0",
            checkpoint_claim="fsx-checkpoints",
            preset="gpt2-124m",
            nodes=2,
            # The Indexed Job launcher takes every setting (the Trainer's runtimes fix
            # some of them).
            launcher="indexed-job",
            **{field: value},
        )

    assert getattr(job(floor), field) == floor
    if unset:
        assert getattr(job(None), field) is None
    with pytest.raises(InvalidArgsError) as raised:
        job(floor - 1)
    (problem,) = raised.value.problems
    assert (problem.field, problem.value) == (field, floor - 1)
    assert problem.expected.startswith(f">= {floor}")
