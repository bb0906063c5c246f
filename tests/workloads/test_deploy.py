"""The TrainingJob: spec validation, the TrainJob it emits (valid against the vendored
Trainer CRD, naming the runtime of its framework, pool and PriorityClass, queued and
suspended), what the runtime it names carries for it (the pool's devices, fabric
environment, preflight, security context, checkpoint volume), the Indexed Job path kept
for fleet burst jobs, and the component under Pulumi mocks."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modules.k8s.security import pull_always
from modules.k8s.trainer.runtimes import cluster_training_runtime
from modules.k8s.trainer.spec import TrainerSpec
from modules.k8s.trainer.training_job.component import TYPE_TOKEN, TrainingJob
from modules.k8s.trainer.training_job.manifests import (
    METRICS_LABEL,
    PATCH_MANAGER,
    QUEUE_LABEL,
    cpu_request_millicores,
    memory_request_mib,
    rendezvous_endpoint,
    runtime_env,
    trainer_inputs,
    training_job_manifests,
)
from modules.k8s.trainer.training_job.spec import TrainingJobSpec
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError
from tests.conftest import RunUnderMocks
from tests.k8s.crd_checks import crd_errors
from tests.support.k8s_schema import schema_errors
from tests.support.pools import P5EN

EFA_POOL = P5EN
IB_POOL = NodePoolProfile(
    name="onprem-h100",
    role="gpu",
    instance_type=None,
    vcpus=112,
    memory_gib=1024,
    gpus_per_node=8,
    accelerator="nvidia-h100",
    gpu_memory_gib=80,
    fabric="infiniband",
    rdma_resource="rdma/ib",
    rdma_per_node=8,
    max_size=2,
)
L4_POOL = NodePoolProfile(
    name="gpu-g6",
    role="gpu",
    instance_type="g6.12xlarge",
    vcpus=48,
    memory_gib=192,
    gpus_per_node=4,
    accelerator="nvidia-l4",
    gpu_memory_gib=24,
    max_size=2,
)
CPU_POOL = NodePoolProfile(
    name="cpu-train",
    role="cpu-training",
    instance_type="c7i.4xlarge",
    vcpus=16,
    memory_gib=32,
    max_size=3,
)
IMAGE = "123456789012.dkr.ecr.me-central-1.amazonaws.com/training:2025.06.1"


def make_spec(pool: NodePoolProfile = EFA_POOL, **changes: Any) -> TrainingJobSpec:
    values: dict[str, Any] = {
        "name": "gpt2-124m",
        "namespace": "team-a",
        "pool": pool,
        "local_queue": "team-a-queue",
        "priority_class": "research",
        "service_account": "team-a-training",
        "image": IMAGE,
        "checkpoint_claim": "fsx-checkpoints",
        "preset": "gpt2-124m",
        "nodes": 2,
        "cpu_training": not pool.has_gpus,
    }
    values.update(changes)
    return TrainingJobSpec(**values)


def train_job(spec: TrainingJobSpec) -> dict[str, Any]:
    (job,) = training_job_manifests(spec)
    assert job["kind"] == "TrainJob"
    return job


def runtime(spec: TrainingJobSpec) -> dict[str, Any]:
    """The ClusterTrainingRuntime the job names, as the platform builds it for the pool."""
    inputs = trainer_inputs([spec.pool], IMAGE)
    built = cluster_training_runtime(
        spec.framework, spec.pool, spec.priority_class, inputs, TrainerSpec()
    )
    assert built["metadata"]["name"] == train_job(spec)["spec"]["runtimeRef"]["name"]
    return built


def runtime_pod(spec: TrainingJobSpec, job: str = "node") -> dict[str, Any]:
    jobs = runtime(spec)["spec"]["template"]["spec"]["replicatedJobs"]
    (found,) = [j for j in jobs if j["name"] == job]
    pod: dict[str, Any] = found["template"]["spec"]["template"]["spec"]
    return pod


def runtime_container(spec: TrainingJobSpec, job: str = "node") -> dict[str, Any]:
    (container,) = runtime_pod(spec, job)["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


# --- the TrainJob and the runtime it names -------------------------------------------


@pytest.mark.parametrize("pool", [EFA_POOL, IB_POOL, L4_POOL, CPU_POOL], ids=lambda p: p.name)
@pytest.mark.parametrize("framework", ["torch", "deepspeed", "mpi"])
def test_trainjob_and_its_runtime_pass_the_vendored_crds(
    pool: NodePoolProfile, framework: str
) -> None:
    spec = make_spec(pool, nodes=2, framework=framework)
    assert crd_errors([train_job(spec), runtime(spec)]) == []


def test_crd_check_catches_a_misspelled_field() -> None:
    job = train_job(make_spec())
    job["spec"]["trainer"]["numNode"] = 2
    assert crd_errors([job])


def test_trainjob_requests_every_gpu_and_efa_device_of_the_node() -> None:
    spec = make_spec()
    resources = train_job(spec)["spec"]["trainer"]["resourcesPerNode"]
    for section in ("requests", "limits"):
        assert resources[section]["nvidia.com/gpu"] == "8"
        assert resources[section]["vpc.amazonaws.com/efa"] == "16"
    assert resources["requests"]["cpu"] == f"{cpu_request_millicores(EFA_POOL)}m"
    assert resources["limits"]["memory"] == f"{memory_request_mib(EFA_POOL)}Mi"
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS
    assert cpu_request_millicores(EFA_POOL) < 192_000
    assert memory_request_mib(EFA_POOL) < 2048 * 1024
    # The runtime asks for the same (a TrainJob without resourcesPerNode gets them too).
    assert runtime_container(spec)["resources"] == resources
    pod = runtime_pod(spec)
    for taint in EFA_POOL.taints:
        assert {
            "key": taint.key,
            "operator": "Equal",
            "value": taint.value,
            "effect": taint.effect,
        } in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    selected = {e["key"]: e["values"] for e in terms[0]["matchExpressions"]}
    assert selected == {k: [v] for k, v in EFA_POOL.labels.items()}


def test_infiniband_runtime_requests_the_rdma_resource_and_no_efa() -> None:
    spec = make_spec(IB_POOL)
    limits = train_job(spec)["spec"]["trainer"]["resourcesPerNode"]["limits"]
    assert limits["rdma/ib"] == "8" and limits["nvidia.com/gpu"] == "8"
    assert "vpc.amazonaws.com/efa" not in limits
    assert env_of(runtime_container(spec))["NCCL_NET"] == "IB"
    assert "env" not in train_job(spec)["spec"]["trainer"]  # nothing differs from the runtime


def test_cpu_job_requests_no_accelerators_and_runs_one_process() -> None:
    spec = make_spec(CPU_POOL, preset="tiny")
    trainer = train_job(spec)["spec"]["trainer"]
    assert set(trainer["resourcesPerNode"]["limits"]) == {"cpu", "memory"}
    # Trainer's "auto" would start one process per CPU: the job asks for one.
    assert trainer["numProcPerNode"] == 1
    assert "initContainers" not in runtime_pod(spec)
    assert runtime_pod(spec)["tolerations"] == []


def test_trainjob_is_a_queued_suspended_torchrun_job_on_its_runtime() -> None:
    spec = make_spec(max_restarts=5)
    job = train_job(spec)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a-queue"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["runtimeRef"] == {
        "name": "torch-gpu-p5en-research",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 8
    assert trainer["image"] == IMAGE
    assert trainer["command"] == ["torchrun"]
    assert trainer["args"][:4] == [
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
        "--rdzv_id=team-a-gpt2-124m",
        "--max_restarts=5",
    ]
    assert "--ckpt-dir=/checkpoints/gpt2-124m" in trainer["args"]
    pod = runtime_pod(spec)
    assert pod["priorityClassName"] == "research"
    assert pod["restartPolicy"] == "Never"
    assert runtime(spec)["spec"]["template"]["spec"]["network"]["publishNotReadyAddresses"]


def test_the_teams_claim_and_service_account_reach_the_pods_by_a_runtime_patch() -> None:
    job = train_job(make_spec(termination_grace_period_s=300))
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "team-a-training"
    assert pod["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-checkpoints"}}
    ]
    assert pod["terminationGracePeriodSeconds"] == 300
    # A job on the runtime's own names patches nothing.
    plain = make_spec(service_account="trainer", checkpoint_claim="checkpoints")
    assert "runtimePatches" not in train_job(plain)["spec"]
    runtime_volumes = {v["name"] for v in runtime_pod(plain)["volumes"]}
    assert "checkpoints" in runtime_volumes and runtime_pod(plain)["serviceAccountName"] == (
        "trainer"
    )


def test_pods_are_non_root_with_a_read_only_root_and_writable_scratch() -> None:
    spec = make_spec()
    pod = runtime_pod(spec)
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"] + pod["initContainers"]:
        security = container["securityContext"]
        assert security["runAsUser"] == 10001 and security["runAsNonRoot"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"] for m in runtime_container(spec)["volumeMounts"]}
    assert {"/dev/shm", "/tmp", "/scratch", "/checkpoints"} <= mounts
    # The TrainJob patches no container: it cannot loosen the runtime's security.
    assert "containers" not in str(train_job(spec)["spec"].get("runtimePatches", ""))


def test_metrics_port_is_named_and_scrapable() -> None:
    spec = make_spec()
    ports = {p["name"]: p["containerPort"] for p in runtime_container(spec)["ports"]}
    assert ports["metrics"] == 9500
    jobs = runtime(spec)["spec"]["template"]["spec"]["replicatedJobs"]
    assert jobs[0]["template"]["spec"]["template"]["metadata"]["labels"][METRICS_LABEL] == (
        "training"
    )
    assert "--metrics-port=9500" in train_job(spec)["spec"]["trainer"]["args"]


def test_fabric_env_is_the_runtimes_and_a_job_adds_only_what_differs() -> None:
    spec = make_spec(fabric_env_overrides={"NCCL_BUFFSIZE": "4194304"}, fabric_debug=True)
    env = env_of(runtime_container(spec))
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["NCCL_NET"] == "AWS Libfabric"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert env == runtime_env(EFA_POOL)
    added = {e["name"]: e["value"] for e in train_job(spec)["spec"]["trainer"]["env"]}
    assert added == {
        "NCCL_BUFFSIZE": "4194304",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
    }


def test_preflight_health_check_expects_the_pools_gpus() -> None:
    init = runtime_pod(make_spec())["initContainers"][0]
    assert init["args"] == ["-m", "workloads.health", "--expect-gpus=8", "--expect-nvlink"]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert init["image"] == IMAGE
    l4_init = runtime_pod(make_spec(L4_POOL))["initContainers"][0]
    assert "--expect-nvlink" not in l4_init["args"]


def test_torch_runtimes_restart_after_lost_pods_and_end_with_pod_0() -> None:
    for framework in ("torch", "deepspeed"):
        jobset = runtime(make_spec(framework=framework))["spec"]["template"]["spec"]
        assert jobset["failurePolicy"] == {
            "maxRestarts": 3,
            "rules": [
                {
                    "name": "ConfigurationError",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                },
                {
                    "name": "PodsLost",
                    "action": "RestartJobSet",
                    "onJobFailureReasons": ["BackoffLimitExceeded"],
                },
            ],
        }
        (node,) = jobset["replicatedJobs"]
        assert node["template"]["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    # Horovod's launcher decides the MPI job: none of it there.
    mpi = runtime(make_spec(framework="mpi"))["spec"]["template"]["spec"]
    assert "failurePolicy" not in mpi
    assert not [j for j in mpi["replicatedJobs"] if "successPolicy" in j["template"]["spec"]]


@pytest.mark.parametrize("version", ["1.31", "1.33"])
def test_the_torch_runtimes_node_job_is_a_valid_job_on_every_supported_release(
    version: str,
) -> None:
    """The success policy is beta (on by default) in 1.31 and GA in 1.33: the node Job
    Trainer makes from the runtime (completions = parallelism = numNodes) passes the
    release's own Job schema."""
    (node,) = runtime(make_spec())["spec"]["template"]["spec"]["replicatedJobs"]
    spec = {**node["template"]["spec"], "completions": 2, "parallelism": 2}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}
    assert schema_errors([job], version) == []
    spec["successPolicy"] = {"rules": [{"succeededIndex": "0"}]}
    assert schema_errors([job], version)


