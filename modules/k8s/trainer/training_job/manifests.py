"""The Kubernetes objects of a training job, as plain manifests (pure functions).

On the ``trainer`` launcher (the default) a job is one Kubeflow Trainer ``TrainJob``
(`train_job_manifest`) naming the platform's ClusterTrainingRuntime for its framework,
pool and PriorityClass (`modules.k8s.trainer.runtimes`). The runtime brings what the
pool decides; the TrainJob brings the job: its node count and processes per node, its
image, command and arguments, the environment that differs from the runtime's (a
fabric override, ``NCCL_DEBUG``), the queue label of the team's Kueue LocalQueue, and
``runtimePatches`` where the job's claim, ServiceAccount, grace period or volume sizes
differ from the runtime's. It is created suspended: Kueue admits a labelled TrainJob by
unsuspending it (after writing its own runtime patch with the flavor's node selector);
a held job has no queue label, so nothing starts it.

On the ``indexed-job`` launcher (jobs dispatched by a fleet manager, see
`spec.TrainingJobSpec.launcher`) a job is a headless Service (stable
DNS names for torchrun's c10d rendezvous) and an Indexed Job with one pod per node:
pod ``<job>-0`` hosts the rendezvous at ``<job>-0.<job>-rdzv:29500``, every pod runs
``torchrun`` with one process per GPU and restarts its worker group up to
``max_restarts`` times, and the pod failure policy does not count preemptions and node
disruptions against ``backoffLimit`` while failing at once on a configuration error.

Both paths build their pods from the same conventions (`modules.k8s.trainer.pods`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modules.k8s.names import CHECKPOINT_CLAIM_NAME, TRAINER_SERVICE_ACCOUNT
from modules.k8s.trainer.pods import (
    CHECKPOINT_VOLUME,
    DEFAULT_SCRATCH_GIB,
    EFA_RESOURCE,
    GPU_RESOURCE,
    RUN_AS_USER,
    checkpoint_volume,
    cpu_request_millicores,
    default_shm_size_gib,
    is_training_pool,
    memory_request_mib,
    one_pod_per_node,
    pod_security_context,
    pool_node_affinity,
    pool_tolerations,
    preflight_container,
    restricted_container_security,
    scratch_volumes,
)
from modules.k8s.trainer.pods import (
    container_resources as pool_resources,
)
from modules.k8s.trainer.runtimes import (
    DEFAULT_GRACE_PERIOD_S,
    TRAINING_POD_LABELS,
    default_horovod_program,
    mpirun_command,
    runtime_name,
    torchrun_rendezvous_args,
)
from modules.k8s.trainer.runtimes import (
    checkpoint_dir as runtime_checkpoint_dir,
)
from modules.k8s.trainer.spec import TRAINER_API, TrainerInputs
from modules.k8s.trainer.tracking import tracking_wiring
from modules.k8s.trainer.training_job.spec import RDZV_PORT, TrainingJobSpec, elastic_batch_settings
from modules.pools import NodePoolProfile
from workloads.training.fabric import BOOTSTRAP_EXCLUDE, fabric_env, supports_gpudirect_rdma
from workloads.training.metrics_endpoint import METRICS_PORT_NAME

__all__ = [
    "APP_LABELS",
    "EFA_RESOURCE",
    "GPU_RESOURCE",
    "QUEUE_LABEL",
    "RUN_AS_USER",
    "cpu_request_millicores",
    "memory_request_mib",
    "restricted_container_security",
    "runtime_env",
    "train_job_manifest",
    "trainer_inputs",
    "training_job_manifests",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_LABEL = "gpuplatform.ae/training-job"
#: Pods carrying this label are scraped by the monitoring layer's PodMonitor.
METRICS_LABEL = "gpuplatform.ae/metrics"
METRICS_LABEL_VALUE = "training"
APP_LABELS = dict(TRAINING_POD_LABELS)
#: The manager name of the platform's runtime patch on a TrainJob (Kueue writes its
#: own, ``kueue.x-k8s.io/manager``).
PATCH_MANAGER = "gpuplatform.ae/training-job"

#: Restarted workers must not read the previous attempt's addresses from a rendezvous
#: store shared across attempts (pytorch/pytorch#135712); an elastic job restarts them
#: on every change of its node set.
NO_SHARED_RDZV_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
EXIT_CONFIG_ERROR = 2  # workloads.train's status for a bad config: retrying cannot help
EXIT_FABRIC_BELOW_THRESHOLD = 1  # workloads.fabric_check's status below its threshold
DATA_DIR = "/scratch/data"


def service_name(spec: TrainingJobSpec) -> str:
    """The Indexed Job's headless Service."""
    return spec.rendezvous_service or f"{spec.name}-rdzv"


