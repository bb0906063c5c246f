"""Typed settings and pure manifests of Spark on the cluster: the Kubeflow Spark
Operator and the platform's data-preparation jobs (``SparkApplication``).

Nothing here calls Pulumi: `SparkSpec` validates the stack-file section
``uae-gpu-platform:spark``, and the functions build the Helm values and the objects the
thin `component` registers (and the tests check against the upstream chart and CRD).

What runs:

- **The operator**: the upstream ``spark-operator`` chart (pinned below) in its own
  ``restricted`` namespace on the system pool. It watches exactly the jobs' namespaces,
  one per team with a job (``spark-<team>``, `jobs_namespace`), and runs
  ``spark-submit`` for each ``SparkApplication`` there. A team's job, its driver and its
  executors run only in that namespace, so no team's driver can see or touch another
  team's pods, ConfigMaps or Secrets. Not the team's own ``team-<team>``: the team's
  group edits everything there, and the job runs the platform's code with the rights
  of the team's Spark role (it writes the record of what ran), which the team must not
  rewrite or borrow; its quota and Kueue queue are sized for training, not Spark. The
  chart creates no ServiceAccount and no RBAC for the jobs (its Role would give every
  Spark pod update and patch on pods, Services and volume claims too): the platform
  creates the team's ServiceAccount (``spark-<team>``), without an API token by default,
  and the drivers' Role, in that namespace only.
- **The data-preparation job** (`spark_application`): the data image
  (``workloads/data/Dockerfile``) running ``workloads/data/prepare.py`` with the same
  arguments as ``make data``, its SOURCE and OUT ``s3://`` locations. spark-submit
  starts the driver pod, which creates ``executors`` executor pods on the same CPU pool
  (`driver_role`: the drivers' API rights in their team's namespace). The job itself
  reaches the store with boto3 (`workloads.data.object_store`; no Hadoop S3A in the
  image): the driver lists the raw objects, the executors fetch them, the driver uploads
  the dataset (manifest last, never over an existing object). The containers' command
  (`POD_SCRIPT`) does what Spark's own image entrypoint does for a driver and an
  executor.
- **Where the data is**: on AWS the stack's data bucket in the region, reached through
  the VPC's S3 endpoint with the team's EKS Pod Identity role
  (`modules.aws.spark_access`); on premises the site's S3-compatible object store.
  Per team: raw files under ``teams/<team>/raw/``, datasets under
  ``teams/<team>/datasets/`` (where the team's training role reads them), Spark event
  logs under ``spark-events/<team>/`` (outside the team's own prefix, so a team cannot
  rewrite the record of what ran). Spark writes its event log to the driver's local
  volume and the job uploads it when the session ends, from a Python ``finally``: not
  when the driver is killed outright (OOM kill, eviction, node loss), whose log goes
  with its volume.
  Everything written is SSE-KMS with the stack's key (on premises: the site store's
  key), named in the job's arguments (``--kms-key``).

Versions read at tag v2.5.2 (commit 43afb8bb) of github.com/kubeflow/spark-operator:
``charts/spark-operator-chart/Chart.yaml`` (chart and operator 2.5.2), ``values.yaml``
(the keys set here) and the ``SparkApplication`` CRD (``v1beta2``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

from modules.k8s import netpol, rbac, security
from modules.k8s.common import Manifest, metadata, toleration
from modules.k8s.tenancy.quotas import allocatable_memory_gib, allocatable_vcpus
from modules.k8s.versions import Chart
from modules.pools import POOL_LABEL, NodePoolProfile
from modules.validation import Checker, Problem, TextFormat, bounded

#: The upstream chart (kubeflow/spark-operator ``charts/spark-operator-chart``).
SPARK_OPERATOR = Chart("spark-operator", "2.5.2", "https://kubeflow.github.io/spark-operator")
#: The controller image's tag (the chart's appVersion, set explicitly).
OPERATOR_VERSION = "2.5.2"
#: Upstream controller image (registry, repository).
OPERATOR_IMAGE = ("ghcr.io", "kubeflow/spark-operator/controller")
OPERATOR_NAMESPACE = "spark-operator"
OPERATOR_RELEASE = "spark-operator"
#: A team's Spark namespace is ``<JOBS_NAMESPACE_PREFIX><team>`` (`jobs_namespace`).
JOBS_NAMESPACE_PREFIX = "spark-"
SPARK_API = "sparkoperator.k8s.io/v1beta2"
#: PySpark in the data image (pyproject group ``data``: ``pyspark>=4.3,<4.4``). The job
#: reaches the store with boto3 (`workloads.data.object_store`), not Hadoop's S3A.
SPARK_VERSION = "4.3.0"
#: The data image's repository name (``<registry>/data:<tag>``), its non-root user (the
#: platform's UIDs are 10001 and above, clear of the image's system users and of the
#: 1000 many base images give their first user) and the job's main file inside it
#: (``workloads/data/Dockerfile``: the package under /app; run as a file, its directory
#: comes first on ``sys.path``, and no module there shadows the standard library's).
DATA_REPOSITORY = "data"
RUN_AS = 10001
MAIN_FILE = "local:///app/workloads/data/prepare.py"
#: The container names Spark and the operator expect in the pod templates.
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
#: The driver's scratch space (the dataset before its upload) and its event-log volume;
#: Spark SQL's warehouse, under every pod's writable /tmp (the root is read-only).
WORK_DIR = "/work"
EVENT_LOG_DIR = "/var/spark-events"
WAREHOUSE_DIR = "/tmp/spark-warehouse"
#: The driver's RPC port and every pod's block manager port (Spark on Kubernetes'
#: defaults, set explicitly: the job's NetworkPolicy opens exactly these).
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
#: boto3's variable for the address of an S3-compatible store (on premises).
ENV_ENDPOINT = "AWS_ENDPOINT_URL_S3"
#: Labels of the platform's Spark pods (NetworkPolicies select on them); Spark labels
#: each pod with its role too.
APP_LABEL = "gpuplatform.ae/spark-job"
SPARK_ROLE_LABEL = "spark-role"
#: EKS Pod Identity's agent (a node daemon).
POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT = 80

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
_JOB_NAME = TextFormat(
    _NAME.pattern, "a DNS label of at most 40 characters (lowercase letters, digits, '-')"
)
_TEAM = TextFormat(_NAME.pattern, "a team name")
# A key prefix below the team's raw/ or a dataset name: path segments of safe characters.
_KEY_PATH = re.compile(r"^[A-Za-z0-9_.=-]+(/[A-Za-z0-9_.=-]+)*$")
_DATASET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}$")
_BUCKET = TextFormat(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", "a bucket name")
# \Z, not $: the whole value, no trailing newline.
_STORE_REGION = TextFormat(
    r"^[a-z0-9][a-z0-9-]{0,62}\Z", "the store's region name (lowercase letters, digits, '-')"
)
_SECRET = TextFormat(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
    "a Secret name prefix (lowercase DNS name)",
)
CPU_ROLES = ("preprocess", "cpu-training")


@dataclass(frozen=True)
class SparkJobSpec:
    """One data-preparation job (an entry of ``spark.jobs``): raw files of a team in,
    a versioned dataset of the team out (``python -m workloads.data.prepare``).

    Args:
        name: the SparkApplication's name (a DNS label of at most 40 characters: Spark
            derives its pod names from it).
        team: the team whose data it reads and writes (one of ``teams``).
        source: the raw files, a path below ``teams/<team>/raw/`` (``.txt`` and
            ``.jsonl`` files, as ``make data`` reads them).
        dataset: the dataset's name; it is written to ``teams/<team>/datasets/<dataset>/``
            once (a job refuses to write over an existing dataset: name each version).
        pool: the CPU pool it runs on (role ``preprocess`` or ``cpu-training``); default
            the stack's first ``preprocess`` pool.
        executors: how many executor pods Spark runs (each fits one node of the pool).
        cores: each executor's cores (its Spark task slots).
        memory_gib: each executor JVM's heap.
        python_memory_gib: each executor's memory beyond the heap for the Python
            workers (the objects' fetch and the PII analysis run there; Spark's
            ``memoryOverhead``).
        driver_cores, driver_memory_gib, driver_python_memory_gib: the driver's (it
            lists the objects, gathers the token stream one partition at a time and
            cuts and uploads the shards).
        scratch_gib: each pod's local disk: the driver's dataset before its upload, an
            executor's shuffle and spilled partitions.
        anonymise: replace personal data (default true; false is recorded in the
            dataset's manifest and report: ``--no-anonymise``).
        near_dup: also drop near-duplicates at this Jaccard similarity (``--near-dup``).
        suspend: create the SparkApplication suspended (the operator runs it when
            ``spec.suspend`` is set to false).
    """

    name: str
    team: str
    source: str
    dataset: str
    pool: str = ""
    executors: int = bounded(1, 256, default=2)
    cores: int = bounded(1, 192, default=4)
    memory_gib: int = bounded(1, 1024, default=6)
    python_memory_gib: int = bounded(1, 1024, default=8)
    driver_cores: int = bounded(1, 192, default=2)
    driver_memory_gib: int = bounded(1, 1024, default=4)
    driver_python_memory_gib: int = bounded(1, 1024, default=4)
    scratch_gib: int = bounded(1, 4096, default=50)
    anonymise: bool = True
    near_dup: float | None = None
    suspend: bool = False

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("name", self.name, _JOB_NAME)
        check.matches("team", self.team, _TEAM)
        check.require(
            bool(_KEY_PATH.match(self.source)) and ".." not in self.source.split("/"),
            "source",
            self.source,
            "a path below teams/<team>/raw/ such as corpus/2026-07 (no leading or trailing "
            "slash, no '..')",
        )
        check.require(
            bool(_DATASET.match(self.dataset)) and self.dataset not in (".", ".."),
            "dataset",
            self.dataset,
            "a dataset name of letters, digits, '.', '_', '=', '-' such as corpus-v1",
        )
        check.ranges(self)
        check.require(
            self.near_dup is None or 0.0 < self.near_dup < 1.0,
            "near_dup",
            self.near_dup,
            "a Jaccard similarity between 0 and 1 (e.g. 0.8), or leave unset",
        )
        check.done()


@dataclass(frozen=True)
class ObjectStoreSpec:
    """The site's S3-compatible object store (on premises; ``spark.objectStore``).

    Args:
        endpoint: its HTTPS URL, e.g. ``https://rook-ceph-rgw-data.rook-ceph.svc`` or
            ``https://objects.dc1.example.ae``. A host outside the cluster must be in the
            policy pack's ``allowedObjectStores``, and its address in
            ``onprem.egressCidrs``.
        bucket: the bucket of the platform's data (the same key layout as on AWS).
        region: the store's signing region (Ceph: its zonegroup).
        kms_key_id: the store's key for SSE-KMS (Ceph RGW: a key of its KMS backend).
        credentials_secret_prefix: each team's access key is in the Secret
            ``<prefix>-<team>`` of the team's Spark namespace ``spark-<team>`` (keys
            ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``), created by the site's
            administrators with the store's own policy limited to that team's prefixes.
            Default ``spark-object-store``.
    """

    endpoint: str
    bucket: str
    region: str
    kms_key_id: str
    credentials_secret_prefix: str = "spark-object-store"

    def __post_init__(self) -> None:
        check = Checker()
        parsed = urlparse(self.endpoint)
        check.require(
            parsed.scheme == "https" and bool(parsed.hostname) and parsed.path in ("", "/"),
            "endpoint",
            self.endpoint,
            "an https:// URL of the object store, without a path",
        )
        check.matches("bucket", self.bucket, _BUCKET)
        check.matches("region", self.region, _STORE_REGION)
        check.require(bool(self.kms_key_id.strip()), "kms_key_id", self.kms_key_id, "a key id")
        check.matches("credentials_secret_prefix", self.credentials_secret_prefix, _SECRET)
        check.done()


@dataclass(frozen=True)
class SparkSpec:
    """Spark on the cluster (config key ``uae-gpu-platform:spark``; docs/data.md).

    Args:
        enabled: install the Spark Operator and run the jobs (default false).
        image_tag: tag of the data image (``data`` in the stack's registry; built from
            ``workloads/data/Dockerfile``); never ``latest``.
        registry: on premises, the site registry holding ``data:<tag>``
            (``host[:port][/path]``); AWS stacks use their own ECR repository.
        operator_registry: a registry in the country that mirrors the operator's image
            (its upstream repository path kept under it). Default: on AWS the stack's
            own ECR (its repository created by the stack); on premises
            ``onprem.registry`` where set, else the chart's upstream image, which the
            advisory image rule of the policy pack lists.
        jobs: the data-preparation jobs (`SparkJobSpec`).
        object_store: the site's object store (`ObjectStoreSpec`); on premises only.
    """

    enabled: bool = False
    image_tag: str = "0.1.0"
    registry: str | None = None
    operator_registry: str | None = None
    jobs: tuple[SparkJobSpec, ...] = ()
    object_store: ObjectStoreSpec | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.fixed_image_tag("image_tag", self.image_tag)
        for name in ("registry", "operator_registry"):
            check.registry(name, getattr(self, name))
        names = [job.name for job in self.jobs]
        for index, job in enumerate(self.jobs):
            check.require(
                names.count(job.name) == 1,
                f"jobs[{index}].name",
                job.name,
                "each job needs its own name",
            )
        outputs = [(job.team, job.dataset) for job in self.jobs]
        for index, job in enumerate(self.jobs):
            check.require(
                outputs.count((job.team, job.dataset)) == 1,
                f"jobs[{index}].dataset",
                job.dataset,
                "another job writes the same dataset of this team; a dataset is written once",
            )
        check.done()

    @property
    def teams(self) -> tuple[str, ...]:
        """The teams with a job, in order of first appearance."""
        return tuple(dict.fromkeys(job.team for job in self.jobs))


# -- where the data is --------------------------------------------------------------


def raw_prefix(team: str) -> str:
    """The key prefix of a team's raw files (inside the team's own ``teams/<team>/``)."""
    return f"teams/{team}/raw/"


def datasets_prefix(team: str) -> str:
    """The key prefix of a team's datasets (the team's training role reads them)."""
    return f"teams/{team}/datasets/"


def event_log_prefix(team: str) -> str:
    """The key prefix of a team's Spark event logs (outside the team's prefix)."""
    return f"spark-events/{team}/"


def s3_uri(bucket: str, key: str) -> str:
    """``s3://<bucket>/<key>`` (the data job's boto3 locations)."""
    return f"s3://{bucket}/{key}"