def test_pod_failure_policy_fails_fast_on_config_errors_and_ignores_disruptions() -> None:
    jobs = runtime(make_spec())["spec"]["template"]["spec"]["replicatedJobs"]
    rules = jobs[0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob" and rules[0]["onExitCodes"]["values"] == [2]
    assert rules[0]["onExitCodes"]["containerName"] == "node"
    assert rules[1] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }


def test_elastic_trainjob_runs_torchrun_over_its_node_range() -> None:
    spec = make_spec(min_nodes=1, max_restarts=2)
    job = train_job(spec)
    assert crd_errors([job]) == []
    trainer = job["spec"]["trainer"]
    args = trainer["args"]
    # torchrun's own options, before the module: the node range overrides the fixed
    # PET_NNODES Trainer sets from numNodes, which stays the maximum Kueue admits.
    assert args[:5] == [
        "--nnodes=1:2",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
        "--rdzv_id=team-a-gpt2-124m",
        "--max_restarts=2",
    ]
    assert args.index("-m") == 5
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 8
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    # The global batch of all 2 nodes x 8 GPUs: gpt2-124m's micro-batch 32 x 16 steps.
    assert args[-1] == "--global-batch-size=8192"
    assert spec.global_batch_size == 32 * 16 * 2 * 8
    # A fixed job has none of it.
    fixed = train_job(make_spec(max_restarts=2))["spec"]["trainer"]
    assert not [a for a in fixed["args"] if a.startswith(("--nnodes", "--global-batch"))]
    assert "env" not in fixed


