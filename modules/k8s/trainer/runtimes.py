"""The platform's ClusterTrainingRuntimes (``trainer.kubeflow.org/v1alpha1``).

One runtime per framework, training pool and PriorityClass, named
``<framework>-<pool>-<priority>`` (`runtime_name`), e.g. ``torch-h200-research``:

* **what a pool decides** is in the runtime: requests equal to a whole node's
  allocatable share with every GPU and EFA or RDMA device, the fabric's NCCL and
  libfabric environment (`TrainerInputs.pool_env`), required affinity to the pool's
  labels and one pod per node, tolerations of exactly the pool's taints, the NVML
  preflight init container (GPU pools), ``/dev/shm`` sized from the node's memory;
* **what every team has under the same name** is in the runtime too, and resolves in the
  job's namespace: the ServiceAccount ``trainer`` (EKS Pod Identity on AWS; on premises
  the same account, with no cloud identity and no token mounted), the claim
  ``checkpoints`` mounted at ``/checkpoints``, the restricted security context, the
  metrics port and labels the monitoring layer scrapes, and, where the cluster runs a
  tracking server, the trainer's MLflow wiring (`pods.tracking_wiring`: the URI, the
  team's credentials from the Secret ``mlflow-credentials`` and the cluster CA from
  ``gpuplatform-ca``, both in the job's own namespace, so every TrainJob a team submits
  logs as the team's own MLflow user);
* **the PriorityClass** is in the runtime because a TrainJob cannot set it (Trainer
  v2.3's ``runtimePatches`` have no ``priorityClassName``) and Kueue takes a workload's
  priority from its pods: the namespace quota still refuses a PriorityClass above the
  team's maximum;
* **what is per job** is on the TrainJob (`training_job.manifests`): the queue
  label ``kueue.x-k8s.io/queue-name`` (Kueue reads it on the TrainJob, not on its
  pods), the node count, the command, job-specific environment, and ``runtimePatches``
  for another claim or ServiceAccount.

The torch and DeepSpeed runtimes start ``torchrun`` (Trainer's torch policy injects
``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and
``PET_MASTER_PORT``; the rendezvous is c10d on pod 0, so ``--max_restarts`` restarts
the worker group); DeepSpeed's default command runs the trainer with
``--engine=deepspeed``. The MPI runtime (Horovod) has a launcher that is also a node
(``runLauncherAsNode``: with whole-node pods a separate launcher would take a node of
its own) and workers running ``sshd`` on port 2222 as the non-root user; Trainer
generates each job's SSH keys (a Secret) and hostfile (a ConfigMap), as upstream does.

The torch and DeepSpeed node Job succeeds with pod 0, and their JobSet restarts once
its node Job fails on its backoff limit (`node_zero_success_policy`,
`torch_failure_policy`): what an elastic TrainJob (``--nnodes=MIN:MAX``) needs to
finish on fewer nodes and to survive the loss of pod 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modules.k8s.common import Manifest, metadata
from modules.k8s.names import (
    CHECKPOINT_CLAIM_NAME,
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT_NAME,
    PRIORITY_CLASSES,
    TRAINER_SERVICE_ACCOUNT,
    TrackingAccess,
)
from modules.k8s.trainer.pods import (
    CHECKPOINT_VOLUME,
    DEFAULT_CHECKPOINT_MOUNT,
    checkpoint_volume,
    container_resources,
    cpu_request_millicores,
    default_shm_size_gib,
    is_training_pool,
    one_pod_per_node,
    pod_security_context,
    pool_node_affinity,
    pool_tolerations,
    preflight_container,
    processes_per_node,
    restricted_container_security,
    scratch_volumes,
)
from modules.k8s.trainer.spec import (
    TRAINER_API,
    Framework,
    TrainerInputs,
    TrainerSpec,
    horovod_image,
)
from modules.k8s.trainer.tracking import tracking_wiring
from modules.pools import NodePoolProfile

#: Trainer's label naming the step a replicated job runs (TrainJob's ``trainer``
#: settings apply to the one labelled ``trainer``).
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
#: Labels of the platform's runtimes: which pool and PriorityClass they are for.
POOL_LABEL = "gpuplatform.ae/pool"
PRIORITY_LABEL = "gpuplatform.ae/priority-class"
#: JobSet labels every pod with its JobSet's name (the TrainJob's name).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: The trainer container's name (Trainer applies a TrainJob's image, command, args,
#: env and resources to the container called ``node``).
NODE_CONTAINER = "node"
TRAINING_POD_LABELS = {
    "app.kubernetes.io/name": "training",
    "app.kubernetes.io/part-of": "gpuplatform",
}
#: torchrun's c10d port on pod 0 (Trainer's ``PET_MASTER_PORT``).
RDZV_PORT = 29500
#: The training metrics port (``workloads.training.metrics_endpoint.METRICS_PORT``).
METRICS_PORT = 9500
#: ``workloads.train``'s exit status for a bad configuration: retrying cannot help.
EXIT_CONFIG_ERROR = 2
DEFAULT_BACKOFF_LIMIT = 3
DEFAULT_MAX_RESTARTS = 3
DEFAULT_GRACE_PERIOD_S = 120
DATA_DIR = "/scratch/data"
#: Where the MPI runtime's workers get their SSH keys (the Horovod image's user home).
SSH_AUTH_MOUNT_PATH = "/home/trainer/.ssh"
SSHD_PORT = 2222
#: Environment the trainer takes from the pod itself (the job's own name and namespace).
JOB_NAME_ENV = "TRAINJOB_NAME"
JOB_NAMESPACE_ENV = "TRAINJOB_NAMESPACE"
#: Variables the MPI launcher forwards to every rank (processes started over SSH do not
#: inherit the container's environment).
MPI_FORWARDED_ENV = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME")
#: Whole restarts of a torch or DeepSpeed job (every pod recreated, resuming from the
#: last checkpoint) after its node Job fails on its backoff limit: what lets a job
#: survive the loss of pod 0, whose c10d store the other pods' torchrun cannot do without.
JOBSET_MAX_RESTARTS = 3


@dataclass(frozen=True)
class RuntimeSite:
    """What the cluster gives every training pod, whichever team runs it.

    Args:
        tracking: how a team's jobs reach the cluster's MLflow server (the same Secret
            names in every team namespace), or ``None`` where the cluster runs none.
            The torch and DeepSpeed runtimes wire it into the trainer; the MPI runtime
            (the Horovod example, which logs nothing to MLflow) does not.
    """

    tracking: TrackingAccess | None = None


def runtime_name(framework: Framework, pool: str, priority: str) -> str:
    """``<framework>-<pool>-<priority>``: what a TrainJob's ``runtimeRef.name`` says."""
    return f"{framework}-{pool}-{priority}"


