"""The TrainingJob: spec validation, the manifests (schema-valid, requesting what the
pool offers, tolerating its taints), and the component under Pulumi mocks."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError
from tests.conftest import RunUnderMocks
from tests.support.k8s_schema import schema_errors
from tests.support.pools import P5EN
from workloads.deploy import TYPE_TOKEN, TrainingJob, TrainingJobSpec, training_job_manifests
from workloads.deploy.manifests import (
    METRICS_LABEL,
    QUEUE_LABEL,
    cpu_request_millicores,
    memory_request_mib,
    rendezvous_endpoint,
)

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
        "priority_class": "training-normal",
        "service_account": "team-a-training",
        "image": IMAGE,
        "checkpoint_claim": "fsx-checkpoints",
        "preset": "gpt2-124m",
        "nodes": 2,
        "cpu_training": not pool.has_gpus,
    }
    values.update(changes)
    return TrainingJobSpec(**values)


def pod_spec(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(m for m in manifests if m["kind"] == "Job")
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def trainer(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return next(c for c in pod_spec(manifests)["containers"] if c["name"] == "trainer")


@pytest.mark.parametrize("pool", [EFA_POOL, IB_POOL, L4_POOL, CPU_POOL], ids=lambda p: p.name)
def test_manifests_pass_the_kubernetes_1_33_schema(pool: NodePoolProfile) -> None:
    manifests = training_job_manifests(make_spec(pool, nodes=min(2, pool.max_size)))
    assert [m["kind"] for m in manifests] == ["Service", "Job"]
    assert schema_errors(manifests, "1.33") == []


def test_schema_check_catches_a_misspelled_field() -> None:
    manifests = training_job_manifests(make_spec())
    manifests[1]["spec"]["completionsMode"] = "Indexed"
    assert schema_errors(manifests, "1.33")


def test_efa_pod_requests_every_gpu_and_efa_device_and_tolerates_the_taints() -> None:
    manifests = training_job_manifests(make_spec())
    resources = trainer(manifests)["resources"]
    for section in ("requests", "limits"):
        assert resources[section]["nvidia.com/gpu"] == "8"
        assert resources[section]["vpc.amazonaws.com/efa"] == "16"
    assert resources["requests"]["cpu"] == f"{cpu_request_millicores(EFA_POOL)}m"
    assert resources["limits"]["memory"] == f"{memory_request_mib(EFA_POOL)}Mi"
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS
    assert cpu_request_millicores(EFA_POOL) < 192_000
    assert memory_request_mib(EFA_POOL) < 2048 * 1024
    tolerations = pod_spec(manifests)["tolerations"]
    for taint in EFA_POOL.taints:
        assert {
            "key": taint.key,
            "operator": "Equal",
            "value": taint.value,
            "effect": taint.effect,
        } in tolerations
    terms = pod_spec(manifests)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    selected = {e["key"]: e["values"] for e in terms[0]["matchExpressions"]}
    assert selected == {k: [v] for k, v in EFA_POOL.labels.items()}


def test_infiniband_pod_requests_the_rdma_resource_and_no_efa() -> None:
    resources = trainer(training_job_manifests(make_spec(IB_POOL)))["resources"]
    assert resources["limits"]["rdma/ib"] == "8"
    assert resources["limits"]["nvidia.com/gpu"] == "8"
    assert "vpc.amazonaws.com/efa" not in resources["limits"]
    env = {
        e["name"]: e["value"] for e in trainer(training_job_manifests(make_spec(IB_POOL)))["env"]
    }
    assert env["NCCL_NET"] == "IB"


def test_cpu_pod_requests_no_accelerators_and_runs_one_process() -> None:
    manifests = training_job_manifests(make_spec(CPU_POOL, preset="tiny"))
    container = trainer(manifests)
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert "--nproc_per_node=1" in container["args"]
    assert "initContainers" not in pod_spec(manifests)
    assert pod_spec(manifests)["tolerations"] == []


def test_job_is_an_indexed_queued_torchrun_job() -> None:
    spec = make_spec(max_restarts=5)
    manifests = training_job_manifests(spec)
    service, job = manifests
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a-queue"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    pod = pod_spec(manifests)
    assert pod["subdomain"] == service["metadata"]["name"]
    assert pod["priorityClassName"] == "training-normal"
    assert pod["serviceAccountName"] == "team-a-training"
    assert pod["restartPolicy"] == "Never"
    args = trainer(manifests)["args"]
    assert args[:6] == [
        "--nnodes=2",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rendezvous_endpoint(spec)}",
        "--rdzv_id=team-a-gpt2-124m",
        "--max_restarts=5",
    ]
    assert rendezvous_endpoint(spec) == "gpt2-124m-0.gpt2-124m-rdzv:29500"
    assert "--ckpt-dir=/checkpoints/gpt2-124m" in args
    selector = service["spec"]["selector"]
    assert all(pod_labels(manifests).get(k) == v for k, v in selector.items())


def pod_labels(manifests: list[dict[str, Any]]) -> dict[str, str]:
    labels: dict[str, str] = manifests[1]["spec"]["template"]["metadata"]["labels"]
    return labels


def test_pod_is_non_root_with_a_read_only_root_and_writable_scratch() -> None:
    manifests = training_job_manifests(make_spec())
    pod = pod_spec(manifests)
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
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "fsx-checkpoints"
    mounts = {m["mountPath"] for m in trainer(manifests)["volumeMounts"]}
    assert {"/dev/shm", "/tmp", "/scratch", "/checkpoints"} <= mounts


def test_metrics_port_is_named_and_scrapable() -> None:
    manifests = training_job_manifests(make_spec())
    ports = {p["name"]: p["containerPort"] for p in trainer(manifests)["ports"]}
    assert ports["metrics"] == 9500
    assert pod_labels(manifests)[METRICS_LABEL] == "training"
    assert "--metrics-port=9500" in trainer(manifests)["args"]


def test_fabric_env_and_restart_safety_reach_the_container() -> None:
    spec = make_spec(fabric_env_overrides={"NCCL_BUFFSIZE": "4194304"}, fabric_debug=True)
    env = {e["name"]: e["value"] for e in trainer(training_job_manifests(spec))["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["NCCL_BUFFSIZE"] == "4194304" and env["NCCL_DEBUG"] == "INFO"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_preflight_health_check_expects_the_pools_gpus() -> None:
    init = pod_spec(training_job_manifests(make_spec()))["initContainers"][0]
    assert init["args"] == ["-m", "workloads.health", "--expect-gpus=8", "--expect-nvlink"]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == "8"
    l4_init = pod_spec(training_job_manifests(make_spec(L4_POOL)))["initContainers"][0]
    assert "--expect-nvlink" not in l4_init["args"]


def test_pod_failure_policy_fails_fast_on_config_errors_and_ignores_disruptions() -> None:
    rules = training_job_manifests(make_spec())[1]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob" and rules[0]["onExitCodes"]["values"] == [2]
    assert rules[1] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }


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
    ],
)
def test_spec_validation_names_every_bad_field(changes: dict[str, Any], fields: set[str]) -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(**changes)
    assert {p.field for p in err.value.problems} == fields


def test_spec_refuses_pools_it_cannot_train_on() -> None:
    with pytest.raises(InvalidArgsError, match="has no GPUs"):
        make_spec(CPU_POOL, cpu_training=False)
    system = dataclasses.replace(CPU_POOL, role="system")
    with pytest.raises(InvalidArgsError, match="not the system pool"):
        make_spec(system)
    shared = dataclasses.replace(L4_POOL, gpu_sharing="time-slicing", gpu_replicas=4)
    with pytest.raises(InvalidArgsError, match="whole GPUs"):
        make_spec(shared)


def test_image_digest_is_accepted() -> None:
    digest = "sha256:" + "a" * 64
    make_spec(image=IMAGE.replace(":2025.06.1", "@" + digest))


# --- the component under Pulumi mocks (the project's run_under_mocks fixture) --------


def example_program(spec: TrainingJobSpec, with_provider: bool = True) -> None:
    provider = k8s.Provider("cluster") if with_provider else None
    TrainingJob("example", spec, provider=provider)  # type: ignore[arg-type]


def test_component_registers_every_object_with_the_explicit_provider(
    run_under_mocks: RunUnderMocks,
) -> None:
    spec = make_spec()
    registrations = run_under_mocks(lambda: example_program(spec))
    (component,) = [r for r in registrations.values() if r.type == TYPE_TOKEN]
    (provider,) = [r for r in registrations.values() if r.type == "pulumi:providers:kubernetes"]
    objects = [r for r in registrations.values() if r.parent == component.urn]
    expected = training_job_manifests(spec)
    assert sorted(r.type for r in objects) == [
        "kubernetes:batch/v1:Job",
        "kubernetes:core/v1:Service",
    ]
    for record in objects:
        assert record.custom
        assert record.provider.startswith(provider.urn), record.provider
        manifest = next(m for m in expected if m["kind"] == record.type.rsplit(":", 1)[1])
        assert record.inputs["metadata"] == manifest["metadata"]
        assert record.inputs["spec"] == manifest["spec"]
    assert component.component_outputs == {
        "job_name": "gpt2-124m",
        "service_name": "gpt2-124m-rdzv",
        "namespace": "team-a",
    }


def test_component_refuses_to_run_without_a_provider(run_under_mocks: RunUnderMocks) -> None:
    with pytest.raises(ValueError, match="explicit provider"):
        run_under_mocks(lambda: example_program(make_spec(), with_provider=False))


def test_fabric_check_job_runs_the_check_across_the_pool() -> None:
    spec = make_spec(
        name="fabric-check", workload="fabric-check", checkpoint_claim=None, max_restarts=0
    )
    manifests = training_job_manifests(spec)
    assert schema_errors(manifests, "1.33") == []
    container = trainer(manifests)
    assert container["args"][-3:] == [
        "-m",
        "workloads.fabric_check",
        "--instance-type=p5en.48xlarge",
    ]
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
    assert "checkpoints" not in {v["name"] for v in pod_spec(manifests)["volumes"]}
    assert METRICS_LABEL not in pod_labels(manifests)
    rules = manifests[1]["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["onExitCodes"]["values"] == [1, 2]  # below threshold: do not retry


def test_fabric_check_needs_two_nodes_and_a_threshold() -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(IB_POOL, workload="fabric-check", nodes=1)
    assert {p.field for p in err.value.problems} == {"nodes", "min_busbw_gbps"}
    onprem = make_spec(IB_POOL, workload="fabric-check", min_busbw_gbps=150.0)
    assert "--min-busbw-gbps=150.0" in trainer(training_job_manifests(onprem))["args"]


def test_training_needs_a_checkpoint_claim() -> None:
    with pytest.raises(InvalidArgsError) as err:
        make_spec(checkpoint_claim=None)
    assert {p.field for p in err.value.problems} == {"checkpoint_claim"}


def test_held_job_is_suspended_and_not_queued_until_released() -> None:
    held = training_job_manifests(make_spec(hold=True, suspend=False))[1]
    assert held["spec"]["suspend"] is True
    assert QUEUE_LABEL not in held["metadata"]["labels"]
    released = training_job_manifests(make_spec(hold=False))[1]
    assert released["metadata"]["labels"][QUEUE_LABEL] == "team-a-queue"