def test_elastic_trainjob_keeps_the_global_batch_its_args_give() -> None:
    accum = make_spec(min_nodes=2, nodes=2, extra_args=("--grad-accum-steps=1",))
    assert "--global-batch-size=512" in train_job(accum)["spec"]["trainer"]["args"]
    assert train_job(accum)["spec"]["trainer"]["args"][0] == "--nnodes=2:2"
    # The trainer's parser takes an abbreviation: so does the job.
    for given in (("--global-batch-size=256",), ("--global-batch", "256")):
        spec = make_spec(min_nodes=1, extra_args=given)
        args = train_job(spec)["spec"]["trainer"]["args"]
        assert spec.global_batch_size == 256
        assert [a for a in args if a.startswith("--global-batch")] == [given[0]]
    cpu = make_spec(CPU_POOL, min_nodes=1, nodes=3, preset="tiny")
    assert cpu.global_batch_size == 16 * 1 * 3 * 1


def test_deepspeed_job_runs_the_trainers_deepspeed_engine_on_its_runtime() -> None:
    job = train_job(make_spec(framework="deepspeed"))
    assert job["spec"]["runtimeRef"]["name"] == "deepspeed-gpu-p5en-research"
    assert job["spec"]["trainer"]["command"] == ["torchrun"]
    assert "--engine=deepspeed" in job["spec"]["trainer"]["args"]
    assert "--engine=deepspeed" not in train_job(make_spec())["spec"]["trainer"]["args"]