@dataclass(frozen=True)
class Store:
    """The object store of this stack, as the jobs reach it (from the composition).

    Args:
        on_aws: the stack's data bucket through Pod Identity (true), or the site's store
            with per-team keys from Secrets.
        bucket: the bucket's name (on AWS a Pulumi output, known at preview).
        region: the bucket's region (AWS) or the store's signing region.
        endpoint: the S3 endpoint: ``s3.<region>.amazonaws.com`` (the VPC's S3 interface
            endpoint answers for it), or the site store's https URL.
        kms_key: the key every written object is encrypted with (on AWS the stack's
            storage key ARN, a Pulumi output).
        credentials_secret_prefix: on premises, `ObjectStoreSpec.credentials_secret_prefix`.
    """

    on_aws: bool
    bucket: Any
    region: str
    endpoint: str
    kms_key: Any
    credentials_secret_prefix: str = ""


def aws_store(bucket: Any, region: str, kms_key: Any) -> Store:
    return Store(
        on_aws=True,
        bucket=bucket,
        region=region,
        endpoint=f"s3.{region}.amazonaws.com",
        kms_key=kms_key,
    )


def onprem_store(spec: ObjectStoreSpec) -> Store:
    return Store(
        on_aws=False,
        bucket=spec.bucket,
        region=spec.region,
        endpoint=spec.endpoint,
        kms_key=spec.kms_key_id,
        credentials_secret_prefix=spec.credentials_secret_prefix,
    )


