"""The typed, validated description of one training job on one node pool."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from modules.k8s.names import PRIORITY_CLASSES, TrackingAccess
from modules.k8s.trainer import memory, pods, runtimes
from modules.pools import NodePoolProfile
from modules.validation import Checker, InvalidArgsError, Problem
from workloads.training.config import (
    PRESETS,
    TrainConfig,
    add_override_arguments,
    from_namespace,
)
from workloads.training.fabric import BOOTSTRAP_EXCLUDE, MIN_BUSBW_GBPS
from workloads.training.metrics_endpoint import METRICS_PORT

#: torchrun's c10d rendezvous port on the job's first pod.
RDZV_PORT = runtimes.RDZV_PORT
#: DCGM exporter's port on GPU nodes: the training metrics must not take it.
DCGM_EXPORTER_PORT = 9400
#: torchrun gives workers 30 s between SIGTERM and SIGKILL to write their final
#: checkpoint; the pod's grace period must cover that plus torchrun's own exit.
TORCHRUN_SIGTERM_WINDOW_S = 30
MAX_NAME_LENGTH = 40  # pod hostnames are "<name>-<index>"; Service "<name>-rdzv"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A TrainJob's name is an RFC 1035 label (its CRD's rule): it starts with a letter.
_RFC1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# registry/repository[:tag][@sha256:digest], as the OCI distribution spec allows.
_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9._/-]+)?)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
Workload = Literal["train", "fabric-check"]
Framework = Literal["torch", "deepspeed", "mpi"]
#: ``trainer``: a TrainJob run by Kubeflow Trainer against the platform's runtime;
#: ``indexed-job``: the platform's own Indexed Job and headless Service (kept for jobs a
#: fleet manager dispatches to a worker, see `TrainingJobSpec.launcher`).
Launcher = Literal["trainer", "indexed-job"]


#: The counts and sizes with a floor: field -> (floor, what is allowed). Unset (None) is
#: the default where the field may be unset.
_FLOORS = {
    "min_busbw_gbps": (0, ">= 0"),
    "max_restarts": (0, ">= 0"),
    "backoff_limit": (0, ">= 0"),
    "shm_size_gib": (1, ">= 1 (or unset for the default)"),
    "scratch_size_gib": (1, ">= 1"),
}


@dataclass(frozen=True)
class TrainingJobSpec:
    """One training job: which preset, on which pool, queued how, saved where.

    By default the job is a Kubeflow Trainer ``TrainJob`` against the platform's
    ClusterTrainingRuntime for its framework, pool and PriorityClass
    (`modules.k8s.trainer.runtimes`): the runtime carries the pool's resources, fabric
    environment, preflight, volumes and security context, the TrainJob what is the
    job's own. A few settings are the runtime's on that path (``metrics_port``,
    ``checkpoint_mount_path``, ``health_check``, ``expect_nvlink``,
    ``backoff_limit``): they must keep their defaults there, and ``indexed-job`` takes
    any value.

    Args:
        name: job name (a DNS label starting with a letter, at most 40 characters);
            also names the checkpoint subdirectory (and the Indexed Job's Service).
        namespace: the team's namespace.
        pool: the target node pool's profile (requests and placement come from it).
        local_queue: the team's Kueue LocalQueue (label ``kueue.x-k8s.io/queue-name``).
        priority_class: PriorityClass of the pods (Kueue also reads it); on the
            ``trainer`` path one of the platform's (``production``, ``research``,
            ``preemptible``): it selects the runtime.
        service_account: the team's pod-identity service account (S3 access).
        image: training image in the stack's in-region ECR repository, with a tag
            (never ``latest``) or a digest.
        checkpoint_claim: PersistentVolumeClaim of the checkpoint volume (the FSx
            static PVC or a gp3 PVC), mounted at ``checkpoint_mount_path``; required
            for training, unused by the fabric check.
        workload: ``train`` (``workloads.train``) or ``fabric-check``
            (``workloads.fabric_check``: all-reduce across the pool's nodes, failing
            below the instance type's bus-bandwidth threshold).
        min_busbw_gbps: fabric check threshold in GB/s where the instance type has
            none in ``workloads.training.fabric.MIN_BUSBW_GBPS`` (on-premises pools).
        preset: training preset (``workloads.training.config.PRESETS``).
        nodes: pods (one per node); ``completions = parallelism = nodes``.
        suspend: create the Job suspended. Kueue manages a labelled Job's suspension
            itself (it unsuspends the Job when the queue admits it), so this is the
            Kueue-friendly default.
        hold: keep the Job out of the queue: created suspended and without the Kueue
            queue label, so nothing starts it. A user enables it (the shipped example
            job) by setting ``hold=False``, which adds the label and lets Kueue admit it.
        max_restarts: torchrun restarts of the worker group inside the pods (an
            elastic job spends one on each loss of a node; a node that comes back
            rejoins without spending one).
        backoff_limit: pod failures the Job tolerates before failing (preemptions
            and node disruptions are not counted; see the pod failure policy).
        cpu_training: explicitly run on a pool without GPUs (gloo on CPUs).
        extra_args: more ``workloads.train`` arguments (``--steps 1000`` ...).
        fabric_env_overrides: NCCL/libfabric variables replacing the fabric's
            defaults (an empty value removes one).
        fabric_debug: ``NCCL_DEBUG=INFO`` so the transport in use is in the logs.
        socket_ifname: NCCL bootstrap interface selector.
        ib_hca: InfiniBand pools: ``NCCL_IB_HCA``.
        ib_gid_index: InfiniBand pools on RoCE: ``NCCL_IB_GID_INDEX``.
        metrics_port: the training metrics port (container port named ``metrics``).
        termination_grace_period_s: pod grace period after SIGTERM (spot notice,
            preemption); must exceed torchrun's 30 s checkpoint window.
        shm_size_gib: size of the in-memory ``/dev/shm`` (default: an eighth of the
            pod's memory, 1 to 64 GiB).
        scratch_size_gib: size of ``/scratch`` (token shards) and of ``/tmp``
            (compile caches), each.
        checkpoint_mount_path: where the checkpoint volume is mounted.
        health_check: run the GPU preflight health check as an init container.
        framework: ``torch`` (default: torchrun), ``deepspeed`` (torchrun, the trainer
            with ``--engine=deepspeed``) or ``mpi`` (Horovod under ``mpirun``: the MPI
            runtime's image on every pod, ``extra_args`` are the Horovod example's);
            DeepSpeed and MPI need the ``trainer`` launcher.
        launcher: ``trainer`` (default: a TrainJob) or ``indexed-job`` (the platform's
            own Indexed Job and headless Service). The Indexed Job is kept where a
            TrainJob cannot run: on a stack without the trainer (``trainer.enabled:
            false``), and for a job queued to a fleet manager's ``burst`` queue, which
            MultiKueue dispatches to a worker cluster (Kueue on the manager computes a
            TrainJob's pods from the runtime it names, and a manager holds runtimes for
            its own pools, not its workers'; the worker's MultiKueue role grants batch
            Jobs and JobSets only: docs/fleet.md).
        rendezvous_service: (``indexed-job`` only) the name of an existing headless
            Service in the namespace that gives pod 0 its DNS name (e.g.
            ``fleet-rdzv``, which every cluster of a fleet has in each bursting team's
            namespace: MultiKueue copies the Job to a worker, not a per-job Service).
            Default None: the job brings its own Service ``<name>-rdzv``.
        expect_nvlink: the health check requires every NVLink up (default: on for
            8-GPU boards of NVLink accelerators).
        min_nodes: make the job elastic: torchrun runs with ``--nnodes=min_nodes:nodes``
            and the job continues, from its last checkpoint, with as few as
            ``min_nodes`` nodes when nodes are lost (and takes them back when their
            pods are scheduled again), keeping the global batch of ``nodes`` nodes
            (`workloads.training.elastic`). Default None: a fixed ``nodes``. Torch
            framework, ``train`` workload and ``trainer`` launcher only (see
            docs/workloads.md, "Elastic runs", for what survives the loss of pod 0).
        tp: tensor-parallel degree (``--tp``): the ranks of one node split each block
            (NVLink inside the node), FSDP2 shards across the nodes. It must divide the
            pool's GPUs per node (a TP group never spans nodes) and the preset's heads.
            Default 1.
        tracking: (``indexed-job``) the cluster's MLflow server as the team reaches it
            (URI, the team's credentials Secret, the CA): the trainer logs its run
            there. ``None``: not tracked (no tracking server on the cluster). On the
            ``trainer`` launcher the platform's runtime carries the cluster's tracking
            wiring for every team (`modules.k8s.trainer.runtimes.RuntimeSite`).
    """

    name: str
    namespace: str
    pool: NodePoolProfile
    local_queue: str
    priority_class: str
    service_account: str
    image: str
    checkpoint_claim: str | None = None
    workload: Workload = "train"
    min_busbw_gbps: float | None = None
    preset: str = "tiny"
    nodes: int = 1
    suspend: bool = True
    hold: bool = False
    max_restarts: int = 3
    backoff_limit: int = 3
    cpu_training: bool = False
    extra_args: tuple[str, ...] = ()
    fabric_env_overrides: Mapping[str, str] = field(default_factory=dict)
    fabric_debug: bool = False
    socket_ifname: str = BOOTSTRAP_EXCLUDE
    ib_hca: str = "mlx5"
    ib_gid_index: int | None = None
    metrics_port: int = METRICS_PORT
    termination_grace_period_s: int = 120
    shm_size_gib: int | None = None
    scratch_size_gib: int = 20
    checkpoint_mount_path: str = "/checkpoints"
    health_check: bool = True
    expect_nvlink: bool | None = None
    rendezvous_service: str | None = None
    framework: Framework = "torch"
    launcher: Launcher = "trainer"
    min_nodes: int | None = None
    tracking: TrackingAccess | None = None
    tp: int = 1

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            self.rendezvous_service is None or bool(_DNS_LABEL.match(self.rendezvous_service)),
            "rendezvous_service",
            self.rendezvous_service,
            "the name of a Service in the namespace (a DNS label)",
        )
        self._check_launcher(check)
        check.require(
            bool(_DNS_LABEL.match(self.name)) and len(self.name) <= MAX_NAME_LENGTH,
            "name",
            self.name,
            f"a DNS label (lowercase letters, digits, '-') of at most {MAX_NAME_LENGTH} characters",
        )
        check.require(
            bool(_DNS_LABEL.match(self.namespace)) and len(self.namespace) <= 63,
            "namespace",
            self.namespace,
            "a DNS label of at most 63 characters",
        )
        names = ["local_queue", "priority_class", "service_account"]
        if self.workload == "train" or self.checkpoint_claim is not None:
            names.append("checkpoint_claim")
        for name in names:
            value = getattr(self, name) or ""
            check.require(
                bool(_DNS_SUBDOMAIN.match(value)) and len(value) <= 253,
                name,
                value,
                "a Kubernetes object name (lowercase letters, digits, '-', '.')",
            )
        image = _IMAGE.match(self.image)
        check.require(
            image is not None and bool(image.group("tag") or image.group("digest")),
            "image",
            self.image,
            "an image reference with a tag or digest, e.g. "
            "<account>.dkr.ecr.me-central-1.amazonaws.com/training:2025.06.1",
        )
        check.require(
            image is None or image.group("tag") != "latest",
            "image",
            self.image,
            "a fixed tag or digest, not 'latest' (a restarted pod must run the same code)",
        )
        check.require(self.preset in PRESETS, "preset", self.preset, f"one of {', '.join(PRESETS)}")
        check.require(
            1 <= self.nodes <= max(1, self.pool.max_size),
            "nodes",
            self.nodes,
            f"between 1 and the pool's max_size ({self.pool.max_size})",
        )
        check.require(
            self.pool.role != "system",
            "pool",
            self.pool.name,
            "a training pool (gpu or cpu-training role), not the system pool",
        )
        if self.pool.has_gpus:
            check.require(
                not self.cpu_training,
                "cpu_training",
                self.cpu_training,
                f"False on GPU pool {self.pool.name} (it trains on its GPUs)",
            )
            check.require(
                self.pool.gpu_sharing == "none",
                "pool",
                self.pool.name,
                f"a pool of whole GPUs; {self.pool.gpu_sharing} GPUs are for small shared "
                "workloads, not training jobs",
            )
        else:
            check.require(
                self.cpu_training,
                "cpu_training",
                self.cpu_training,
                f"True to train on pool {self.pool.name}, which has no GPUs",
            )
        check.require(
            self.workload in ("train", "fabric-check"),
            "workload",
            self.workload,
            "train or fabric-check",
        )
        if self.workload == "fabric-check":
            check.require(
                self.nodes >= 2,
                "nodes",
                self.nodes,
                ">= 2 for a fabric check (one node does not use the network between nodes)",
            )
            check.require(
                self.min_busbw_gbps is not None
                or (self.pool.instance_type or "") in MIN_BUSBW_GBPS,
                "min_busbw_gbps",
                self.min_busbw_gbps,
                f"a threshold in GB/s: pool {self.pool.name}'s instance type "
                f"{self.pool.instance_type!r} has none in workloads.training.fabric.MIN_BUSBW_GBPS",
            )
        for name, (floor, expected) in _FLOORS.items():
            value = getattr(self, name)
            check.require(value is None or value >= floor, name, value, expected)
        check.require(
            1024 <= self.metrics_port <= 65535
            and self.metrics_port not in (DCGM_EXPORTER_PORT, RDZV_PORT),
            "metrics_port",
            self.metrics_port,
            f"a port in 1024-65535 other than {DCGM_EXPORTER_PORT} (DCGM exporter) and "
            f"{RDZV_PORT} (rendezvous)",
        )
        check.require(
            self.termination_grace_period_s > TORCHRUN_SIGTERM_WINDOW_S,
            "termination_grace_period_s",
            self.termination_grace_period_s,
            f"more than torchrun's {TORCHRUN_SIGTERM_WINDOW_S} s checkpoint window",
        )
        check.require(
            self.checkpoint_mount_path.startswith("/"),
            "checkpoint_mount_path",
            self.checkpoint_mount_path,
            "an absolute path",
        )
        bad_env = [k for k in self.fabric_env_overrides if not _ENV_NAME.match(k)]
        check.require(
            not bad_env,
            "fabric_env_overrides",
            bad_env,
            "environment variable names (letters, digits, '_')",
        )
        self._check_elastic(check)
        self._check_layout(check)
        check.done()

    def _check_launcher(self, check: Checker) -> None:
        """What the launcher and the framework allow."""
        check.require(
            self.launcher in ("trainer", "indexed-job"),
            "launcher",
            self.launcher,
            "trainer or indexed-job",
        )
        check.require(
            self.framework in ("torch", "deepspeed", "mpi"),
            "framework",
            self.framework,
            "torch, deepspeed or mpi",
        )
        if self.launcher == "indexed-job":
            check.require(
                self.framework == "torch",
                "framework",
                self.framework,
                "torch on the indexed-job launcher (DeepSpeed and MPI run on Kubeflow "
                "Trainer's runtimes)",
            )
            return
        check.require(
            bool(_RFC1035_LABEL.match(self.name)),
            "name",
            self.name,
            "a TrainJob name starts with a letter (RFC 1035 label)",
        )
        check.require(
            self.priority_class in PRIORITY_CLASSES,
            "priority_class",
            self.priority_class,
            f"one of {', '.join(PRIORITY_CLASSES)} (it selects the runtime)",
        )
        check.require(
            self.pool.role == "system" or pods.is_training_pool(self.pool),
            "pool",
            self.pool.name,
            "a pool with runtimes: role gpu with whole GPUs, or role cpu-training",
        )
        check.require(
            self.rendezvous_service is None,
            "rendezvous_service",
            self.rendezvous_service,
            "only for the indexed-job launcher (Trainer's JobSet has its own Service)",
        )
        fixed = {
            "metrics_port": (self.metrics_port, runtimes.METRICS_PORT),
            "checkpoint_mount_path": (self.checkpoint_mount_path, pods.DEFAULT_CHECKPOINT_MOUNT),
            "health_check": (self.health_check, True),
            "expect_nvlink": (self.expect_nvlink, None),
            "backoff_limit": (self.backoff_limit, runtimes.DEFAULT_BACKOFF_LIMIT),
        }
        for name, (value, default) in fixed.items():
            check.require(
                value == default,
                name,
                value,
                f"{default!r}: the runtime sets it (launcher indexed-job takes other values)",
            )
        removed = sorted(k for k, v in self.fabric_env_overrides.items() if v == "")
        check.require(
            not removed,
            "fabric_env_overrides",
            removed,
            "a value: a TrainJob adds to the runtime's environment and cannot remove a "
            "variable (launcher indexed-job can)",
        )
        if self.framework == "mpi":
            check.require(
                self.workload == "train",
                "workload",
                self.workload,
                "train for MPI (the fabric check runs on the torch runtime)",
            )
            check.require(
                self.nodes >= 2,
                "nodes",
                self.nodes,
                ">= 2 for MPI (the launcher is a node, and the runtime has workers)",
            )

    def _check_elastic(self, check: Checker) -> None:
        """What an elastic job (``min_nodes``) needs."""
        if self.min_nodes is None:
            return
        check.require(
            1 <= self.min_nodes <= self.nodes,
            "min_nodes",
            self.min_nodes,
            f"between 1 and nodes ({self.nodes}): the fewest nodes the job continues with",
        )
        check.require(
            self.framework == "torch",
            "framework",
            self.framework,
            "torch for an elastic job (min_nodes): DeepSpeed's ZeRO checkpoints do not "
            "reshard to another world size, and MPI (Horovod) ranks cannot rejoin",
        )
        check.require(
            self.workload == "train",
            "workload",
            self.workload,
            "train for an elastic job (min_nodes): the fabric check measures a fixed set of nodes",
        )
        check.require(
            self.launcher == "trainer",
            "launcher",
            self.launcher,
            "trainer for an elastic job (min_nodes): the platform's runtime restarts the "
            "job set after the loss of pod 0 and ends the job with pod 0; an Indexed Job "
            "does neither",
        )
        check.require(
            self.max_restarts >= 1,
            "max_restarts",
            self.max_restarts,
            ">= 1 for an elastic job (min_nodes): the surviving nodes restart their "
            "workers once for each node lost",
        )
        if self.preset not in PRESETS:
            return  # reported above
        try:
            elastic_batch_settings(self.preset, self.extra_args)
        except InvalidArgsError as err:
            check.require(
                False,
                "extra_args",
                list(self.extra_args),
                "settings the trainer accepts (an elastic job's global batch is computed "
                "from them): " + "; ".join(_option_problem(p) for p in err.problems),
            )

    def _check_layout(self, check: Checker) -> None:
        """TP inside a node, and the memory plan: the job's layout must fit its pool's
        GPUs (`modules.k8s.trainer.memory`), refused with the estimate and a layout
        that fits."""
        check.require(self.tp >= 1, "tp", self.tp, "a positive integer (1: no TP)")
        if self.tp > 1:
            check.require(
                self.pool.has_gpus and self.pool.gpus_per_node % self.tp == 0,
                "tp",
                self.tp,
                f"a divisor of pool {self.pool.name}'s GPUs per node "
                f"({self.pool.gpus_per_node}): TP runs inside a node",
            )
            check.require(
                self.framework == "torch",
                "tp",
                self.tp,
                "1 with framework deepspeed or mpi (TP runs on the torch runtime's FSDP2)",
            )
        # A GPU pool of unknown memory (an on-premises pool without gpuMemoryGib) has no
        # plan to check against.
        if self.workload != "train" or self.pool.gpu_memory_gib <= 0 or check.problems:
            return
        if self.preset not in PRESETS or self.framework == "mpi":
            return  # MPI runs the Horovod example, not the trainer
        try:
            config = self.train_config
        except InvalidArgsError as err:
            check.require(
                False,
                "extra_args",
                list(self.extra_args),
                "settings the trainer accepts: "
                + "; ".join(_option_problem(p) for p in err.problems),
            )
            return
        # An elastic job may run on min_nodes: fewer shards per GPU, the worst case.
        problem = memory.plan_problem(
            config,
            gpus=(self.min_nodes or self.nodes) * self.processes_per_node,
            gpus_per_node=self.pool.gpus_per_node,
            gpu_memory_gib=self.pool.gpu_memory_gib,
            where=f"pool {self.pool.name} ({self.pool.accelerator or 'GPU'})",
        )
        check.require(problem is None, "preset", self.preset, problem or "")

    @property
    def train_config(self) -> TrainConfig:
        """The trainer's config of this job: its preset with ``tp``, the framework's
        engine and ``extra_args``, read with the trainer's own option parser."""
        parser = _TrainerOptions(add_help=False)
        add_override_arguments(parser)
        engine = ["--engine=deepspeed"] if self.framework == "deepspeed" else []
        args, _ = parser.parse_known_args(
            [f"--preset={self.preset}", f"--tp={self.tp}", *engine, *self.extra_args]
        )
        return from_namespace(args)

    @property
    def global_batch_size(self) -> int | None:
        """An elastic job's global batch, in sequences per optimizer step: the one its
        ``extra_args`` give (``--global-batch-size``), else micro-batch x accumulation
        x every process of ``nodes`` nodes. None for a fixed job (the trainer takes
        its first start's world size)."""
        if self.min_nodes is None:
            return None
        micro_batch, accum, given = elastic_batch_settings(self.preset, self.extra_args)
        if given:
            return given
        return micro_batch * accum * self.nodes * self.processes_per_node

    @property
    def processes_per_node(self) -> int:
        """torchrun processes per pod: one per GPU, or one on CPU pools."""
        return pods.processes_per_node(self.pool)

    @property
    def nvlink_expected(self) -> bool:
        if self.expect_nvlink is not None:
            return self.expect_nvlink
        return pods.nvlink_expected(self.pool)


def _option_problem(problem: Problem) -> str:
    if problem.field == "extra_args":  # the parser's own message
        return problem.expected
    option = "--" + problem.field.replace("_", "-")
    return f"{option}: got {problem.value!r}; {problem.expected}"


class _TrainerOptions(argparse.ArgumentParser):
    """The trainer's options, reporting a malformed one instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArgsError([Problem("extra_args", None, message)])


def elastic_batch_settings(preset: str, extra_args: Sequence[str]) -> tuple[int, int, int]:
    """The trainer's micro-batch, gradient accumulation and ``--global-batch-size`` (0:
    not given) for ``--preset=preset`` with ``extra_args``, read with the trainer's own
    option parser (`InvalidArgsError` for a value it would refuse)."""
    parser = _TrainerOptions(add_help=False)
    add_override_arguments(parser)
    args, _ = parser.parse_known_args([f"--preset={preset}", *extra_args])
    config = from_namespace(args)
    return config.micro_batch_size, config.grad_accum_steps, config.global_batch_size