def test_mpi_job_runs_horovod_under_mpirun_forwarding_the_environment() -> None:
    spec = make_spec(framework="mpi", extra_args=("--steps=20",))
    trainer = train_job(spec)["spec"]["trainer"]
    command = trainer["command"]
    assert command[0] == "mpirun" and "args" not in trainer
    forwarded = {command[i + 1] for i, word in enumerate(command) if word == "-x"}
    assert set(runtime_env(EFA_POOL)) <= forwarded
    assert command[-3:] == [
        "/app/workloads/horovod/train.py",
        "--ckpt-dir=/checkpoints/gpt2-124m",
        "--steps=20",
    ]
    assert trainer["numProcPerNode"] == 8
    # The launcher is a node: the runtime gives it a node's resources, not the TrainJob.
    assert "resourcesPerNode" not in trainer
    (patch,) = train_job(spec)["spec"]["runtimePatches"]
    jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert {j["name"] for j in jobs} == {"node", "launcher"}


def test_fabric_check_job_runs_the_check_across_the_pool() -> None:
    spec = make_spec(
        name="fabric-check", workload="fabric-check", checkpoint_claim=None, max_restarts=0
    )
    job = train_job(spec)
    assert crd_errors([job]) == []
    args = job["spec"]["trainer"]["args"]
    assert args[-3:] == ["-m", "workloads.fabric_check", "--instance-type=p5en.48xlarge"]
    assert job["spec"]["trainer"]["resourcesPerNode"]["limits"]["vpc.amazonaws.com/efa"] == "16"