@dataclass(frozen=True)
class Locations:
    """A job's three places in the store (``s3://`` URIs; Pulumi outputs on AWS): the
    raw files, the dataset, and where its Spark event log is uploaded."""

    input_uri: Any
    output_uri: Any
    event_log_uri: Any


def location_keys(job: SparkJobSpec) -> tuple[str, str, str]:
    """The keys of the job's input, output and event-log directory in the bucket."""
    return (
        f"{raw_prefix(job.team)}{job.source}/",
        f"{datasets_prefix(job.team)}{job.dataset}/",
        event_log_prefix(job.team),
    )


def locations(job: SparkJobSpec, bucket: str) -> Locations:
    """The job's locations in ``bucket`` (plain strings)."""
    return Locations(*(s3_uri(bucket, key) for key in location_keys(job)))


def store_env(store: Store, team: str) -> list[Manifest]:
    """What boto3 needs in every pod of a job (driver and executors): the region,
    always (the job refuses to fall back to S3's global endpoint), and on premises the
    store's address and the team's key from its Secret. On AWS the endpoint is the
    region's (``s3.<region>.amazonaws.com``, answered by the VPC's S3 interface
    endpoint) and the credentials come from EKS Pod Identity, which the agent injects."""
    variables: list[Manifest] = [
        {"name": "AWS_REGION", "value": store.region},
        {"name": "AWS_DEFAULT_REGION", "value": store.region},
    ]
    if not store.on_aws:
        variables.append({"name": ENV_ENDPOINT, "value": store.endpoint})
        secret = f"{store.credentials_secret_prefix}-{team}"
        variables += [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}}
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        ]
    return variables


