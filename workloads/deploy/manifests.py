"""The Kubernetes objects of a training job, as plain manifests (pure functions).

A job is a headless Service (stable DNS names for torchrun's c10d rendezvous) and an
Indexed Job with one pod per node. Pod ``<job>-0`` hosts the rendezvous at
``<job>-0.<job>-rdzv:29500``; every pod runs ``torchrun`` with one process per GPU
and restarts its worker group up to ``max_restarts`` times. The Job is labelled for
the team's Kueue LocalQueue, created suspended when asked (Kueue admits a queued
job by unsuspending it), and its pod failure policy does not count preemptions and
node disruptions against ``backoffLimit`` while failing at once on a configuration
error (exit status 2).
"""

from __future__ import annotations

from typing import Any

from modules.k8s.names import TRAINER_UID, TrackingAccess
from modules.k8s.tenancy.quotas import allocatable_memory_gib, allocatable_vcpus
from modules.pools import NodePoolProfile
from workloads.deploy.spec import RDZV_PORT, TrainingJobSpec
from workloads.training.fabric import fabric_env, supports_gpudirect_rdma
from workloads.training.metrics_endpoint import METRICS_PORT_NAME

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_LABEL = "gpuplatform.ae/training-job"
#: Pods carrying this label are scraped by the monitoring layer's PodMonitor.
METRICS_LABEL = "gpuplatform.ae/metrics"
METRICS_LABEL_VALUE = "training"
APP_LABELS = {"app.kubernetes.io/name": "training", "app.kubernetes.io/part-of": "gpuplatform"}

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
RUN_AS_USER = TRAINER_UID  # the images' non-root user (10001)
EXIT_CONFIG_ERROR = 2  # workloads.train's status for a bad config: retrying cannot help
EXIT_FABRIC_BELOW_THRESHOLD = 1  # workloads.fabric_check's status below its threshold
DATA_DIR = "/scratch/data"
#: Where the trainer finds the cluster CA it verifies the tracking server with.
TRACKING_CA_DIR = "/etc/gpuplatform/ca"


def service_name(spec: TrainingJobSpec) -> str:
    return spec.rendezvous_service or f"{spec.name}-rdzv"


def rendezvous_endpoint(spec: TrainingJobSpec) -> str:
    """Pod 0's stable name (Indexed Job hostname + the headless Service as subdomain)."""
    return f"{spec.name}-0.{service_name(spec)}:{RDZV_PORT}"


def checkpoint_dir(spec: TrainingJobSpec) -> str:
    return f"{spec.checkpoint_mount_path.rstrip('/')}/{spec.name}"


def cpu_request_millicores(pool: NodePoolProfile) -> int:
    """The node's vCPUs less the platform's reserve for the kubelet, system daemons and
    DaemonSets (`modules.k8s.tenancy.quotas.reserved_vcpus`): the same share the team's Kueue
    quota counts per node, so a whole-node job fits both."""
    return allocatable_vcpus(pool) * 1000


def memory_request_mib(pool: NodePoolProfile) -> int:
    """The node's memory less the platform's reserve for kube-reserved memory, the
    eviction threshold and DaemonSets (`modules.k8s.tenancy.quotas.reserved_memory_gib`)."""
    return allocatable_memory_gib(pool) * 1024