def test_fabric_check_needs_two_nodes_and_a_threshold() -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(IB_POOL, workload="fabric-check", nodes=1)
    assert {p.field for p in err.value.problems} == {"nodes", "min_busbw_gbps"}
    onprem = make_spec(IB_POOL, workload="fabric-check", min_busbw_gbps=150.0)
    assert "--min-busbw-gbps=150.0" in train_job(onprem)["spec"]["trainer"]["args"]


def test_training_needs_a_checkpoint_claim() -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(checkpoint_claim=None)
    assert {p.field for p in err.value.problems} == {"checkpoint_claim"}


def test_held_job_is_suspended_and_not_queued_until_released() -> None:
    held = train_job(make_spec(hold=True, suspend=False))
    assert held["spec"]["suspend"] is True
    assert QUEUE_LABEL not in held["metadata"]["labels"]
    released = train_job(make_spec(hold=False))
    assert released["metadata"]["labels"][QUEUE_LABEL] == "team-a-queue"
    assert released["spec"]["suspend"] is True  # Kueue unsuspends it on admission


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "fields"),
    [
        ({"image": IMAGE.replace(":2025.06.1", ":latest")}, {"image"}),
        ({"image": IMAGE.replace(":2025.06.1", "")}, {"image"}),
        ({"nodes": 0, "name": "Bad_Name"}, {"nodes", "name"}),
        ({"nodes": 9}, {"nodes"}),
        ({"cpu_training": True}, {"cpu_training"}),
        ({"preset": "gpt9", "metrics_port": 9400}, {"preset", "metrics_port"}),
        ({"termination_grace_period_s": 30}, {"termination_grace_period_s"}),
        ({"fabric_env_overrides": {"BAD-NAME": "1"}}, {"fabric_env_overrides"}),
        # What the TrainJob path takes from the runtime, or selects it by.
        ({"name": "1st-job"}, {"name"}),
        ({"priority_class": "training-normal"}, {"priority_class"}),
        ({"metrics_port": 9600, "backoff_limit": 5}, {"metrics_port", "backoff_limit"}),
        ({"health_check": False, "expect_nvlink": False}, {"health_check", "expect_nvlink"}),
        ({"checkpoint_mount_path": "/ckpt"}, {"checkpoint_mount_path"}),
        ({"fabric_env_overrides": {"NCCL_SOCKET_IFNAME": ""}}, {"fabric_env_overrides"}),
        ({"rendezvous_service": "fleet-rdzv"}, {"rendezvous_service"}),
        ({"framework": "mpi", "nodes": 1}, {"nodes"}),
        ({"framework": "mpi", "workload": "fabric-check"}, {"workload"}),
        ({"framework": "deepspeed", "launcher": "indexed-job"}, {"framework"}),
        ({"framework": "jax"}, {"framework"}),
        # Elastic jobs (min_nodes).
        ({"min_nodes": 0}, {"min_nodes"}),
        ({"min_nodes": 3}, {"min_nodes"}),
        ({"min_nodes": 1, "framework": "deepspeed"}, {"framework"}),
        ({"min_nodes": 1, "framework": "mpi"}, {"framework"}),
        ({"min_nodes": 1, "max_restarts": 0}, {"max_restarts"}),
        ({"min_nodes": 1, "extra_args": ("--micro-batch-size=many",)}, {"extra_args"}),
        ({"min_nodes": 1, "extra_args": ("--grad-accum-steps",)}, {"extra_args"}),
        (
            {"min_nodes": 1, "launcher": "indexed-job", "priority_class": "training-normal"},
            {"launcher"},
        ),
        (
            {
                "min_nodes": 1,
                "name": "fabric-check",
                "workload": "fabric-check",
                "checkpoint_claim": None,
            },
            {"workload"},
        ),
    ],
)
def test_spec_validation_names_every_bad_field(changes: dict[str, Any], fields: set[str]) -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(**changes)
    assert {p.field for p in err.value.problems} == fields


