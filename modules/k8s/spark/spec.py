"""Typed settings and pure manifests of Spark on the cluster: the Kubeflow Spark
Operator and the platform's data-preparation jobs (``SparkApplication``).

Nothing here calls Pulumi: `SparkSpec` validates the stack-file section
``uae-gpu-platform:spark``, and the functions build the Helm values and the objects the
thin `component` registers (and the tests check against the upstream chart and CRD).

What runs:

- **The operator**: the upstream ``spark-operator`` chart (pinned below) in its own
  ``restricted`` namespace on the system pool. It watches one namespace, ``spark-jobs``,
  and runs ``spark-submit`` for each ``SparkApplication`` there. The chart creates no
  ServiceAccount and no RBAC for the jobs: the platform creates one ServiceAccount per
  team (``spark-<team>``), without an API token, because the job needs none (below).
- **The data-preparation job** (`spark_application`): the data image
  (``workloads/data/Dockerfile``) running ``workloads/data/prepare.py`` with the same
  arguments as ``make data``. That job starts Spark itself in local mode
  (``local[N]``, N = the driver's cores) and reads and writes local paths, so on the
  cluster it runs whole in the driver pod, on one node of a CPU pool, and Spark starts
  no executor. Around it the driver container's command (set through the driver's pod
  template; `STAGE_SCRIPT`) stages the raw files in from the object store, runs the
  driver exactly as Spark's own image entrypoint would, and stages the dataset out,
  with Hadoop's S3A file system and the same settings Spark has, refusing to write
  over a dataset that exists.
- **Where the data is**: on AWS the stack's data bucket in the region, reached through
  the VPC's S3 endpoint with the team's EKS Pod Identity role
  (`modules.aws.spark_access`); on premises the site's S3-compatible object store.
  Per team: raw files under ``teams/<team>/raw/``, datasets under
  ``teams/<team>/datasets/`` (where the team's training role reads them), Spark event
  logs under ``spark-events/<team>/`` (outside the team's own prefix, so a team cannot
  rewrite the record of what ran). Everything written is SSE-KMS with the stack's key
  (on premises: the site store's key), set in ``sparkConf``.

Versions read at tag v2.5.2 (commit 43afb8bb) of github.com/kubeflow/spark-operator:
``charts/spark-operator-chart/Chart.yaml`` (chart and operator 2.5.2), ``values.yaml``
(the keys set here) and the ``SparkApplication`` CRD (``v1beta2``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

from modules.k8s import netpol, security
from modules.k8s.common import Manifest, metadata, toleration
from modules.k8s.tenancy.quotas import allocatable_memory_gib, allocatable_vcpus
from modules.k8s.versions import Chart
from modules.pools import POOL_LABEL, NodePoolProfile
from modules.validation import Checker, Problem

#: The upstream chart (kubeflow/spark-operator ``charts/spark-operator-chart``).
SPARK_OPERATOR = Chart("spark-operator", "2.5.2", "https://kubeflow.github.io/spark-operator")
#: The controller image's tag (the chart's appVersion, set explicitly).
OPERATOR_VERSION = "2.5.2"
#: Upstream controller image (registry, repository).
OPERATOR_IMAGE = ("ghcr.io", "kubeflow/spark-operator/controller")
OPERATOR_NAMESPACE = "spark-operator"
OPERATOR_RELEASE = "spark-operator"
#: The one namespace the operator watches: the platform's Spark jobs.
JOBS_NAMESPACE = "spark-jobs"
SPARK_API = "sparkoperator.k8s.io/v1beta2"
#: PySpark in the data image (pyproject group ``data``: ``pyspark>=4.3,<4.4``) and the
#: Hadoop client it bundles (``pyspark/jars/hadoop-client-api-3.5.0.jar``); S3A needs
#: ``hadoop-aws`` of the same Hadoop version in the image (docs/data.md).
SPARK_VERSION = "4.3.0"
HADOOP_VERSION = "3.5.0"
#: The data image's repository name (``<registry>/data:<tag>``), its non-root user and
#: the job's main file inside it.
DATA_REPOSITORY = "data"
RUN_AS = 1000
#: The application's main file: ``python -m workloads.data.prepare`` as a file Spark can
#: run. Spark's PythonRunner runs a file, which puts the file's directory first on
#: ``sys.path``; ``workloads/data/prepare.py`` itself would then find the package's
#: ``tokenize.py`` in place of the standard library's. This file, from a ConfigMap in a
#: directory of its own, runs the module instead, with Spark's arguments.
MAIN_CONFIGMAP = "data-prepare-main"
MAIN_DIR = "/opt/spark-main"
MAIN_FILE = f"local://{MAIN_DIR}/main.py"
MAIN_SOURCE = (
    '"""python -m workloads.data.prepare, with the arguments Spark passes."""\n'
    "import runpy\n\n"
    'runpy.run_module("workloads.data.prepare", run_name="__main__", alter_sys=True)\n'
)
#: The container names Spark and the operator expect in the pod templates.
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
#: Scratch space of the driver pod: the staged raw files and the written dataset.
WORK_DIR = "/work"
INPUT_DIR = f"{WORK_DIR}/input"
OUTPUT_DIR = f"{WORK_DIR}/output"
#: Environment variables the stage script reads (the policy pack reads them too).
ENV_INPUT = "DATA_INPUT_URI"
ENV_OUTPUT = "DATA_OUTPUT_URI"
ENV_EVENT_LOG = "SPARK_EVENT_LOG_DIR"
#: Labels of the platform's Spark pods (NetworkPolicies select on them).
APP_LABEL = "gpuplatform.ae/spark-job"
#: EKS Pod Identity's agent (a node daemon) and the S3 client classes of each site.
POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
POD_IDENTITY_AGENT_PORT = 80
AWS_CREDENTIALS_PROVIDER = "software.amazon.awssdk.auth.credentials.ContainerCredentialsProvider"
ENV_CREDENTIALS_PROVIDER = (
    "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
)
#: Server-side encryption every object the job writes gets (S3A's setting).
ENCRYPTION_ALGORITHM = "SSE-KMS"

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REGISTRY = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$")
# A key prefix below the team's raw/ or a dataset name: path segments of safe characters.
_KEY_PATH = re.compile(r"^[A-Za-z0-9_.=-]+(/[A-Za-z0-9_.=-]+)*$")
_DATASET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SECRET = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
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
        cores: the driver's cores, which are the job's Spark workers (``local[cores]``).
        memory_gib: the driver JVM's heap.
        python_memory_gib: memory beyond the heap for the Python workers (PII analysis
            runs there; Spark's ``memoryOverhead``).
        scratch_gib: the pod's scratch volume for the staged input and the dataset.
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
    cores: int = 4
    memory_gib: int = 6
    python_memory_gib: int = 8
    scratch_gib: int = 50
    anonymise: bool = True
    near_dup: float | None = None
    suspend: bool = False

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_NAME.match(self.name)),
            "name",
            self.name,
            "a DNS label of at most 40 characters (lowercase letters, digits, '-')",
        )
        check.require(bool(_NAME.match(self.team)), "team", self.team, "a team name")
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
        ranges = {
            "cores": (1, 192),
            "memory_gib": (1, 1024),
            "python_memory_gib": (1, 1024),
            "scratch_gib": (1, 4096),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            check.require(low <= value <= high, name, value, f"use {low} to {high}")
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
            ``<prefix>-<team>`` of ``spark-jobs`` (keys ``AWS_ACCESS_KEY_ID`` and
            ``AWS_SECRET_ACCESS_KEY``), created by the site's administrators with the
            store's own policy limited to that team's prefixes. Default
            ``spark-object-store``.
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
        check.require(bool(_BUCKET.match(self.bucket)), "bucket", self.bucket, "a bucket name")
        check.require(
            bool(re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", self.region)),
            "region",
            self.region,
            "the store's region name (lowercase letters, digits, '-')",
        )
        check.require(bool(self.kms_key_id.strip()), "kms_key_id", self.kms_key_id, "a key id")
        check.require(
            bool(_SECRET.match(self.credentials_secret_prefix)),
            "credentials_secret_prefix",
            self.credentials_secret_prefix,
            "a Secret name prefix (lowercase DNS name)",
        )
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
            (its upstream repository path kept under it). Default none: the chart's
            upstream image, which the advisory image rule of the policy pack lists.
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
        check.require(
            bool(_TAG.match(self.image_tag)) and self.image_tag != "latest",
            "image_tag",
            self.image_tag,
            "pin an immutable tag such as 0.1.0, not latest",
        )
        for name in ("registry", "operator_registry"):
            value = getattr(self, name)
            check.require(
                value is None or bool(_REGISTRY.match(value)),
                name,
                value,
                "host[:port][/path] of a registry, lowercase, no scheme and no trailing slash",
            )
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


def s3a_uri(bucket: str, key: str) -> str:
    """``s3a://<bucket>/<key>``."""
    return f"s3a://{bucket}/{key}"


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
    """A job's three places in the store (``s3a://`` URIs; Pulumi outputs on AWS)."""

    input_uri: Any
    output_uri: Any
    event_log_dir: Any