def spark_conf(job: SparkJobSpec) -> dict[str, Any]:
    """The application's ``sparkConf``: event logs on, to the driver's local volume
    (`EVENT_LOG_DIR`; the job uploads them SSE-KMS to the store when it ends:
    ``--event-log-uri``), no UI, fixed driver and block manager ports (the job's
    NetworkPolicy opens them between its own pods), a static set of executors,
    shuffles cut for the executors' cores, and Spark SQL's warehouse (where the session
    catalog makes its default database's folder) in the pods' writable /tmp: by default
    it is the working directory, the image's read-only /app."""
    return {
        "spark.sql.warehouse.dir": f"file://{WAREHOUSE_DIR}",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{EVENT_LOG_DIR}",
        "spark.eventLog.compress": "true",
        "spark.ui.enabled": "false",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.dynamicAllocation.enabled": "false",
        "spark.kubernetes.executor.deleteOnTermination": "true",
        "spark.sql.shuffle.partitions": str(max(2, 2 * job.executors * job.cores)),
    }


#: The command of the driver's and the executors' containers (bash; Spark's arguments
#: follow as ``$@``): what Spark's own image entrypoint (apache/spark-docker,
#: ``entrypoint.sh``) does for ``driver`` and ``executor``, since the data image is not
#: built from Spark's. The driver runs ``spark-submit`` in client mode inside its pod
#: (the operator submitted it in cluster mode); an executor runs
#: ``KubernetesExecutorBackend`` on the JVM with Spark's options (``SPARK_JAVA_OPT_*``)
#: and PySpark's jars. Nothing is staged: the job reads and writes the store itself.
#: As upstream's ``entrypoint.sh`` (every release from 3.5.0 to 4.2.0-preview5; the
#: same template): the options in bash's ``${!SPARK_JAVA_OPT_@}`` order (by name, so
#: ``_10`` before ``_2``; the numeric ``sort -t_ -k4 -n`` was Spark 2.x's), and the class
#: path ``$SPARK_CONF_DIR`` (where Spark mounts the executor's ConfigMap; else
#: ``$SPARK_HOME/conf``), then ``$HADOOP_CONF_DIR`` where set, the jars and ``$PWD``.
POD_SCRIPT = f"""\
set -euo pipefail
role=${{1:-}}
shift || true
case "$role" in
  driver)
    mkdir -p {EVENT_LOG_DIR}
    exec spark-submit --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \\
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \\
      --deploy-mode client "$@"
    ;;
  executor)
    opts=()
    for name in "${{!SPARK_JAVA_OPT_@}}"; do opts+=("${{!name}}"); done
    classpath="${{SPARK_CONF_DIR-$SPARK_HOME/conf}}:${{HADOOP_CONF_DIR+$HADOOP_CONF_DIR:}}"
    exec "$JAVA_HOME/bin/java" "${{opts[@]}}" \\
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \\
      -cp "$classpath$SPARK_HOME/jars/*:$PWD" \\
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \\
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \\
      --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \\
      --hostname "$SPARK_EXECUTOR_POD_IP" \\
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \\
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    echo "spark-pod: expected Spark's driver or executor arguments, got: $role $*" >&2
    exit 2
    ;;
esac
"""