def test_elastic_spec_errors_are_one_line_naming_what_to_fix() -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(min_nodes=3, framework="deepspeed", max_restarts=0)
    lines = {p.field: p.describe() for p in err.value.problems}
    assert set(lines) == {"min_nodes", "framework", "max_restarts"}
    assert all("\n" not in line for line in lines.values())
    assert "between 1 and nodes (2)" in lines["min_nodes"]
    assert "ZeRO checkpoints do not reshard" in lines["framework"]
    with pytest.raises(InvalidArgsError) as err:
        make_spec(min_nodes=1, extra_args=("--grad-accum-steps=x",))
    (problem,) = err.value.problems
    assert "\n" not in problem.describe() and "--grad-accum-steps: got 'x'" in problem.expected


def test_spec_refuses_pools_it_cannot_train_on() -> None:
    with pytest.raises(InvalidArgsError, match="has no GPUs"):
        make_spec(CPU_POOL, cpu_training=False)
    system = dataclasses.replace(CPU_POOL, role="system")
    with pytest.raises(InvalidArgsError, match="not the system pool"):
        make_spec(system)
    shared = dataclasses.replace(L4_POOL, gpu_sharing="time-slicing", gpu_replicas=4)
    with pytest.raises(InvalidArgsError, match="whole GPUs"):
        make_spec(shared)
    preprocess = dataclasses.replace(CPU_POOL, role="preprocess")
    with pytest.raises(InvalidArgsError, match="a pool with runtimes"):
        make_spec(preprocess)
    make_spec(preprocess, launcher="indexed-job", priority_class="training-normal")


def test_image_digest_is_accepted() -> None:
    digest = "sha256:" + "a" * 64
    make_spec(image=IMAGE.replace(":2025.06.1", "@" + digest))


# --- the Indexed Job path (fleet burst jobs) -------------------------------------------


def indexed(pool: NodePoolProfile = EFA_POOL, **changes: Any) -> list[dict[str, Any]]:
    return training_job_manifests(make_spec(pool, launcher="indexed-job", **changes))