def location_keys(job: SparkJobSpec) -> tuple[str, str, str]:
    """The keys of the job's input, output and event-log directory in the bucket."""
    return (
        f"{raw_prefix(job.team)}{job.source}/",
        f"{datasets_prefix(job.team)}{job.dataset}/",
        event_log_prefix(job.team),
    )


def locations(job: SparkJobSpec, bucket: str) -> Locations:
    """The job's locations in ``bucket`` (plain strings)."""
    return Locations(*(s3a_uri(bucket, key) for key in location_keys(job)))


def hadoop_settings(store: Store) -> dict[str, Any]:
    """S3A's settings (Hadoop keys; Spark takes them as ``spark.hadoop.<key>``): the
    region's endpoint over TLS, the credentials of the site, and SSE-KMS with the
    store's key on every object written. The ``performance.flags`` skip S3A's probes of
    parent paths on create and mkdir, which a role limited to its prefixes may not read."""
    settings: dict[str, Any] = {
        "fs.s3a.endpoint": store.endpoint,
        "fs.s3a.endpoint.region": store.region,
        "fs.s3a.connection.ssl.enabled": "true",
        "fs.s3a.encryption.algorithm": ENCRYPTION_ALGORITHM,
        "fs.s3a.encryption.key": store.kms_key,
        "fs.s3a.performance.flags": "create,mkdir",
        "fs.s3a.aws.credentials.provider": (
            AWS_CREDENTIALS_PROVIDER if store.on_aws else ENV_CREDENTIALS_PROVIDER
        ),
    }
    if not store.on_aws:
        settings["fs.s3a.path.style.access"] = "true"
    return settings