def job_arguments(job: SparkJobSpec, where: Locations, kms_key: Any) -> list[Any]:
    """``prepare.py``'s arguments: the raw files and the dataset in the store, the
    dataset's name, the key of everything written, where the event log goes, the
    driver's scratch directory, and the job's settings (as ``make data`` takes them)."""
    arguments = [
        where.input_uri, "--out", where.output_uri, "--name", job.dataset,
        "--kms-key", kms_key, "--event-log-uri", where.event_log_uri, "--scratch", WORK_DIR,
    ]  # fmt: skip
    if not job.anonymise:
        arguments.append("--no-anonymise")
    if job.near_dup is not None:
        arguments += ["--near-dup", str(job.near_dup)]
    return arguments


# -- the pods ----------------------------------------------------------------------------


def restricted_container() -> Manifest:
    """The restricted Pod Security profile for one container (the data image's user)."""
    return security.restricted_container(RUN_AS)


def pod_security() -> Manifest:
    return security.restricted_pod(RUN_AS)


def jobs_namespace(team: str) -> str:
    """The namespace of a team's Spark jobs (its SparkApplications, drivers and
    executors, its ServiceAccount and the drivers' Role): that team's only."""
    return f"{JOBS_NAMESPACE_PREFIX}{team}"


def jobs_namespaces(spec: SparkSpec) -> tuple[str, ...]:
    """The namespaces the operator watches: one per team with a job."""
    return tuple(jobs_namespace(team) for team in spec.teams)


def service_account_name(team: str) -> str:
    """The ServiceAccount of a team's Spark jobs (its Pod Identity role on AWS)."""
    return f"spark-{team}"


def service_account(team: str) -> Manifest:
    """A team's ServiceAccount in its namespace, with no API token by default: only the
    driver pod mounts one (it creates the executor pods, `driver_role`); Pod Identity
    brings its own token."""
    meta = metadata(service_account_name(team), jobs_namespace(team))
    return rbac.service_account(meta, mount_token=False)


#: What a driver does with the Kubernetes API (Spark on Kubernetes: it creates, watches
#: and deletes its executor pods and the ConfigMap of their settings).
DRIVER_ROLE = "spark-driver"
DRIVER_RULES = (
    {
        "apiGroups": [""],
        "resources": ["pods", "configmaps"],
        "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"],
    },
)


def driver_role(team: str) -> Manifest:
    """The drivers' Role in the team's namespace (`DRIVER_RULES`, nothing cluster-wide,
    nothing in any other namespace)."""
    return rbac.role(metadata(DRIVER_ROLE, jobs_namespace(team)), DRIVER_RULES)


def driver_role_binding(team: str) -> Manifest:
    """The team's ServiceAccount bound to the team's `driver_role` (both in the team's
    namespace; the binding names no other subject)."""
    ns = jobs_namespace(team)
    subjects = rbac.service_account_subjects(service_account_name(team), [ns])
    return rbac.role_binding(metadata(DRIVER_ROLE, ns), DRIVER_ROLE, subjects)


def _placement(pool: NodePoolProfile) -> Manifest:
    return {
        "nodeSelector": {POOL_LABEL: pool.name},
        "tolerations": [toleration(t) for t in pool.taints],
    }


def _pod_labels(job: SparkJobSpec) -> dict[str, str]:
    return {APP_LABEL: job.name, "gpuplatform.ae/team": job.team}


#: Why a Spark pod has no probes (checkov CKV_K8S_8, CKV_K8S_9): a batch pod that serves
#: nothing; the operator follows it by its exit, and Spark the executors by heartbeats.
BATCH_POD_REASONS = {
    "CKV_K8S_8": "a Spark batch pod serves nothing to probe; the operator follows its exit "
    "and the driver its executors' heartbeats",
    "CKV_K8S_9": "a Spark batch pod receives no Service traffic, so readiness has no effect",
}


def driver_template(job: SparkJobSpec, store: Store, pool: NodePoolProfile, image: str) -> Manifest:
    """The driver's pod template: the pod script, the store's settings, the CPU pool,
    the restricted security context, the scratch volume (the dataset before upload) and
    the event-log volume, and an API token (the driver creates its executors).

    The operator's webhook leaves a pod with a template alone, so everything the pod
    needs is here. Spark keeps the template's command and adds its own arguments, and
    sets the container's CPU and memory from ``driver.cores`` and ``driver.memory`` plus
    ``memoryOverhead`` (the same amounts as below, written so the template reads whole).
    """
    memory = f"{(job.driver_memory_gib + job.driver_python_memory_gib) * 1024}Mi"
    # The scratch volume, /tmp and the event log count against the node's disk.
    disk = f"{job.scratch_gib + 4}Gi"
    return _pod_template(
        job,
        pool,
        (DRIVER_CONTAINER, image, store),
        {"cpu": str(job.driver_cores), "memory": memory, "ephemeral-storage": disk},
        [
            ("work", WORK_DIR, f"{job.scratch_gib}Gi"),
            ("tmp", "/tmp", "2Gi"),
            ("events", EVENT_LOG_DIR, "2Gi"),
        ],
        # The driver calls the API server to run its executors (`driver_role`).
        api_token=True,
    )


def executor_template(
    job: SparkJobSpec, store: Store, pool: NodePoolProfile, image: str
) -> Manifest:
    """The executors' pod template: the same pool, security, store settings and
    ServiceAccount (Pod Identity) as the driver, without an API token; Spark adds the
    executors' local directories (shuffle and cached partitions) as emptyDir volumes,
    which the ephemeral-storage request covers."""
    memory = f"{(job.memory_gib + job.python_memory_gib) * 1024}Mi"
    disk = f"{job.scratch_gib + 2}Gi"
    return _pod_template(
        job,
        pool,
        (EXECUTOR_CONTAINER, image, store),
        {"cpu": str(job.cores), "memory": memory, "ephemeral-storage": disk},
        [("tmp", "/tmp", "2Gi")],
        api_token=False,
    )