def rendezvous_endpoint(spec: TrainingJobSpec) -> str:
    """Pod 0's stable name (Indexed Job hostname + the headless Service as subdomain)."""
    return f"{spec.name}-0.{service_name(spec)}:{RDZV_PORT}"


def checkpoint_dir(spec: TrainingJobSpec) -> str:
    return runtime_checkpoint_dir(spec.name, spec.checkpoint_mount_path)


def shm_size_gib(spec: TrainingJobSpec) -> int:
    if spec.shm_size_gib is not None:
        return spec.shm_size_gib
    return default_shm_size_gib(spec.pool)


def container_resources(spec: TrainingJobSpec) -> dict[str, dict[str, str]]:
    """A whole node's allocatable share of the job's pool (`modules.k8s.trainer.pods`)."""
    return pool_resources(spec.pool)


def _environment(
    pool: NodePoolProfile,
    *,
    socket_ifname: str = BOOTSTRAP_EXCLUDE,
    ib_hca: str = "mlx5",
    ib_gid_index: int | None = None,
    debug: bool = False,
    overrides: dict[str, str] | None = None,
) -> dict[str, str]:
    env = fabric_env(
        pool.fabric,
        gpudirect_rdma=supports_gpudirect_rdma(pool.instance_type),
        socket_ifname=socket_ifname,
        ib_hca=ib_hca,
        ib_gid_index=ib_gid_index,
        debug=debug,
        overrides=overrides,
    )
    processes = pool.gpus_per_node if pool.has_gpus else 1
    threads = max(1, cpu_request_millicores(pool) // 1000 // processes)
    env |= {
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor",
        "TRITON_CACHE_DIR": "/tmp/triton",
        "OMP_NUM_THREADS": str(threads),
        NO_SHARED_RDZV_STORE: "1",
    }
    return env


def runtime_env(pool: NodePoolProfile) -> dict[str, str]:
    """The trainer container's environment on ``pool`` with the fabric's defaults: what
    the platform's runtimes for the pool carry (`modules.k8s.trainer.TrainerInputs`)."""
    return _environment(pool)


def trainer_inputs(pools: Sequence[NodePoolProfile], training_image: str) -> TrainerInputs:
    """What the platform's runtimes take from the training workloads: the training image
    and, per training pool, the trainer's environment with the fabric's defaults."""
    return TrainerInputs(
        training_image=training_image,
        pool_env={p.name: runtime_env(p) for p in pools if is_training_pool(p)},
    )


def job_env(spec: TrainingJobSpec) -> dict[str, str]:
    """The container's environment for this job: the fabric's NCCL/libfabric settings
    with the job's overrides, plus the runtime's writable locations (the root
    filesystem is read-only)."""
    return _environment(
        spec.pool,
        socket_ifname=spec.socket_ifname,
        ib_hca=spec.ib_hca,
        ib_gid_index=spec.ib_gid_index,
        debug=spec.fabric_debug,
        overrides=dict(spec.fabric_env_overrides),
    )


def environment(spec: TrainingJobSpec) -> list[dict[str, str]]:
    """The Indexed Job container's whole environment, as a sorted list."""
    return [{"name": name, "value": value} for name, value in sorted(job_env(spec).items())]


def trainjob_env(spec: TrainingJobSpec) -> list[dict[str, str]]:
    """What a TrainJob adds to its runtime's environment: the variables whose value
    differs for this job (Trainer merges them over the runtime's). An elastic job
    states ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` itself, whatever the runtime has:
    its resumes depend on it."""
    base = runtime_env(spec.pool)
    env = {name: value for name, value in job_env(spec).items() if base.get(name) != value}
    if spec.min_nodes is not None:
        env[NO_SHARED_RDZV_STORE] = "1"
    return [{"name": name, "value": value} for name, value in sorted(env.items())]


def workload_args(spec: TrainingJobSpec) -> list[str]:
    """The Python module torchrun starts, with its arguments."""
    if spec.workload == "fabric-check":
        threshold = (
            f"--min-busbw-gbps={spec.min_busbw_gbps}"
            if spec.min_busbw_gbps is not None
            else f"--instance-type={spec.pool.instance_type}"
        )
        return ["-m", "workloads.fabric_check", threshold, *spec.extra_args]
    args = [
        "-m",
        "workloads.train",
        f"--preset={spec.preset}",
        f"--ckpt-dir={checkpoint_dir(spec)}",
        f"--data-dir={DATA_DIR}",
        f"--metrics-port={spec.metrics_port}",
    ]
    if spec.framework == "deepspeed":
        args.append("--engine=deepspeed")
    if spec.tp > 1:
        args.append(f"--tp={spec.tp}")
    if spec.min_nodes is not None and not elastic_batch_settings(spec.preset, spec.extra_args)[2]:
        # An elastic job keeps the global batch of all its nodes, even when its first
        # rendezvous starts with fewer (a pod that starts late joins a round later).
        args.append(f"--global-batch-size={spec.global_batch_size}")
    return [*args, *spec.extra_args]


def torchrun_args(spec: TrainingJobSpec) -> list[str]:
    """The Indexed Job's torchrun arguments (node count and rendezvous spelled out)."""
    return [
        f"--nnodes={spec.nodes}",
        f"--nproc_per_node={spec.processes_per_node}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rendezvous_endpoint(spec)}",
        f"--rdzv_id={spec.namespace}-{spec.name}",
        f"--max_restarts={spec.max_restarts}",
        *workload_args(spec),
    ]


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {**APP_LABELS, JOB_LABEL: spec.name}


def _object_labels(spec: TrainingJobSpec) -> dict[str, str]:
    """The Job's or TrainJob's labels: with the queue label unless the job is held."""
    if spec.hold:
        return _labels(spec)
    return {**_labels(spec), QUEUE_LABEL: spec.local_queue}


# -- the trainer launcher: a TrainJob -------------------------------------------------


def elastic_args(spec: TrainingJobSpec) -> list[str]:
    """An elastic job's node range for torchrun, ``--nnodes=MIN:MAX`` (none for a fixed
    job). torchrun reads ``PET_NNODES`` only where its command line has no ``--nnodes``
    (`torch.distributed.argparse_util.env`), so this overrides the fixed count Trainer
    sets from ``numNodes``, which stays the maximum (what Kueue admits)."""
    if spec.min_nodes is None:
        return []
    return [f"--nnodes={spec.min_nodes}:{spec.nodes}"]


def trainer_command(spec: TrainingJobSpec) -> tuple[list[str], list[str]]:
    """The TrainJob's command and arguments. torch and DeepSpeed: torchrun with the c10d
    rendezvous on Trainer's pod 0 (Trainer sets ``PET_NNODES`` and
    ``PET_NPROC_PER_NODE`` from ``numNodes`` and ``numProcPerNode``; an elastic job
    gives its node range, `elastic_args`). MPI: ``mpirun`` forwarding the runtime's
    environment to every rank, running the Horovod example."""
    if spec.framework == "mpi":
        ckpt = f"--ckpt-dir={checkpoint_dir(spec)}"
        program = [*default_horovod_program()[:2], ckpt, *spec.extra_args]
        return mpirun_command(list(job_env(spec)), program), []
    rendezvous = torchrun_rendezvous_args(f"{spec.namespace}-{spec.name}", spec.max_restarts)
    return ["torchrun"], [*elastic_args(spec), *rendezvous, *workload_args(spec)]


def runtime_patches(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """The platform's patch of the runtime for this job, where the job differs from the
    runtime: another checkpoint claim or ServiceAccount, other volume sizes or grace
    period. None where the job takes the runtime as it is."""
    pod: dict[str, Any] = {}
    if spec.service_account != TRAINER_SERVICE_ACCOUNT:
        pod["serviceAccountName"] = spec.service_account
    volumes: list[dict[str, Any]] = []
    if spec.checkpoint_claim and spec.checkpoint_claim != CHECKPOINT_CLAIM_NAME:
        volumes.append(checkpoint_volume(spec.checkpoint_claim))
    sizes_differ = (
        shm_size_gib(spec) != default_shm_size_gib(spec.pool)
        or spec.scratch_size_gib != DEFAULT_SCRATCH_GIB
    )
    if sizes_differ:
        volumes += scratch_volumes(shm_size_gib(spec), spec.scratch_size_gib)[0]
    if volumes:
        pod["volumes"] = volumes
    if spec.termination_grace_period_s != DEFAULT_GRACE_PERIOD_S:
        pod["terminationGracePeriodSeconds"] = spec.termination_grace_period_s
    if not pod:
        return []
    jobs = ["node", "launcher"] if spec.framework == "mpi" else ["node"]
    return [
        {
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {"name": job, "template": {"spec": {"template": {"spec": pod}}}}
                            for job in jobs
                        ]
                    }
                }
            },
        }
    ]