def spark_conf(store: Store, where: Locations) -> dict[str, Any]:
    """The application's ``sparkConf``: event logs on, written to the job's event-log
    directory in the store (encrypted by the S3A settings), no UI, and the S3A settings."""
    conf: dict[str, Any] = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": where.event_log_dir,
        "spark.eventLog.compress": "true",
        "spark.ui.enabled": "false",
        "spark.kubernetes.executor.deleteOnTermination": "true",
    }
    conf |= {f"spark.hadoop.{key}": value for key, value in hadoop_settings(store).items()}
    return conf


#: The driver container's command (bash; Spark's arguments follow as ``$@``). What
#: Spark's own image entrypoint does for ``driver`` (the data image has none), with
#: the staging around it: Hadoop's file system shell (``spark-class FsShell``) with the
#: ``spark.hadoop.*`` settings Spark got in its properties file (Java properties escape
#: ':' and '=' with a backslash), so staging writes with the same endpoint, credentials
#: and SSE-KMS key as Spark. A dataset is written once: an existing output refuses the
#: job before it runs, and a failed job uploads nothing.
STAGE_SCRIPT = f"""\
set -euo pipefail
if [ "${{1:-}}" != driver ]; then
  echo "stage: expected Spark's driver arguments, got: $*" >&2
  exit 2
fi
shift
props=""
previous=""
for arg in "$@"; do
  if [ "$previous" = --properties-file ]; then props=$arg; fi
  previous=$arg
done
if [ -z "$props" ] || [ ! -r "$props" ]; then
  echo "stage: Spark's arguments name no readable --properties-file" >&2
  exit 2
fi
hadoop=()
while IFS= read -r setting; do
  hadoop+=(-D "$setting")
done < <(sed -n 's/^spark\\.hadoop\\.//p' "$props" | sed 's/\\\\\\(.\\)/\\1/g')
# FsShell insists on a core-site.xml (it loads its resources loudly); the settings are
# the -D options.
conf_dir=$(mktemp -d)
printf '<configuration/>\n' > "$conf_dir/core-site.xml"
fs() {{
  HADOOP_CONF_DIR="$conf_dir" spark-class org.apache.hadoop.fs.FsShell "${{hadoop[@]}}" "$@"
}}
# A shell that works first: a JVM that fails exits 1, which -test also uses for "no".
fs -mkdir -p "${ENV_EVENT_LOG}"
status=0
fs -test -e "${ENV_OUTPUT}" || status=$?
if [ "$status" -eq 0 ]; then
  echo "stage: $DATA_OUTPUT_URI exists; a dataset is written once: name a new dataset" >&2
  exit 2
elif [ "$status" -ne 1 ]; then
  echo "stage: cannot tell whether $DATA_OUTPUT_URI exists (exit $status); see above" >&2
  exit 2
fi
echo "stage: $DATA_INPUT_URI -> {INPUT_DIR}" >&2
fs -copyToLocal "${ENV_INPUT}" {INPUT_DIR}
spark-submit --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \\
  --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \\
  --deploy-mode client "$@"
echo "stage: {OUTPUT_DIR} -> $DATA_OUTPUT_URI" >&2
fs -mkdir -p "${ENV_OUTPUT}"
fs -put -d {OUTPUT_DIR}/* "${ENV_OUTPUT}"
"""