def _pod_template(
    job: SparkJobSpec,
    pool: NodePoolProfile,
    container: tuple[str, str, Store],
    amounts: Mapping[str, str],
    disks: Sequence[tuple[str, str, str]],
    *,
    api_token: bool,
) -> Manifest:
    """A pod template of the job: its labels and the team's ServiceAccount, the
    restricted security context, the CPU pool, and one container (name, image, the
    store it reads and writes) that runs the pod script with ``amounts`` as its requests
    and limits and an emptyDir per disk (name, mount path, size limit)."""
    name, image, store = container
    reasons = dict(BATCH_POD_REASONS)
    if api_token:
        reasons["CKV_K8S_38"] = "Spark's driver creates, watches and deletes its executor pods"
    return {
        # Spark gives the template's annotations to the pod.
        "metadata": {
            "labels": _pod_labels(job),
            "annotations": security.scanner_exceptions(reasons),
        },
        "spec": {
            "serviceAccountName": service_account_name(job.team),
            "automountServiceAccountToken": api_token,
            "securityContext": pod_security(),
            **_placement(pool),
            "containers": [
                {
                    "name": name,
                    "image": image,
                    "command": ["/bin/bash", "-c", POD_SCRIPT, "spark-pod"],
                    "env": [*store_env(store, job.team), {"name": "HOME", "value": "/tmp"}],
                    "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                    "securityContext": restricted_container(),
                    "volumeMounts": [{"name": disk, "mountPath": path} for disk, path, _ in disks],
                }
            ],
            "volumes": [{"name": disk, "emptyDir": {"sizeLimit": size}} for disk, _, size in disks],
        },
    }


def spark_application(
    job: SparkJobSpec, store: Store, pool: NodePoolProfile, image: str, where: Locations
) -> Manifest:
    """The job's ``SparkApplication`` (``sparkoperator.k8s.io/v1beta2``): a driver and
    ``executors`` executor pods on the job's CPU pool."""
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": metadata(job.name, jobs_namespace(job.team), labels=_pod_labels(job)),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "sparkVersion": SPARK_VERSION,
            "image": image,
            "imagePullPolicy": "Always",
            "mainApplicationFile": MAIN_FILE,
            "arguments": job_arguments(job, where, store.kms_key),
            "sparkConf": spark_conf(job),
            # A failed run is looked at, not retried: its input or settings need a fix.
            "restartPolicy": {"type": "Never"},
            "suspend": job.suspend,
            "driver": {
                "cores": job.driver_cores,
                "coreRequest": str(job.driver_cores),
                "coreLimit": str(job.driver_cores),
                "memory": f"{job.driver_memory_gib}g",
                "memoryOverhead": f"{job.driver_python_memory_gib}g",
                "serviceAccount": service_account_name(job.team),
                "labels": _pod_labels(job),
                "template": driver_template(job, store, pool, image),
            },
            "executor": {
                "instances": job.executors,
                "cores": job.cores,
                "coreRequest": str(job.cores),
                "coreLimit": str(job.cores),
                "memory": f"{job.memory_gib}g",
                "memoryOverhead": f"{job.python_memory_gib}g",
                "deleteOnTermination": True,
                "serviceAccount": service_account_name(job.team),
                "labels": _pod_labels(job),
                "template": executor_template(job, store, pool, image),
            },
        },
    }


# -- where the jobs run -----------------------------------------------------------------


def job_pool(job: SparkJobSpec, pools: Sequence[NodePoolProfile]) -> NodePoolProfile | None:
    """The job's pool: the one it names, else the stack's first CPU pool (``preprocess``
    before ``cpu-training``, in the order of `CPU_ROLES`); None where there is none."""
    if job.pool:
        found = next((p for p in pools if p.name == job.pool), None)
        return found if found is not None and found.role in CPU_ROLES else None
    for role in CPU_ROLES:
        for pool in pools:
            if pool.role == role:
                return pool
    return None


def config_problems(
    spec: SparkSpec, *, onprem: bool, teams: Sequence[str], pools: Sequence[tuple[str, str]]
) -> list[Problem]:
    """What the rest of the stack file says about the section (fields under ``spark.``):
    the site's store and registry where the stack needs them, each job's team, and a
    CPU pool (``pools``: each pool's name and role) for each job."""
    if not spec.enabled:
        return []
    problems: list[Problem] = []
    site = {"object_store": spec.object_store, "registry": spec.registry}
    for name, value in site.items():
        if onprem and value is None:
            problems.append(Problem(f"spark.{name}", None, "an onprem stack names the site's"))
        elif not onprem and value is not None:
            problems.append(
                Problem(
                    f"spark.{name}",
                    "(given)",
                    "leave unset on AWS: the stack's data bucket and ECR repository are used",
                )
            )
    if not spec.jobs:
        # The chart reads no job namespace as every namespace, with cluster-wide rights.
        problems.append(Problem("spark.jobs", None, "at least one job (or leave spark disabled)"))
    roles = dict(pools)
    cpu_pools = [name for name, role in pools if role in CPU_ROLES]
    default = next((name for want in CPU_ROLES for name, role in pools if role == want), "")
    for index, job in enumerate(spec.jobs):
        if job.team not in teams:
            problems.append(
                Problem(
                    f"spark.jobs[{index}].team",
                    job.team,
                    f"must be one of the teams: {', '.join(teams) or '(none declared)'}",
                )
            )
        if jobs_namespace(job.team) == OPERATOR_NAMESPACE:
            problems.append(
                Problem(
                    f"spark.jobs[{index}].team",
                    job.team,
                    f"its Spark namespace would be the operator's ({OPERATOR_NAMESPACE}); "
                    "give the job another team",
                )
            )
        # A stack always declares pools: none means that section did not parse, and
        # was reported already.
        if pools and roles.get(job.pool or default) not in CPU_ROLES:
            problems.append(
                Problem(
                    f"spark.jobs[{index}].pool",
                    job.pool or None,
                    "a CPU pool (role preprocess or cpu-training): "
                    + (", ".join(cpu_pools) or "the stack declares none; add one"),
                )
            )
    return problems