def train_job_manifest(spec: TrainingJobSpec) -> dict[str, Any]:
    """The job as a Kubeflow Trainer TrainJob (``trainer.kubeflow.org/v1alpha1``)."""
    command, args = trainer_command(spec)
    trainer: dict[str, Any] = {
        "image": spec.image,
        "command": command,
        "numNodes": spec.nodes,
        "numProcPerNode": spec.processes_per_node,
    }
    if args:
        trainer["args"] = args
    if spec.framework != "mpi":
        # On the MPI runtime the trainer step is the launcher, whose pod is also a node:
        # Trainer gives it the runtime's whole-node resources already.
        trainer["resourcesPerNode"] = container_resources(spec)
    env = trainjob_env(spec)
    if env and spec.framework != "mpi":
        trainer["env"] = env
    body: dict[str, Any] = {
        "runtimeRef": {
            "name": runtime_name(spec.framework, spec.pool.name, spec.priority_class),
            "apiGroup": "trainer.kubeflow.org",
            "kind": "ClusterTrainingRuntime",
        },
        "trainer": trainer,
        # Kueue unsuspends a labelled TrainJob when its queue admits it.
        "suspend": spec.suspend or spec.hold,
    }
    patches = runtime_patches(spec)
    if patches:
        body["runtimePatches"] = patches
    return {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": _object_labels(spec),
        },
        "spec": body,
    }