def job_pod(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(m for m in manifests if m["kind"] == "Job")
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize("pool", [EFA_POOL, IB_POOL, L4_POOL, CPU_POOL], ids=lambda p: p.name)
def test_indexed_job_manifests_pass_the_kubernetes_1_33_schema(pool: NodePoolProfile) -> None:
    manifests = indexed(pool, nodes=min(2, pool.max_size))
    assert [m["kind"] for m in manifests] == ["Service", "Job"]
    assert schema_errors(manifests, "1.33") == []
    manifests[1]["spec"]["completionsMode"] = "Indexed"
    assert schema_errors(manifests, "1.33")


def test_indexed_job_is_a_queued_torchrun_job_with_its_own_rendezvous() -> None:
    spec = make_spec(max_restarts=5, launcher="indexed-job", priority_class="training-normal")
    service, job = training_job_manifests(spec)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a-queue"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    pod = job_pod([service, job])
    assert pod["subdomain"] == service["metadata"]["name"]
    assert pod["priorityClassName"] == "training-normal"
    assert pod["serviceAccountName"] == "team-a-training"
    (trainer,) = pod["containers"]
    assert trainer["args"][:6] == [
        "--nnodes=2",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rendezvous_endpoint(spec)}",
        "--rdzv_id=team-a-gpt2-124m",
        "--max_restarts=5",
    ]
    assert rendezvous_endpoint(spec) == "gpt2-124m-0.gpt2-124m-rdzv:29500"
    assert trainer["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
    assert {e["name"]: e["value"] for e in trainer["env"]}["FI_PROVIDER"] == "efa"
    (preflight,) = pod["initContainers"]
    assert preflight["args"][-1] == "--expect-nvlink"
    selector = service["spec"]["selector"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in selector.items())


def test_indexed_fabric_check_fails_fast_below_its_threshold() -> None:
    manifests = indexed(name="fabric-check", workload="fabric-check", checkpoint_claim=None)
    assert "checkpoints" not in {v["name"] for v in job_pod(manifests)["volumes"]}
    rules = manifests[1]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["onExitCodes"]["values"] == [1, 2]  # below threshold: do not retry


# --- the component under Pulumi mocks (the project's run_under_mocks fixture) --------


def example_program(spec: TrainingJobSpec, with_provider: bool = True) -> None:
    provider = k8s.Provider("cluster") if with_provider else None
    TrainingJob("example", spec, provider=provider)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("launcher", "types", "service"),
    [
        ("trainer", ["kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"], "gpt2-124m"),
        (
            "indexed-job",
            ["kubernetes:batch/v1:Job", "kubernetes:core/v1:Service"],
            "gpt2-124m-rdzv",
        ),
    ],
)
def test_component_registers_every_object_with_the_explicit_provider(
    run_under_mocks: RunUnderMocks, launcher: str, types: list[str], service: str
) -> None:
    spec = make_spec(launcher=launcher)
    registrations = run_under_mocks(lambda: example_program(spec))
    (component,) = [r for r in registrations.values() if r.type == TYPE_TOKEN]
    (provider,) = [r for r in registrations.values() if r.type == "pulumi:providers:kubernetes"]
    objects = [r for r in registrations.values() if r.parent == component.urn]
    expected = training_job_manifests(spec)
    assert sorted(r.type for r in objects) == types
    for record in objects:
        assert record.custom
        assert record.provider.startswith(provider.urn), record.provider
        manifest = next(m for m in expected if m["kind"] == record.type.rsplit(":", 1)[1])
        assert record.inputs["metadata"] == manifest["metadata"]
        # As built, with every container pulling on each start (KubernetesObject).
        assert record.inputs["spec"] == pull_always(manifest)["spec"]
    assert component.component_outputs == {
        "job_name": "gpt2-124m",
        "service_name": service,
        "namespace": "team-a",
    }


def test_component_refuses_to_run_without_a_provider(run_under_mocks: RunUnderMocks) -> None:
    with pytest.raises(ValueError, match="explicit provider"):
        run_under_mocks(lambda: example_program(make_spec(), with_provider=False))