def checkpoint_dir(job: str, mount_path: str = DEFAULT_CHECKPOINT_MOUNT) -> str:
    """A job's checkpoint directory on the team's checkpoint volume."""
    return f"{mount_path.rstrip('/')}/{job}"


def torchrun_rendezvous_args(rdzv_id: str, max_restarts: int) -> list[str]:
    """torchrun's c10d rendezvous on Trainer's pod 0 (``$(VAR)`` is expanded by the
    kubelet from the container's environment, where Trainer put ``PET_MASTER_*``)."""
    return [
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
        f"--rdzv_id={rdzv_id}",
        f"--max_restarts={max_restarts}",
    ]


def default_train_args(framework: Framework, pool: NodePoolProfile) -> list[str]:
    """The runtime's default trainer arguments (a TrainJob without ``args`` runs the
    ``tiny`` preset, checkpointing under its own name)."""
    job = f"$({JOB_NAME_ENV})"
    args = torchrun_rendezvous_args(f"$({JOB_NAMESPACE_ENV})-{job}", DEFAULT_MAX_RESTARTS)
    if not pool.has_gpus:
        # Trainer's "auto" is one process per CPU on a CPU pool; gloo wants one.
        args.append("--nproc_per_node=1")
    args += [
        "-m",
        "workloads.train",
        "--preset=tiny",
        f"--ckpt-dir={checkpoint_dir(job)}",
        f"--data-dir={DATA_DIR}",
        f"--metrics-port={METRICS_PORT}",
    ]
    if framework == "deepspeed":
        args.append("--engine=deepspeed")
    return args


def mpirun_command(env_names: Sequence[str], program: Sequence[str]) -> list[str]:
    """``mpirun`` as the MPI launcher runs it: one rank per slot of the hostfile Trainer
    writes, every fabric and runtime variable forwarded to the ranks (``-x``), ranks
    bound to nothing (each rank picks its GPU by local rank)."""
    forwarded = sorted({*env_names, *MPI_FORWARDED_ENV})
    command = ["mpirun", "--bind-to", "none", "--map-by", "slot"]
    for name in forwarded:
        command += ["-x", name]
    return [*command, *program]


def default_horovod_program() -> list[str]:
    """The Horovod example (``workloads/horovod/train.py``) the MPI runtime runs when a
    TrainJob gives no command."""
    return ["/opt/venv/bin/python", "/app/workloads/horovod/train.py", "--steps=50"]


