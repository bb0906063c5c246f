"""What every training pod of the platform has, as pure functions of the node pool.

One place for the conventions the platform's ClusterTrainingRuntimes (`runtimes`) and
the TrainingJob's Indexed Job path (`training_job.manifests`) share: requests equal
to a whole node's allocatable share (GPUs, EFA or RDMA devices, CPU and memory), the
restricted security context, the writable volumes under a read-only root filesystem,
the checkpoint volume, placement on the pool with one pod per node, the NVML
preflight init container (the trainer's MLflow wiring is `modules.k8s.trainer.tracking`).
Nothing here imports a component or the aggregate.
"""

from __future__ import annotations

from typing import Any

from modules.k8s.common import Manifest, toleration
from modules.k8s.names import TRAINER_GID, TRAINER_UID
from modules.k8s.security import restricted_container, restricted_pod
from modules.k8s.tenancy.quotas import allocatable_memory_gib, allocatable_vcpus
from modules.pools import NodePoolProfile

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: The training image's non-root user (``workloads/Dockerfile``); checkpoint
#: directories on the shared file system belong to it.
RUN_AS_USER = TRAINER_UID
CHECKPOINT_VOLUME = "checkpoints"
DEFAULT_CHECKPOINT_MOUNT = "/checkpoints"
DEFAULT_SCRATCH_GIB = 20
#: Accelerators whose 8-GPU boards are wired with NVLink/NVSwitch.
NVLINK_ACCELERATORS = ("a100", "h100", "h200", "b200", "gb200")
#: The preflight init container's name and the module it runs (``workloads.health``).
PREFLIGHT_CONTAINER = "gpu-preflight"


def is_training_pool(pool: NodePoolProfile) -> bool:
    """A pool a training job may take whole nodes of: whole (unshared) GPUs, or the
    ``cpu-training`` role. Shared GPUs are for small workloads, ``preprocess`` pools
    for data preparation, the ``system`` pool for platform services."""
    if pool.role == "gpu":
        return pool.has_gpus and pool.gpu_sharing == "none"
    return pool.role == "cpu-training"


def processes_per_node(pool: NodePoolProfile) -> int:
    """Training processes per pod: one per GPU, or one on CPU pools (gloo)."""
    return pool.gpus_per_node if pool.has_gpus else 1


def nvlink_expected(pool: NodePoolProfile) -> bool:
    """8-GPU boards of NVLink accelerators must have every NVLink up."""
    accelerator = (pool.accelerator or "").lower()
    return pool.gpus_per_node >= 8 and any(a in accelerator for a in NVLINK_ACCELERATORS)


def cpu_request_millicores(pool: NodePoolProfile) -> int:
    """The node's vCPUs less the platform's reserve for the kubelet, system daemons and
    DaemonSets (`modules.k8s.tenancy.quotas.reserved_vcpus`): the same share the team's
    Kueue quota counts per node, so a whole-node job fits both."""
    return allocatable_vcpus(pool) * 1000


def memory_request_mib(pool: NodePoolProfile) -> int:
    """The node's memory less the platform's reserve for kube-reserved memory, the
    eviction threshold and DaemonSets (`modules.k8s.tenancy.quotas.reserved_memory_gib`)."""
    return allocatable_memory_gib(pool) * 1024