def shm_size_gib(spec: TrainingJobSpec) -> int:
    if spec.shm_size_gib is not None:
        return spec.shm_size_gib
    return min(64, max(1, memory_request_mib(spec.pool) // 1024 // 8))


def container_resources(spec: TrainingJobSpec) -> dict[str, dict[str, str]]:
    """Requests equal to limits: every GPU, EFA device or RDMA device the node offers,
    and the node's CPU and memory less headroom. Equal requests and limits make the
    pod Guaranteed QoS: it is evicted last, and the kubelet's static CPU manager can
    give it exclusive cores. The CPU limit is the node's whole allocatable share, so
    it caps a runaway process without throttling normal work."""
    pool = spec.pool
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


def environment(spec: TrainingJobSpec) -> list[dict[str, str]]:
    """The container's environment: the fabric's NCCL/libfabric settings plus the
    runtime's writable locations (the root filesystem is read-only)."""
    env = fabric_env(
        spec.pool.fabric,
        gpudirect_rdma=supports_gpudirect_rdma(spec.pool.instance_type),
        socket_ifname=spec.socket_ifname,
        ib_hca=spec.ib_hca,
        ib_gid_index=spec.ib_gid_index,
        debug=spec.fabric_debug,
        overrides=spec.fabric_env_overrides,
    )
    threads = max(1, cpu_request_millicores(spec.pool) // 1000 // spec.processes_per_node)
    env |= {
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor",
        "TRITON_CACHE_DIR": "/tmp/triton",
        "OMP_NUM_THREADS": str(threads),
        # Restarted workers must not read the previous attempt's addresses from a
        # rendezvous store shared across attempts (pytorch/pytorch#135712).
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    return [{"name": name, "value": value} for name, value in sorted(env.items())]


def tracking_wiring(
    tracking: TrackingAccess | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The trainer's MLflow settings: environment entries, pod volumes and container
    mounts. The trainer (`workloads.training.tracking`) and MLflow's client read
    ``MLFLOW_TRACKING_URI``, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` (from the team's
    Secret, never in the manifest) and ``MLFLOW_TRACKING_SERVER_CERT_PATH`` (the cluster
    CA, mounted read-only). Nothing where the cluster has no tracking server."""
    if tracking is None:
        return [], [], []
    credentials = [
        {
            "name": f"MLFLOW_TRACKING_{key.upper()}",
            "valueFrom": {"secretKeyRef": {"name": tracking.credentials_secret, "key": key}},
        }
        for key in ("username", "password")
    ]
    env: list[dict[str, Any]] = [
        {"name": "MLFLOW_TRACKING_URI", "value": tracking.uri},
        *credentials,
        {
            "name": "MLFLOW_TRACKING_SERVER_CERT_PATH",
            "value": f"{TRACKING_CA_DIR}/{tracking.ca_key}",
        },
    ]
    volume = {
        "name": "tracking-ca",
        "secret": {
            "secretName": tracking.ca_secret,
            "items": [{"key": tracking.ca_key, "path": tracking.ca_key}],
        },
    }
    mount = {"name": "tracking-ca", "mountPath": TRACKING_CA_DIR, "readOnly": True}
    return env, [volume], [mount]


def workload_args(spec: TrainingJobSpec) -> list[str]:
    """The Python module torchrun starts, with its arguments."""
    if spec.workload == "fabric-check":
        threshold = (
            f"--min-busbw-gbps={spec.min_busbw_gbps}"
            if spec.min_busbw_gbps is not None
            else f"--instance-type={spec.pool.instance_type}"
        )
        return ["-m", "workloads.fabric_check", threshold, *spec.extra_args]
    return [
        "-m",
        "workloads.train",
        f"--preset={spec.preset}",
        f"--ckpt-dir={checkpoint_dir(spec)}",
        f"--data-dir={DATA_DIR}",
        f"--metrics-port={spec.metrics_port}",
        *spec.extra_args,
    ]


def torchrun_args(spec: TrainingJobSpec) -> list[str]:
    return [
        f"--nnodes={spec.nodes}",
        f"--nproc_per_node={spec.processes_per_node}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rendezvous_endpoint(spec)}",
        f"--rdzv_id={spec.namespace}-{spec.name}",
        f"--max_restarts={spec.max_restarts}",
        *workload_args(spec),
    ]


def restricted_container_security() -> dict[str, Any]:
    """The restricted Pod Security profile for one container: non-root, read-only root
    filesystem, no capabilities, RuntimeDefault seccomp (training and inference pods)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        # EFA and InfiniBand verbs need locked memory, which the node's container
        # runtime grants through RLIMIT_MEMLOCK; no added capability (IPC_LOCK) needed.
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {**APP_LABELS, JOB_LABEL: spec.name}


def service_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(spec),
            "namespace": spec.namespace,
            "labels": _labels(spec),
        },
        "spec": {
            "clusterIP": "None",
            # Pods resolve before they are ready: the rendezvous happens at start.
            "publishNotReadyAddresses": True,
            "selector": {JOB_LABEL: spec.name},
            "ports": [
                {"name": "c10d", "port": RDZV_PORT, "targetPort": RDZV_PORT, "protocol": "TCP"}
            ],
        },
    }


def _affinity(spec: TrainingJobSpec) -> dict[str, Any]:
    pool = spec.pool
    expressions = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(pool.labels.items())
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        },
        # One pod per node: each pod takes a whole node's GPUs and fabric devices.
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {JOB_LABEL: spec.name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }


def _volumes(spec: TrainingJobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the trainer's mounts: the checkpoint claim (when given),
    an in-memory /dev/shm for NCCL, and writable /tmp and /scratch under a read-only
    root filesystem."""
    scratch = f"{spec.scratch_size_gib}Gi"
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_size_gib(spec)}Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": scratch}},
        {"name": "scratch", "emptyDir": {"sizeLimit": scratch}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    if spec.checkpoint_claim:
        volumes.insert(
            0,
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": spec.checkpoint_claim}},
        )
        mounts.insert(0, {"name": "checkpoints", "mountPath": spec.checkpoint_mount_path})
    return volumes, mounts


def _failure_policy(spec: TrainingJobSpec) -> dict[str, Any]:
    """Fail the Job at once where a retry cannot help (a bad configuration; a fabric
    below its threshold); do not count preemptions and node disruptions."""
    fatal = [EXIT_CONFIG_ERROR]
    if spec.workload == "fabric-check":
        fatal = [EXIT_FABRIC_BELOW_THRESHOLD, EXIT_CONFIG_ERROR]
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "trainer", "operator": "In", "values": fatal},
            },
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }


def job_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    pool = spec.pool
    resources = container_resources(spec)
    volumes, mounts = _volumes(spec)
    tracking_env, tracking_volumes, tracking_mounts = tracking_wiring(
        spec.tracking if spec.workload == "train" else None
    )
    volumes += tracking_volumes
    ports = [{"name": "c10d", "containerPort": RDZV_PORT, "protocol": "TCP"}]
    if spec.workload == "train":
        ports.insert(
            0, {"name": METRICS_PORT_NAME, "containerPort": spec.metrics_port, "protocol": "TCP"}
        )
    trainer = {
        "name": "trainer",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun"],
        "args": torchrun_args(spec),
        "env": [*environment(spec), *tracking_env],
        "ports": ports,
        "resources": resources,
        "securityContext": restricted_container_security(),
        "volumeMounts": [*mounts, *tracking_mounts],
    }
    pod_labels = {**_labels(spec)}
    annotations: dict[str, str] = {}
    if spec.workload == "train":
        pod_labels[METRICS_LABEL] = METRICS_LABEL_VALUE
        annotations = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(spec.metrics_port),
            "prometheus.io/path": "/metrics",
        }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # torchrun restarts workers; the Job recreates pods
        "subdomain": service_name(spec),
        "serviceAccountName": spec.service_account,
        # EKS Pod Identity authenticates with the service account's token; on premises
        # nothing uses it, so none is mounted.
        "automountServiceAccountToken": spec.cloud_identity,
        "priorityClassName": spec.priority_class,
        "terminationGracePeriodSeconds": spec.termination_grace_period_s,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": _affinity(spec),
        "tolerations": [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in pool.taints
        ],
        "containers": [trainer],
        "volumes": volumes,
    }
    if pool.has_gpus and spec.health_check:
        health_args = ["-m", "workloads.health", f"--expect-gpus={pool.gpus_per_node}"]
        if spec.nvlink_expected:
            health_args.append("--expect-nvlink")
        pod_spec["initContainers"] = [
            {
                "name": "gpu-preflight",
                "image": spec.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python"],
                "args": health_args,
                # Same GPUs as the trainer (init containers' requests are not added up).
                "resources": resources,
                "securityContext": restricted_container_security(),
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            }
        ]
    template_metadata: dict[str, Any] = {"labels": pod_labels}
    if annotations:
        template_metadata["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": _labels(spec)
            if spec.hold
            else {**_labels(spec), QUEUE_LABEL: spec.local_queue},
        },
        "spec": {
            "suspend": spec.suspend or spec.hold,
            "completionMode": "Indexed",
            "completions": spec.nodes,
            "parallelism": spec.nodes,
            "backoffLimit": spec.backoff_limit,
            "podFailurePolicy": _failure_policy(spec),
            "template": {"metadata": template_metadata, "spec": pod_spec},
        },
    }


def training_job_manifests(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """Every object of the job, in apply order: the Service, then the Job (no Service
    when the job uses a shared one: ``rendezvous_service``)."""
    if spec.rendezvous_service:
        return [job_manifest(spec)]
    return [service_manifest(spec), job_manifest(spec)]
