"""The typed, validated description of one model served on one node pool."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pulumi

from modules.k8s.serving.spec import (
    CPU_MODEL_FORMAT,
    CPU_RUNTIME,
    INFERENCE_SERVICE_ACCOUNT,
    ONNX_MODEL_FORMAT,
    TRITON_RUNTIME,
)
from modules.k8s.trainer.pods import cpu_request_millicores, memory_request_mib
from modules.pools import NodePoolProfile
from modules.validation import Checker
from workloads.layout import ARTIFACT_PREFIX, TRITON_DIR, TRITON_STORAGE_PATH

#: KServe names the predictor Deployment ``<isvc>-<predictor name>-predictor`` (a DNS
#: label of at most 63 characters); the predictor name is ``v<version>``.
MAX_NAME_LENGTH = 36
#: The MLflow tracking server keeps artifacts under this prefix of the data bucket.
MLFLOW_PREFIX = ARTIFACT_PREFIX
#: A canary's real share of traffic is its share of the pods (see `canary_replicas`);
#: refuse a split that would land further than this from the one asked for.
MAX_SPLIT_ERROR_PERCENT = 5

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PATH = re.compile(r"^[A-Za-z0-9._=+-]+(/[A-Za-z0-9._=+-]+)*/?$")


@dataclass(frozen=True)
class ModelVersion:
    """A registered model version and where its artifacts are.

    Args:
        version: the registry's version number (MLflow versions are integers).
        storage_path: the version's artifact directory, relative to the model store: on
            AWS a key prefix of the stack's data bucket below ``mlflow/`` (MLflow's
            artifact location); on premises a path on the team's volume claim. The
            directory holds the int8 export (CPU pools: the int8 MLflow model `make
            register` logs, ``mlflow/<experiment>/models/<model id>/artifacts``) or a
            Triton model repository (GPU pools: the ``triton/`` directory `make register`
            logs with the version's fp32 model, ``.../artifacts/triton``; on premises any
            path ending in ``triton``, e.g. a copied export's).
    """

    version: int
    storage_path: str

    @property
    def predictor_name(self) -> str:
        """The KServe predictor name, which names the version's Deployment."""
        return f"v{self.version}"


@dataclass(frozen=True)
class InferenceServiceSpec:
    """One model served by KServe (RawDeployment mode) on one node pool.

    Args:
        name: the InferenceService's name (DNS label, at most 36 characters).
        namespace: the team's namespace.
        model_name: the registered model's name (label ``gpuplatform.ae/model``).
        model: the stable version (`ModelVersion`).
        pool: the node pool it runs on. A CPU pool runs the CPU predictor runtime
            (int8 model); a GPU pool runs Triton (ONNX) with one GPU per replica.
        store: where artifacts live: ``s3`` (the stack's data bucket, read through EKS
            Pod Identity) or ``pvc`` (a volume claim in the namespace, on premises).
        bucket: the data bucket's name (``s3`` store).
        claim: the volume claim's name (``pvc`` store).
        client_namespaces: the only namespaces whose service accounts may call the
            endpoint (NetworkPolicy and RBAC both); at least one.
        min_replicas: fewest replicas (default 1).
        max_replicas: most replicas the autoscaler may run (default 3).
        cpu_millicores: CPU per replica (default: a quarter of a CPU node, or a GPU's
            share of a GPU node); requests equal limits.
        memory_mib: memory per replica (default: as for the CPU).
        canary: a new version rolled out beside the stable one (`ModelVersion`).
        canary_traffic_percent: the share of requests the canary should get (1-99).
        released: false (the default for the shipped example) keeps the service stopped
            (KServe's ``serving.kserve.io/stop`` annotation: no pods run).
        service_account: the pods' ServiceAccount (Pod Identity on EKS).
    """

    name: str
    namespace: str
    model_name: str
    model: ModelVersion
    pool: NodePoolProfile
    client_namespaces: tuple[str, ...]
    store: str = "s3"
    bucket: pulumi.Input[str] | None = None
    claim: str | None = None
    min_replicas: int = 1
    max_replicas: int = 3
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    canary: ModelVersion | None = None
    canary_traffic_percent: int = 0
    released: bool = True
    service_account: str = INFERENCE_SERVICE_ACCOUNT

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_DNS_LABEL.match(self.name)) and len(self.name) <= MAX_NAME_LENGTH,
            "name",
            self.name,
            f"a DNS label of at most {MAX_NAME_LENGTH} characters",
        )
        for field_name in ("namespace", "model_name", "service_account"):
            value = getattr(self, field_name)
            check.require(
                bool(_DNS_LABEL.match(value)) and len(value) <= 63,
                field_name,
                value,
                "a DNS label (lowercase letters, digits, '-')",
            )
        check.require(
            bool(self.client_namespaces),
            "client_namespaces",
            list(self.client_namespaces),
            "name at least one namespace whose applications may call the endpoint",
        )
        for i, ns in enumerate(self.client_namespaces):
            check.require(
                bool(_DNS_LABEL.match(ns)), f"client_namespaces[{i}]", ns, "a namespace name"
            )
        check.require(
            self.pool.role != "system",
            "pool",
            self.pool.name,
            "a worker pool (gpu, cpu-training or preprocess), not the system pool",
        )
        check.require(
            not self.pool.has_gpus or self.pool.gpu_sharing != "mig",
            "pool",
            self.pool.name,
            "a pool of whole or time-sliced GPUs (MIG devices are not requested here)",
        )
        self._check_store(check)
        self._check_versions(check)
        self._check_size(check)
        check.done()

    def _check_store(self, check: Checker) -> None:
        check.require(self.store in ("s3", "pvc"), "store", self.store, "one of 's3', 'pvc'")
        if self.store == "s3":
            check.require(self.bucket is not None, "bucket", None, "the data bucket (s3 store)")
        if self.store == "pvc":
            check.require(
                bool(_DNS_LABEL.match(self.claim or "")),
                "claim",
                self.claim,
                "the volume claim holding the models (pvc store)",
            )
        for field_name, version in (("model", self.model), ("canary", self.canary)):
            if version is None:
                continue
            path = version.storage_path
            check.require(
                bool(_PATH.match(path)) and ".." not in path.split("/"),
                f"{field_name}.storage_path",
                path,
                "a relative path without '..', e.g. mlflow/3/models/m-1a2b/artifacts/int8",
            )
            if self.store == "s3":
                check.require(
                    path.startswith(MLFLOW_PREFIX),
                    f"{field_name}.storage_path",
                    path,
                    f"a registered model's artifacts, below {MLFLOW_PREFIX} in the data bucket",
                )
            if self.pool.has_gpus:  # Triton loads a model repository, nothing else
                triton = (
                    bool(TRITON_STORAGE_PATH.match(path))
                    if self.store == "s3"
                    else path.rstrip("/").split("/")[-1] == TRITON_DIR
                )
                check.require(
                    triton,
                    f"{field_name}.storage_path",
                    path,
                    "a Triton model repository: the version's "
                    f"{MLFLOW_PREFIX}<experiment>/models/<model id>/artifacts/{TRITON_DIR} "
                    "(`make register` prints it)"
                    if self.store == "s3"
                    else f"a Triton model repository: an export's {TRITON_DIR} directory",
                )

    def _check_versions(self, check: Checker) -> None:
        check.require(self.model.version >= 1, "model.version", self.model.version, ">= 1")
        check.require(
            1 <= self.min_replicas <= self.max_replicas,
            "min_replicas",
            self.min_replicas,
            f"1 to max_replicas ({self.max_replicas})",
        )
        check.require(self.max_replicas <= 100, "max_replicas", self.max_replicas, "at most 100")
        if self.canary is None:
            check.require(
                self.canary_traffic_percent == 0,
                "canary_traffic_percent",
                self.canary_traffic_percent,
                "0 without a canary version",
            )
            return
        check.require(
            self.canary.version != self.model.version,
            "canary.version",
            self.canary.version,
            f"a version other than the stable one ({self.model.version})",
        )
        check.require(
            1 <= self.canary_traffic_percent <= 99,
            "canary_traffic_percent",
            self.canary_traffic_percent,
            "1 to 99 (promote by making the canary the stable version)",
        )
        if 1 <= self.canary_traffic_percent <= 99:
            share = self.canary_share_percent
            check.require(
                abs(share - self.canary_traffic_percent) <= MAX_SPLIT_ERROR_PERCENT,
                "min_replicas",
                self.min_replicas,
                f"too few replicas to split {self.canary_traffic_percent}% of the traffic: "
                f"the canary would get {share:.0f}%; raise min_replicas to at least "
                f"{self.replicas_for_split}",
            )

    def _check_size(self, check: Checker) -> None:
        cpu, memory = self.cpu, self.memory
        node_cpu = cpu_request_millicores(self.pool)
        node_memory = memory_request_mib(self.pool)
        check.require(
            100 <= cpu <= node_cpu,
            "cpu_millicores",
            cpu,
            f"100 to the pool's allocatable {node_cpu} millicores",
        )
        check.require(
            256 <= memory <= node_memory,
            "memory_mib",
            memory,
            f"256 to the pool's allocatable {node_memory} MiB",
        )

    @property
    def runtime(self) -> str:
        """The ServingRuntime: Triton on GPU pools, the CPU predictor elsewhere."""
        return TRITON_RUNTIME if self.pool.has_gpus else CPU_RUNTIME

    @property
    def model_format(self) -> str:
        return ONNX_MODEL_FORMAT if self.pool.has_gpus else CPU_MODEL_FORMAT

    @property
    def gpus(self) -> int:
        """GPUs per replica: one on GPU pools."""
        return 1 if self.pool.has_gpus else 0

    @property
    def cpu(self) -> int:
        """CPU per replica in millicores."""
        return self._per_replica(self.cpu_millicores, cpu_request_millicores(self.pool), 100)

    @property
    def memory(self) -> int:
        """Memory per replica in MiB."""
        return self._per_replica(self.memory_mib, memory_request_mib(self.pool), 256)

    def _per_replica(self, given: int | None, node_request: int, floor: int) -> int:
        """``given`` where set; otherwise a replica's share of what a node of the pool
        can request (one replica per GPU, or a quarter of a CPU node), at least
        ``floor``."""
        if given is not None:
            return given
        share = self.pool.gpus_per_node * self.pool.gpu_replicas if self.pool.has_gpus else 4
        return max(floor, node_request // share)

    @property
    def canary_replicas(self) -> int:
        """The canary's fixed replica count, as KServe v0.20 derives it in Standard mode:
        ``ceil(minReplicas * trafficPercent / 100)`` (its ``canaryReplicaCount``)."""
        return math.ceil(self.min_replicas * self.canary_traffic_percent / 100)

    @property
    def stable_min_replicas(self) -> int:
        """KServe lowers the stable predictor's minimum by the canary's pods (at least 1)."""
        return max(1, self.min_replicas - self.canary_replicas)

    @property
    def canary_share_percent(self) -> float:
        """The canary's share of requests at minimum scale: its share of the pods the
        endpoint Service spreads requests over."""
        canary = self.canary_replicas
        return 100.0 * canary / (canary + self.stable_min_replicas)

    @property
    def replicas_for_split(self) -> int:
        """Fewest ``min_replicas`` that bring the split within the allowed error."""
        for replicas in range(1, 101):
            canary = math.ceil(replicas * self.canary_traffic_percent / 100)
            share = 100.0 * canary / (canary + max(1, replicas - canary))
            if abs(share - self.canary_traffic_percent) <= MAX_SPLIT_ERROR_PERCENT:
                return replicas
        return 100

    def storage_uri(self, version: ModelVersion) -> pulumi.Input[str]:
        """``s3://<bucket>/<path>`` or ``pvc://<claim>/<path>`` of a version (an Output
        while the bucket's name is one)."""
        path = version.storage_path.rstrip("/")
        if self.store == "pvc":
            return f"pvc://{self.claim}/{path}"
        if isinstance(self.bucket, str):
            return f"s3://{self.bucket}/{path}"
        return pulumi.Output.concat("s3://", self.bucket or "", "/", path)