def default_shm_size_gib(pool: NodePoolProfile) -> int:
    """``/dev/shm`` for NCCL and data-loader workers: an eighth of the pod's memory,
    1 to 64 GiB."""
    return min(64, max(1, memory_request_mib(pool) // 1024 // 8))


def container_resources(pool: NodePoolProfile) -> dict[str, dict[str, str]]:
    """Requests equal to limits: every GPU, EFA device or RDMA device the node offers,
    and the node's CPU and memory less headroom. Equal requests and limits make the
    pod Guaranteed QoS: it is evicted last, and the kubelet's static CPU manager can
    give it exclusive cores. The CPU limit is the node's whole allocatable share, so
    it caps a runaway process without throttling normal work."""
    amounts: dict[str, str] = {
        "cpu": f"{cpu_request_millicores(pool)}m",
        "memory": f"{memory_request_mib(pool)}Mi",
    }
    if pool.has_gpus:
        amounts[GPU_RESOURCE] = str(pool.gpus_per_node)
    if pool.fabric == "efa" and pool.efa_interfaces > 0:
        amounts[EFA_RESOURCE] = str(pool.efa_interfaces)
    if pool.fabric == "infiniband" and pool.rdma_resource and pool.rdma_per_node > 0:
        amounts[pool.rdma_resource] = str(pool.rdma_per_node)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def restricted_container_security() -> dict[str, Any]:
    """The restricted Pod Security profile for one container: non-root, read-only root
    filesystem, no capabilities, RuntimeDefault seccomp (training and inference pods).
    EFA and InfiniBand verbs need locked memory, which the node's container runtime grants
    through RLIMIT_MEMLOCK; no added capability (IPC_LOCK) needed."""
    return restricted_container(RUN_AS_USER, TRAINER_GID)


def pod_security_context() -> dict[str, Any]:
    """The pod's security context: the trainer's UID/GID, and the volumes' group."""
    return restricted_pod(RUN_AS_USER, TRAINER_GID)


def scratch_volumes(
    shm_gib: int, scratch_gib: int = DEFAULT_SCRATCH_GIB
) -> tuple[list[Manifest], list[Manifest]]:
    """The writable volumes under a read-only root filesystem and their mounts: an
    in-memory ``/dev/shm`` for NCCL, ``/tmp`` (compile caches) and ``/scratch`` (token
    shards)."""
    scratch = f"{scratch_gib}Gi"
    volumes: list[Manifest] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib}Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": scratch}},
        {"name": "scratch", "emptyDir": {"sizeLimit": scratch}},
    ]
    mounts: list[Manifest] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    return volumes, mounts


def checkpoint_volume(claim: str) -> Manifest:
    """The team's checkpoint claim (the same name in every team namespace)."""
    return {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}}


def pool_node_affinity(pool: NodePoolProfile) -> Manifest:
    """Required node affinity on every label of the pool (its flavor's labels)."""
    expressions = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(pool.labels.items())
    ]
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": expressions}]
        }
    }


def one_pod_per_node(label_key: str, label_value: str | None = None) -> Manifest:
    """Pod anti-affinity: no two pods of the same job on one node (each pod takes a
    whole node's GPUs and fabric devices). With a value, pods carrying ``label_key=
    label_value`` repel each other; without one, pods repel those with the same value
    of ``label_key`` (``matchLabelKeys``, beta and on by default since Kubernetes
    1.31: one runtime serves every job, each with its own JobSet name)."""
    if label_value is not None:
        term: Manifest = {"labelSelector": {"matchLabels": {label_key: label_value}}}
    else:
        term = {
            "labelSelector": {"matchExpressions": [{"key": label_key, "operator": "Exists"}]},
            "matchLabelKeys": [label_key],
        }
    term["topologyKey"] = "kubernetes.io/hostname"
    return {"requiredDuringSchedulingIgnoredDuringExecution": [term]}


def pool_tolerations(pool: NodePoolProfile) -> list[Manifest]:
    """Exactly the pool's taints: a training pod asks for its pool's GPUs and fabric."""
    return [toleration(t) for t in pool.taints]


def preflight_args(pool: NodePoolProfile, expect_nvlink: bool | None = None) -> list[str]:
    """``python -m workloads.health``'s arguments for a node of ``pool``."""
    args = ["-m", "workloads.health", f"--expect-gpus={pool.gpus_per_node}"]
    if nvlink_expected(pool) if expect_nvlink is None else expect_nvlink:
        args.append("--expect-nvlink")
    return args


def preflight_container(
    pool: NodePoolProfile, image: str, expect_nvlink: bool | None = None
) -> Manifest:
    """The NVML preflight init container: the node's GPUs are all there and healthy
    (and its NVLinks up on NVLink boards) before the trainer starts. It requests the
    trainer's GPUs (init containers' requests are not added to the containers')."""
    return {
        "name": PREFLIGHT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python"],
        "args": preflight_args(pool, expect_nvlink),
        "resources": container_resources(pool),
        "securityContext": restricted_container_security(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