def job_arguments(job: SparkJobSpec) -> list[str]:
    """``prepare.py``'s arguments: the staged input, the output directory, the dataset's
    name, the job's Spark workers and its settings (as ``make data`` takes them)."""
    arguments = [INPUT_DIR, "--out", OUTPUT_DIR, "--name", job.dataset, "--workers", str(job.cores)]
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


def service_account_name(team: str) -> str:
    """The ServiceAccount of a team's Spark jobs (its Pod Identity role on AWS)."""
    return f"spark-{team}"


def service_account(team: str) -> Manifest:
    """A team's ServiceAccount in ``spark-jobs``, with no API token: the job runs Spark
    in local mode and calls no Kubernetes API (Pod Identity brings its own token)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(service_account_name(team), JOBS_NAMESPACE),
        "automountServiceAccountToken": False,
    }


def _credential_env(store: Store, team: str) -> list[Manifest]:
    if store.on_aws:
        return []
    secret = f"{store.credentials_secret_prefix}-{team}"
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    ]


def _placement(pool: NodePoolProfile) -> Manifest:
    return {
        "nodeSelector": {POOL_LABEL: pool.name},
        "tolerations": [toleration(t) for t in pool.taints],
    }


def _pod_labels(job: SparkJobSpec) -> dict[str, str]:
    return {APP_LABEL: job.name, "gpuplatform.ae/team": job.team}


def driver_template(
    job: SparkJobSpec, store: Store, pool: NodePoolProfile, image: str, where: Locations
) -> Manifest:
    """The driver's pod template: the stage script as the container's command, its
    locations, the CPU pool, the restricted security context, the scratch volume.

    The operator's webhook leaves a pod with a template alone, so everything the pod
    needs is here. Spark keeps the template's command and adds its own arguments, and
    sets the container's CPU and memory from ``driver.cores`` and ``driver.memory`` plus
    ``memoryOverhead`` (the same amounts as below, written so the template reads whole).
    """
    memory = f"{(job.memory_gib + job.python_memory_gib) * 1024}Mi"
    # The scratch volume, /tmp and Spark's own local directory count against the node's
    # disk: request them, so the scheduler picks a node with that much room.
    disk = f"{job.scratch_gib + 4}Gi"
    amounts = {"cpu": str(job.cores), "memory": memory, "ephemeral-storage": disk}
    container = {
        "name": DRIVER_CONTAINER,
        "image": image,
        "command": ["/bin/bash", "-c", STAGE_SCRIPT, "stage"],
        "env": [
            {"name": ENV_INPUT, "value": where.input_uri},
            {"name": ENV_OUTPUT, "value": where.output_uri},
            {"name": ENV_EVENT_LOG, "value": where.event_log_dir},
            {"name": "HOME", "value": "/tmp"},
            *_credential_env(store, job.team),
        ],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "securityContext": restricted_container(),
        "volumeMounts": [
            {"name": "work", "mountPath": WORK_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "main", "mountPath": MAIN_DIR, "readOnly": True},
        ],
    }
    return {
        "metadata": {"labels": _pod_labels(job)},
        "spec": {
            "serviceAccountName": service_account_name(job.team),
            "automountServiceAccountToken": False,
            "securityContext": pod_security(),
            **_placement(pool),
            "containers": [container],
            "volumes": [
                {"name": "work", "emptyDir": {"sizeLimit": f"{job.scratch_gib}Gi"}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}},
                {"name": "main", "configMap": {"name": MAIN_CONFIGMAP}},
            ],
        },
    }


def main_configmap() -> Manifest:
    """The application's main file (`MAIN_SOURCE`) in the jobs' namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(MAIN_CONFIGMAP, JOBS_NAMESPACE),
        "data": {"main.py": MAIN_SOURCE},
    }