class NamedPool(Protocol):
    """A pool as the stack file declares it (``nodePools`` or ``onpremNodePools``)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...


def stack_problems(
    spec: SparkSpec, target: str, teams: Sequence[str], *pool_groups: Sequence[NamedPool]
) -> list[Problem]:
    """`config_problems` over the stack's pools (``pool_groups``: ``nodePools`` and
    ``onpremNodePools``), and on premises (where the stack file declares the nodes'
    sizes) `sizing_problems`; AWS pools are sized from the catalog (stacks/catalog.py)."""
    pools = [pool for group in pool_groups for pool in group]
    problems = config_problems(
        spec, onprem=target == "onprem", teams=teams, pools=[(p.name, p.role) for p in pools]
    )
    profiles = [p for p in pools if isinstance(p, NodePoolProfile)]
    if spec.enabled and not problems and target == "onprem" and len(profiles) == len(pools):
        problems += sizing_problems(spec, profiles)
    return problems


def sizing_problems(spec: SparkSpec, pools: Sequence[NodePoolProfile]) -> list[Problem]:
    """Each job's executor, and its driver, fits one node of its pool (fields under
    ``spark.``)."""
    problems: list[Problem] = []
    for index, job in enumerate(spec.jobs):
        pool = job_pool(job, pools)
        if pool is None:
            continue  # `config_problems` names it
        where = f"what one node of pool {pool.name} offers"
        pods = (
            ("", job.cores, job.memory_gib + job.python_memory_gib, "memoryGib + pythonMemoryGib"),
            (
                "driver_",
                job.driver_cores,
                job.driver_memory_gib + job.driver_python_memory_gib,
                "driverMemoryGib + driverPythonMemoryGib",
            ),
        )
        for prefix, cores, memory, names in pods:
            if cores > allocatable_vcpus(pool):
                problems.append(
                    Problem(
                        f"spark.jobs[{index}].{prefix}cores",
                        cores,
                        f"at most {allocatable_vcpus(pool)}, {where}",
                    )
                )
            if memory > allocatable_memory_gib(pool):
                problems.append(
                    Problem(
                        f"spark.jobs[{index}].{prefix}memory_gib",
                        memory,
                        f"{names} at most {allocatable_memory_gib(pool)} GiB, {where}",
                    )
                )
    return problems


# -- the operator ---------------------------------------------------------------------


def operator_values(spec: SparkSpec, node_selector: dict[str, str]) -> Manifest:
    """Values of the ``spark-operator`` chart (every key exists in its values.yaml).

    The controller and webhook run on the system pool with bounded resources; the
    operator watches exactly the teams' Spark namespaces (`jobs_namespaces`; the chart
    gives the controller and the webhook a Role in each, and no ClusterRole over pods);
    the chart creates no ServiceAccount or RBAC for the jobs (the platform's own, per
    team: `service_account`, `driver_role`); no Spark UI Service; the controller's
    metrics stay on (no PodMonitor: Prometheus is not told to scrape it).

    Raises:
        ValueError: no job, hence no namespace: the chart reads an empty
            ``spark.jobNamespaces`` as every namespace of the cluster, with
            cluster-wide rights (`config_problems` refuses such a section first).
    """
    namespaces = list(jobs_namespaces(spec))
    if not namespaces:
        raise ValueError("the Spark Operator needs at least one job namespace (spark.jobs)")
    # The image written out whole, so the plan (and the pack's image rule) shows it.
    registry, repository = OPERATOR_IMAGE
    image: Manifest = {
        "registry": spec.operator_registry or registry,
        "repository": repository,
        "tag": OPERATOR_VERSION,
        # Pulled at each start, as every container the platform registers
        # (`modules.k8s.security.pull_always`; Helm values do not pass through it).
        "pullPolicy": "Always",
    }
    small = {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }
    return {
        "image": image,
        "controller": {
            "replicas": 1,
            "nodeSelector": dict(node_selector),
            # Each submission runs spark-submit (a JVM) inside the controller's pod.
            "resources": {
                "requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "1Gi"},
            },
            "uiService": {"enable": False},
            "uiIngress": {"enable": False},
        },
        "webhook": {
            "enable": True,
            "nodeSelector": dict(node_selector),
            "resources": small,
        },
        "spark": {
            "jobNamespaces": namespaces,
            "serviceAccount": {"create": False},
            "rbac": {"create": False},
        },
        "prometheus": {"metrics": {"enable": True}, "podMonitor": {"create": False}},
    }


# -- network ----------------------------------------------------------------------------

#: The webhook's pods (the chart's selector labels for release `OPERATOR_RELEASE`) and
#: the port the API server calls them on (the chart's ``webhook.port``).
WEBHOOK_LABELS = {
    "app.kubernetes.io/name": "spark-operator",
    "app.kubernetes.io/instance": OPERATOR_RELEASE,
    "app.kubernetes.io/component": "webhook",
}
WEBHOOK_PORT = 9443


def in_cluster_service(endpoint: str) -> tuple[str, int] | None:
    """(namespace, port) of an endpoint that is a Service of this cluster
    (``<service>.<namespace>.svc[.cluster.local]``), else None."""
    parsed = urlparse(endpoint)
    host = parsed.hostname or ""
    parts = host.split(".")
    in_cluster = len(parts) == 3 or host.endswith(".svc.cluster.local")
    if len(parts) >= 3 and parts[2] == "svc" and in_cluster:
        return parts[1], parsed.port or 443
    return None


def operator_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """``spark-operator``: default deny, DNS, the API server (the controller watches and
    submits; spark-submit runs in its pod), and the API server's calls to the webhook."""
    return [
        *netpol.baseline(OPERATOR_NAMESPACE, network),
        netpol.allow_from_api_server(
            OPERATOR_NAMESPACE, network, netpol.tcp(WEBHOOK_PORT), WEBHOOK_LABELS
        ),
    ]