def _env(pool_env: Mapping[str, str]) -> list[Manifest]:
    env: list[Manifest] = [{"name": k, "value": v} for k, v in sorted(pool_env.items())]
    env += [
        {"name": JOB_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": _label(JOBSET_NAME_LABEL)}}},
        {"name": JOB_NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    return env


def _label(key: str) -> str:
    return f"metadata.labels['{key}']"


def _pod_spec(
    pool: NodePoolProfile,
    priority: str,
    image: str,
    container: Manifest,
    preflight_image: str,
    *,
    site: RuntimeSite,
    tracked: bool = False,
) -> Manifest:
    volumes, mounts = scratch_volumes(default_shm_size_gib(pool))
    volumes.insert(0, checkpoint_volume(CHECKPOINT_CLAIM_NAME))
    mounts.insert(0, {"name": CHECKPOINT_VOLUME, "mountPath": DEFAULT_CHECKPOINT_MOUNT})
    tracking_env, tracking_volumes, tracking_mounts = tracking_wiring(
        site.tracking if tracked else None
    )
    volumes += tracking_volumes
    mounts += tracking_mounts
    if tracking_env:
        container = {**container, "env": [*container.get("env", []), *tracking_env]}
    container = {
        "name": NODE_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        **container,
        "resources": container_resources(pool),
        "securityContext": restricted_container_security(),
        "volumeMounts": [*mounts, *container.get("volumeMounts", [])],
    }
    spec: Manifest = {
        "restartPolicy": "Never",  # torchrun restarts workers; the Job recreates pods
        "serviceAccountName": TRAINER_SERVICE_ACCOUNT,
        # No process in a training pod calls the Kubernetes API (torchrun's c10d
        # rendezvous and MPI's SSH go pod to pod), and EKS Pod Identity projects its own
        # token (modules.k8s.rbac): none is mounted.
        "automountServiceAccountToken": False,
        "priorityClassName": priority,
        "terminationGracePeriodSeconds": DEFAULT_GRACE_PERIOD_S,
        "securityContext": pod_security_context(),
        "affinity": {
            "nodeAffinity": pool_node_affinity(pool),
            "podAntiAffinity": one_pod_per_node(JOBSET_NAME_LABEL),
        },
        "tolerations": pool_tolerations(pool),
        "containers": [container],
        "volumes": volumes,
    }
    if pool.has_gpus:
        spec["initContainers"] = [preflight_container(pool, preflight_image)]
    return spec


def _job_template(
    pod_spec: Manifest, *, ancestor: bool, backoff_limit: int = DEFAULT_BACKOFF_LIMIT
) -> Manifest:
    """A replicated job: Indexed (``PET_NODE_RANK`` is the completion index), failing at
    once on a configuration error, not counting preemptions and node disruptions."""
    template: Manifest = {
        "spec": {
            "completionMode": "Indexed",
            "backoffLimit": backoff_limit,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": NODE_CONTAINER,
                            "operator": "In",
                            "values": [EXIT_CONFIG_ERROR],
                        },
                    },
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {
                "metadata": {
                    "labels": {**TRAINING_POD_LABELS, METRICS_LABEL: METRICS_LABEL_VALUE},
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METRICS_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod_spec,
            },
        }
    }
    if ancestor:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: "trainer"}}
    return template


def torch_failure_policy() -> Manifest:
    """The torch and DeepSpeed runtimes' JobSet failure policy (JobSet v0.12).

    A node Job fails in two ways: its pod failure policy's ``FailJob`` on the trainer's
    configuration-error status (reason ``PodFailurePolicy``: a restart cannot help, the
    job fails), or more pod failures than ``backoffLimit`` (``BackoffLimitExceeded``).
    The second is what the loss of pod 0 causes: the other pods' torchrun loses the
    c10d store pod 0 hosts and exits, and each exit counts. The JobSet then recreates
    every pod, up to `JOBSET_MAX_RESTARTS` times, and they resume from the last
    checkpoint once pod 0 is scheduled again. A lost pod other than 0 fails nothing:
    its disruption is not counted (the pod failure policy) and the survivors'
    torchrun carries on (an elastic job) or waits for its replacement (a fixed one).
    Rule names follow JobSet's pattern (letters, digits, ``_,:``; no ``-``)."""
    return {
        "maxRestarts": JOBSET_MAX_RESTARTS,
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


def node_zero_success_policy() -> Manifest:
    """The torch and DeepSpeed node Job succeeds when pod 0 does (a Job success policy,
    GA in Kubernetes 1.33, beta and on by default in 1.31 and 1.32). torchrun on pod 0
    exits 0 only when its workers finished the run, and then every rank has: the
    remaining pods are ended. Without it an elastic job that finished on fewer nodes
    would wait for the replacement of a lost pod, holding its queue's quota, and that
    pod would start after the job's c10d store had gone."""
    return {"rules": [{"succeededIndexes": "0"}]}


def _trainer_ports() -> list[Manifest]:
    return [
        {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
        {"name": "c10d", "containerPort": RDZV_PORT, "protocol": "TCP"},
    ]


def _torch_runtime(
    framework: Framework,
    pool: NodePoolProfile,
    priority: str,
    inputs: TrainerInputs,
    site: RuntimeSite,
) -> Manifest:
    env = inputs.pool_env.get(pool.name, {})
    container = {
        "command": ["torchrun"],
        "args": default_train_args(framework, pool),
        "env": _env(env),
        "ports": _trainer_ports(),
    }
    pod = _pod_spec(
        pool,
        priority,
        inputs.training_image,
        container,
        inputs.training_image,
        site=site,
        tracked=True,
    )
    node = _job_template(pod, ancestor=True)
    node["spec"]["successPolicy"] = node_zero_success_policy()
    return {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                # Pods resolve by name before they are ready: the rendezvous is at start.
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "failurePolicy": torch_failure_policy(),
                "replicatedJobs": [{"name": "node", "template": node}],
            }
        },
    }