def executor_template(job: SparkJobSpec, pool: NodePoolProfile, image: str) -> Manifest:
    """The executors' pod template: the same pool and security as the driver. The job
    starts Spark in local mode, so no executor is created; the template keeps any
    executor Spark might start inside the platform's rules all the same."""
    return {
        "metadata": {"labels": _pod_labels(job)},
        "spec": {
            "serviceAccountName": service_account_name(job.team),
            "automountServiceAccountToken": False,
            "securityContext": pod_security(),
            **_placement(pool),
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "image": image,
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1408Mi"},
                        "limits": {"cpu": "1", "memory": "1408Mi"},
                    },
                    "securityContext": restricted_container(),
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
        },
    }


def spark_application(
    job: SparkJobSpec, store: Store, pool: NodePoolProfile, image: str, where: Locations
) -> Manifest:
    """The job's ``SparkApplication`` (``sparkoperator.k8s.io/v1beta2``)."""
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": metadata(job.name, JOBS_NAMESPACE, labels=_pod_labels(job)),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "sparkVersion": SPARK_VERSION,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": MAIN_FILE,
            "arguments": job_arguments(job),
            "sparkConf": spark_conf(store, where),
            # A failed run is looked at, not retried: its input or settings need a fix.
            "restartPolicy": {"type": "Never"},
            "suspend": job.suspend,
            "driver": {
                "cores": job.cores,
                "coreRequest": str(job.cores),
                "coreLimit": str(job.cores),
                "memory": f"{job.memory_gib}g",
                "memoryOverhead": f"{job.python_memory_gib}g",
                "serviceAccount": service_account_name(job.team),
                "labels": _pod_labels(job),
                "template": driver_template(job, store, pool, image, where),
            },
            "executor": {
                "instances": 1,
                "cores": 1,
                "coreLimit": "1",
                "memory": "1g",
                "memoryOverhead": "384m",
                "deleteOnTermination": True,
                "serviceAccount": service_account_name(job.team),
                "labels": _pod_labels(job),
                "template": executor_template(job, pool, image),
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
    """Each job's driver fits one node of its pool (fields under ``spark.``)."""
    problems: list[Problem] = []
    for index, job in enumerate(spec.jobs):
        pool = job_pool(job, pools)
        if pool is None:
            continue  # `config_problems` names it
        if job.cores > allocatable_vcpus(pool):
            problems.append(
                Problem(
                    f"spark.jobs[{index}].cores",
                    job.cores,
                    f"at most {allocatable_vcpus(pool)}, what one node of pool {pool.name} offers",
                )
            )
        memory = job.memory_gib + job.python_memory_gib
        if memory > allocatable_memory_gib(pool):
            problems.append(
                Problem(
                    f"spark.jobs[{index}].memory_gib",
                    memory,
                    f"memoryGib + pythonMemoryGib at most {allocatable_memory_gib(pool)} GiB, "
                    f"what one node of pool {pool.name} offers",
                )
            )
    return problems


# -- the operator ---------------------------------------------------------------------


def operator_values(spec: SparkSpec, node_selector: dict[str, str]) -> Manifest:
    """Values of the ``spark-operator`` chart (every key exists in its values.yaml).

    The controller and webhook run on the system pool with bounded resources; the
    operator watches ``spark-jobs`` only; the chart creates no ServiceAccount or RBAC
    for the jobs (the platform's ServiceAccounts need none); no Spark UI Service; the
    controller's metrics stay on (no PodMonitor: Prometheus is not told to scrape it).
    """
    # The image written out whole, so the plan (and the pack's image rule) shows it.
    registry, repository = OPERATOR_IMAGE
    image: Manifest = {
        "registry": spec.operator_registry or registry,
        "repository": repository,
        "tag": OPERATOR_VERSION,
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
            "jobNamespaces": [JOBS_NAMESPACE],
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
    store: Store, vpc_cidr: Any = None, egress_cidrs: tuple[str, ...] = ()
) -> list[Manifest]:
    """``spark-jobs``: default deny, DNS, and the object store only: on AWS the Pod
    Identity agent and HTTPS to the VPC (its S3 interface endpoint answers for
    ``s3.<region>.amazonaws.com``); on premises HTTPS to the site's egress CIDRs (its
    store) or the store's Service in the cluster. Nothing may connect to a job, and a
    job calls no Kubernetes API (Spark runs in local mode in the driver)."""
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
    return [
        netpol.default_deny(JOBS_NAMESPACE),
        netpol.allow_dns(JOBS_NAMESPACE),
        netpol.policy(
            JOBS_NAMESPACE,
            "allow-object-store",
            {
                "podSelector": {"matchExpressions": [{"key": APP_LABEL, "operator": "Exists"}]},
                "policyTypes": ["Egress"],
                "egress": egress,
            },
        ),
    ]


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