def network_policies(
    team: str,
    store: Store,
    *,
    network: netpol.ClusterNetwork,
    jobs: Sequence[SparkJobSpec] = (),
    vpc_cidr: Any = None,
    egress_cidrs: tuple[str, ...] = (),
) -> list[Manifest]:
    """A team's Spark namespace (`jobs_namespace`): default deny, DNS, and

    - the object store, from every pod of a job: on AWS the Pod Identity agent and
      HTTPS to the VPC (its S3 interface endpoint answers for
      ``s3.<region>.amazonaws.com``); on premises HTTPS to the site's egress CIDRs (its
      store) or the store's Service in the cluster;
    - the API server, from the drivers only (they create their executor pods);
    - per job of the team (``jobs`` of other teams are left out), its own pods to each
      other on the driver and block manager ports (the executors register with the
      driver and fetch each other's shuffle blocks); no other pod may connect to a job,
      not even another job of the same team.
    """
    ns = jobs_namespace(team)
    egress: list[Manifest] = []
    if store.on_aws:
        egress.append(
            {
                "to": netpol.cidr_peers([POD_IDENTITY_AGENT_CIDR]),
                "ports": netpol.tcp(POD_IDENTITY_AGENT_PORT),
            }
        )
        if vpc_cidr is not None:
            egress.append({"to": netpol.cidr_peers([vpc_cidr]), "ports": netpol.tcp(443)})
    else:
        port = urlparse(store.endpoint).port or 443
        service = in_cluster_service(store.endpoint)
        if service is not None:
            namespace, port = service
            egress.append({"to": [netpol.namespace_peer(namespace)], "ports": netpol.tcp(port)})
        if egress_cidrs:
            egress.append({"to": netpol.cidr_peers(egress_cidrs), "ports": netpol.tcp(port)})
    policies = [
        netpol.default_deny(ns),
        netpol.allow_dns(ns),
        netpol.policy(
            ns,
            "allow-object-store",
            {
                "podSelector": {"matchExpressions": [{"key": APP_LABEL, "operator": "Exists"}]},
                "policyTypes": ["Egress"],
                "egress": egress,
            },
        ),
        netpol.allow_api_server(
            ns, network, {SPARK_ROLE_LABEL: "driver"}, name="allow-drivers-api-server"
        ),
    ]
    for job in (job for job in jobs if job.team == team):
        policies.append(
            netpol.allow_within(
                ns,
                netpol.tcp(DRIVER_PORT, BLOCK_MANAGER_PORT),
                {APP_LABEL: job.name},
                name=f"allow-within-{job.name}",
            )
        )
    return policies


# -- the whole --------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkJobPlacement:
    """One job with the pool it runs on (resolved by the composition)."""

    job: SparkJobSpec
    pool: NodePoolProfile


@dataclass(frozen=True)
class SparkInputs:
    """What the Spark component needs from the stack.

    Args:
        spec: the validated settings.
        jobs: each job with its pool.
        store: the object store (`aws_store` or `onprem_store`).
        image: the data image, ``<registry>/data:<tag>``.
        kubernetes_version: the cluster's minor version (Pod Security labels).
        network: where the API server and the nodes are (the operator's policies).
        vpc_cidr: the VPC's CIDR (AWS): HTTPS egress to its S3 endpoint.
        egress_cidrs: the site's egress CIDRs (on premises).
        node_selector: the system pool's labels (the operator).
    """

    spec: SparkSpec
    jobs: tuple[SparkJobPlacement, ...]
    store: Store
    image: str
    kubernetes_version: str
    network: netpol.ClusterNetwork
    vpc_cidr: Any = None
    egress_cidrs: tuple[str, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)


def data_image(registry: str, tag: str) -> str:
    """The data image in ``registry``."""
    return f"{registry}/{DATA_REPOSITORY}:{tag}"