def _mpi_runtime(
    pool: NodePoolProfile,
    priority: str,
    inputs: TrainerInputs,
    spec: TrainerSpec,
    site: RuntimeSite,
) -> Manifest:
    env = inputs.pool_env.get(pool.name, {})
    image = horovod_image(inputs.training_image, spec)
    threads = max(1, cpu_request_millicores(pool) // 1000 // processes_per_node(pool))
    mpi_env = {**env, "OMP_NUM_THREADS": str(threads)}
    launcher = {
        "command": mpirun_command(list(mpi_env), default_horovod_program()),
        "env": _env(mpi_env),
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
    }
    worker = {
        # sshd as the non-root user on an unprivileged port, in the foreground, logging
        # to stderr; the Horovod image's config points at the mounted keys.
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", "/etc/ssh/sshd_config_trainer"],
        "env": _env(mpi_env),
        "ports": [{"name": "ssh", "containerPort": SSHD_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": SSHD_PORT}, "initialDelaySeconds": 5},
    }
    return {
        "mlPolicy": {
            "numNodes": 2,
            "mpi": {
                "numProcPerNode": processes_per_node(pool),
                "mpiImplementation": "OpenMPI",
                "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
                "runLauncherAsNode": True,
            },
        },
        "template": {
            "spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                # The job is done when the launcher's mpirun is; workers only serve SSH.
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": _job_template(
                            _pod_spec(
                                pool, priority, image, worker, inputs.training_image, site=site
                            ),
                            ancestor=False,
                        ),
                    },
                    {
                        "name": "launcher",
                        "dependsOn": [{"name": "node", "status": "Ready"}],
                        "template": _job_template(
                            _pod_spec(
                                pool, priority, image, launcher, inputs.training_image, site=site
                            ),
                            ancestor=True,
                        ),
                    },
                ],
            }
        },
    }


def cluster_training_runtime(
    framework: Framework,
    pool: NodePoolProfile,
    priority: str,
    inputs: TrainerInputs,
    spec: TrainerSpec,
    *,
    site: RuntimeSite | None = None,
) -> Manifest:
    """One of the platform's ClusterTrainingRuntimes."""
    site = site or RuntimeSite()
    if framework == "mpi":
        body = _mpi_runtime(pool, priority, inputs, spec, site)
    else:
        body = _torch_runtime(framework, pool, priority, inputs, site)
    labels = {FRAMEWORK_LABEL: framework, POOL_LABEL: pool.name, PRIORITY_LABEL: priority}
    return {
        "apiVersion": TRAINER_API,
        "kind": "ClusterTrainingRuntime",
        "metadata": metadata(runtime_name(framework, pool.name, priority), labels=labels),
        "spec": body,
    }


def training_runtimes(
    pools: Sequence[NodePoolProfile],
    inputs: TrainerInputs,
    spec: TrainerSpec,
    site: RuntimeSite | None = None,
) -> list[Manifest]:
    """Every runtime: each framework of ``spec`` on each training pool at each
    PriorityClass (highest first)."""
    return [
        cluster_training_runtime(framework, pool, priority, inputs, spec, site=site)
        for framework in spec.frameworks
        for pool in pools
        if is_training_pool(pool)
        for priority in PRIORITY_CLASSES
    ]


def runtime_summary(pools: Sequence[NodePoolProfile], spec: TrainerSpec) -> list[str]:
    """The runtime names a stack gets (what the plan summary and the docs list)."""
    return [
        runtime_name(framework, pool.name, priority)
        for framework in spec.frameworks
        for pool in pools
        if is_training_pool(pool)
        for priority in PRIORITY_CLASSES
    ]


def runtime_env_names(runtime: Mapping[str, Any]) -> set[str]:
    """The literal environment variable names of a runtime's trainer container."""
    names: set[str] = set()
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            names |= {e["name"] for e in container.get("env", []) if "value" in e}
    return names