# -- the indexed-job launcher: a headless Service and an Indexed Job -------------------


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


def _volumes(spec: TrainingJobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the trainer's mounts: the checkpoint claim (when given),
    an in-memory /dev/shm for NCCL, and writable /tmp and /scratch under a read-only
    root filesystem."""
    volumes, mounts = scratch_volumes(shm_size_gib(spec), spec.scratch_size_gib)
    if spec.checkpoint_claim:
        volumes.insert(0, checkpoint_volume(spec.checkpoint_claim))
        mounts.insert(0, {"name": CHECKPOINT_VOLUME, "mountPath": spec.checkpoint_mount_path})
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
    # The trainer logs to the cluster's MLflow as the team's user; a fabric check logs
    # nothing.
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
        # No process in a training pod calls the Kubernetes API, and EKS Pod Identity
        # projects its own token (modules.k8s.rbac): none is mounted.
        "automountServiceAccountToken": False,
        "priorityClassName": spec.priority_class,
        "terminationGracePeriodSeconds": spec.termination_grace_period_s,
        "securityContext": pod_security_context(),
        "affinity": {
            "nodeAffinity": pool_node_affinity(pool),
            # One pod per node: each pod takes a whole node's GPUs and fabric devices.
            "podAntiAffinity": one_pod_per_node(JOB_LABEL, spec.name),
        },
        "tolerations": pool_tolerations(pool),
        "containers": [trainer],
        "volumes": volumes,
    }
    if pool.has_gpus and spec.health_check:
        pod_spec["initContainers"] = [
            preflight_container(pool, spec.image, expect_nvlink=spec.nvlink_expected)
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
            "labels": _object_labels(spec),
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
    """Every object of the job, in apply order: the TrainJob (launcher ``trainer``), or
    the Service then the Job (``indexed-job``; no Service when the job uses a shared
    one: ``rendezvous_service``)."""
    if spec.launcher == "trainer":
        return [train_job_manifest(spec)]
    if spec.rendezvous_service:
        return [job_manifest(spec)]
    return [service_manifest(spec), job_manifest(spec)]
