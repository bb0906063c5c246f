"""Typed settings of Kubeflow Pipelines on the cluster, its pins and the names the other
parts agree on.

`PipelinesSpec` is the stack-file section ``uae-gpu-platform:pipelines``. What the
composition adds (the database host and password, the bucket, the key, the registry) is
`PipelinesPlacement`. Everything here is pure: `manifests` and `loop` build the objects
from these values, `component` registers them.

Kubeflow Pipelines (KFP) 2.17.0 runs in single-user mode in the namespace ``kubeflow``:

* its API server, UI, ML Metadata (MLMD) and Argo Workflows controller are upstream's
  kustomize install of the tag with the platform's patches, rendered when vendoring
  (``upstream/README.md``);
* its pipeline and metadata databases live on the tracking database server (the RDS
  instance on AWS, a CloudNativePG cluster of the tracking server's operator on
  premises), reached through a PgBouncer sidecar that speaks TLS to the server: KFP
  2.17.0 writes ``sslmode=disable`` into its PostgreSQL connection string
  (``backend/src/apiserver/client/sql.go``), and the RDS instance refuses clear text;
* its artifacts go to the stack's data bucket under ``pipelines/`` (SSE-KMS with the
  stack's key by the bucket's default; no MinIO/SeaweedFS) through EKS Pod Identity on
  AWS, or to the site's S3-compatible store over TLS on premises;
* nothing of it is exposed: ClusterIP Services, a default-deny namespace, the UI reached
  with ``kubectl port-forward`` (the cluster's RBAC decides who may);
* its API server and UI serve TLS inside the cluster with certificates from the cluster
  CA, and every client verifies them with it (`manifests.tls_objects`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi

from modules.validation import Checker

#: The Kubeflow Pipelines release (manifests and images, ``upstream/README.md``).
KFP_VERSION = "2.17.0"
#: The Argo Workflows release KFP 2.17.0's manifests name (``?ref=v4.0.5``).
ARGO_VERSION = "v4.0.5"
#: ML Metadata's server image tag in KFP 2.17.0's manifests.
MLMD_VERSION = "1.14.0"
#: The init containers' image in KFP 2.17.0's manifests.
ALPINE_TAG = "3.23"
#: CloudNativePG's PgBouncer image (github.com/cloudnative-pg/pgbouncer-containers,
#: ``pgBouncerVersion = "1.25.2-1.pgdg13+1"``; its entrypoint runs
#: ``pgbouncer /etc/pgbouncer/pgbouncer.ini`` as its UID 998, the platform runs it as
#: 10001: it reads only what the pod mounts and writes nothing).
PGBOUNCER_TAG = "1.25.2"
#: CloudNativePG's PostgreSQL image (the tracking database's major version, 17).
POSTGRES_TAG = "17.6"
#: ghostunnel (github.com/ghostunnel/ghostunnel, Apache-2.0), its distroless image.
GHOSTUNNEL_TAG = "v1.11.1-distroless"

NAMESPACE = "kubeflow"
#: The pipeline the platform runs on a schedule and on drift: its compiled IR YAML (the
#: KFP SDK's output, committed by ``workloads/pipelines``) and its name in KFP.
PIPELINE_FILE = "workloads/pipelines/data_to_model.yaml"
PIPELINE_NAME = "data-to-model"

#: Where each image comes from upstream; every one is pulled from the stack's registry
#: under ``<registry>/kubeflow-pipelines/<name>:<tag>`` (the AWS side makes one ECR
#: repository each; on premises the site's registry mirrors them).
MIRRORED_IMAGES: dict[str, tuple[str, str]] = {
    "kfp-api-server": ("ghcr.io/kubeflow/kfp-api-server", KFP_VERSION),
    "kfp-persistence-agent": ("ghcr.io/kubeflow/kfp-persistence-agent", KFP_VERSION),
    "kfp-scheduled-workflow-controller": (
        "ghcr.io/kubeflow/kfp-scheduled-workflow-controller",
        KFP_VERSION,
    ),
    "kfp-frontend": ("ghcr.io/kubeflow/kfp-frontend", KFP_VERSION),
    "kfp-metadata-envoy": ("ghcr.io/kubeflow/kfp-metadata-envoy", KFP_VERSION),
    "kfp-driver": ("ghcr.io/kubeflow/kfp-driver", KFP_VERSION),
    "kfp-launcher": ("ghcr.io/kubeflow/kfp-launcher", KFP_VERSION),
    "ml_metadata_store_server": ("gcr.io/tfx-oss-public/ml_metadata_store_server", MLMD_VERSION),
    "workflow-controller": ("quay.io/argoproj/workflow-controller", ARGO_VERSION),
    "argoexec": ("quay.io/argoproj/argoexec", ARGO_VERSION),
    "alpine": ("docker.io/alpine", ALPINE_TAG),
    "pgbouncer": ("ghcr.io/cloudnative-pg/pgbouncer", PGBOUNCER_TAG),
    "postgresql": ("ghcr.io/cloudnative-pg/postgresql", POSTGRES_TAG),
    # The UI's TLS proxy: KFP 2.17.0's frontend serves plain HTTP only
    # (frontend/server/app.ts ``app.listen``); the same ghostunnel release as the
    # tracking server's (`modules.k8s.tracking.manifests.MIRRORED_IMAGES`).
    "ghostunnel": ("docker.io/ghostunnel/ghostunnel", GHOSTUNNEL_TAG),
}
#: The folder of the mirrored images under the stack's registry.
MIRROR_PATH = "kubeflow-pipelines"
#: The platform's own image for the publisher Job and the drift trigger (built from
#: ``workloads/pipelines``; it carries the KFP SDK): ``<registry>/pipelines:<tag>``.
PIPELINES_IMAGE = "pipelines"

#: Key prefixes in the data bucket: everything of KFP under ``pipelines/``; the API
#: server's copies of pipeline specs, the runs' artifacts (the pipeline root) and the
#: inputs a run reads (staged there by whoever starts it).
SPECS_PREFIX = "pipelines/specs/"
RUNS_PREFIX = "pipelines/runs/"
SOURCES_PREFIX = "pipelines/sources/"

#: ServiceAccounts the AWS side gives a Pod Identity role (KFP's own names).
API_SERVER_ACCOUNT = "ml-pipeline"
UI_ACCOUNT = "ml-pipeline-ui"
RUNNER_ACCOUNT = "pipeline-runner"
#: The publisher Job's and the trigger's ServiceAccounts (no cloud identity, no API token).
PUBLISHER_ACCOUNT = "pipelines-publisher"
TRIGGER_ACCOUNT = "retrain-trigger"

#: The database role and the two databases KFP uses (API server, ML Metadata).
DATABASE_USER = "kubeflow_pipelines"
PIPELINE_DATABASE = "mlpipeline"
METADATA_DATABASE = "metadb"
DATABASE_PORT = 5432
#: On premises: the CloudNativePG cluster holding both databases.
DATABASE_CLUSTER = "kfp-db"
#: The PgBouncer sidecar listens on the pod's loopback only.
PROXY_HOST = "127.0.0.1"

#: The secret config values (``pulumi config set --secret``).
DATABASE_PASSWORD_KEY = "pipelinesDatabasePassword"
OBJECT_STORE_ACCESS_KEY = "pipelinesObjectStoreAccessKey"
OBJECT_STORE_SECRET_KEY = "pipelinesObjectStoreSecretKey"

#: KFP's cron format has six fields, seconds first (robfig/cron with seconds).
_KFP_CRON = re.compile(r"^(\S+\s+){5}\S+$")
_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PARAMETER = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class ObjectStoreSpec:
    """An on-premises site's S3-compatible object store (Ceph RGW, MinIO the site runs...)
    for the pipelines' artifacts; its access key pair is the secret config values
    ``pipelinesObjectStoreAccessKey`` and ``pipelinesObjectStoreSecretKey``.

    Args:
        endpoint: ``host[:port]`` of the store's S3 API, reached over TLS only.
        bucket: the bucket KFP writes to (the site creates it, encrypted at rest).
        region: the region name the store answers to (default ``us-east-1``, what most
            S3-compatible stores accept).
        cidrs: the store's addresses, for the pods' egress allowance (port 443).
    """

    endpoint: str
    bucket: str
    cidrs: tuple[str, ...]
    region: str = "us-east-1"

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_HOST.match(self.endpoint)) and "amazonaws.com" not in self.endpoint,
            "endpoint",
            self.endpoint,
            "host[:port] of the site's own store, no scheme (TLS is always used); an AWS "
            "endpoint belongs to an aws stack",
        )
        check.require(bool(_BUCKET.match(self.bucket)), "bucket", self.bucket, "a bucket name")
        check.require(bool(self.cidrs), "cidrs", list(self.cidrs), "the store's CIDRs (1 or more)")
        check.cidrs("cidrs", self.cidrs, example="10.20.30.0/24")
        check.done()


@dataclass(frozen=True)
class PipelinesSpec:
    """Kubeflow Pipelines (config key ``uae-gpu-platform:pipelines``).

    Args:
        enabled: install KFP and the data-to-model loop (default false). Needs
            ``tracking`` (its database server) and the secret config value
            ``pipelinesDatabasePassword``.
        schedule: when the recurring run of ``data-to-model`` starts, as KFP's
            six-field cron (seconds first, UTC; default ``0 0 2 * * 0``: Sundays 02:00);
            empty for no recurring run.
        retrain_on_drift: route the serving layer's ``ModelInputDrift`` alert through
            Alertmanager to a run of the pipeline (default true).
        retrain_cooldown_hours: the least time between two drift-started runs, and how
            often Alertmanager repeats a firing alert (default 24).
        parameters: the pipeline's run parameters (names of the IR's root inputs; values
            as strings, converted to the IR's types), used by both the recurring and the
            drift-started runs.
        image_tag: tag of the platform's ``pipelines`` image (publisher and trigger).
        registry: on premises, the site's registry (``host[:port][/path]``) that holds
            the ``pipelines`` image and mirrors KFP's images under
            ``kubeflow-pipelines/``; on AWS leave unset (the stack's ECR).
        api_server_cidrs: on premises, the Kubernetes API server's CIDRs (KFP's
            controllers and the workflow pods call it; port 443 or 6443).
        object_store: on premises, the site's S3-compatible store (`ObjectStoreSpec`).
        database_instances: on premises, PostgreSQL instances of the CloudNativePG
            cluster (default 2).
        database_storage_gib: on premises, its volume size (default 20).
    """

    enabled: bool = False
    schedule: str = "0 0 2 * * 0"
    retrain_on_drift: bool = True
    retrain_cooldown_hours: int = 24
    parameters: dict[str, str] = field(default_factory=dict)
    image_tag: str = "0.1.0"
    registry: str | None = None
    api_server_cidrs: tuple[str, ...] = ()
    object_store: ObjectStoreSpec | None = None
    database_instances: int = 2
    database_storage_gib: int = 20

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            self.schedule == "" or bool(_KFP_CRON.match(self.schedule)),
            "schedule",
            self.schedule,
            "KFP's six-field cron, seconds first, such as '0 0 2 * * 0' (or empty for none)",
        )
        check.fixed_image_tag("image_tag", self.image_tag)
        check.registry("registry", self.registry)
        check.cidrs("api_server_cidrs", self.api_server_cidrs)
        for name in sorted(self.parameters):
            check.require(
                bool(_PARAMETER.match(name)),
                f"parameters.{name}",
                name,
                "a pipeline parameter name (letters, digits, _ and -)",
            )
        ranges = {
            "retrain_cooldown_hours": (1, 720),
            "database_instances": (1, 5),
            "database_storage_gib": (1, 65_536),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            check.require(low <= value <= high, name, value, f"use {low} to {high}")
        check.done()


@dataclass(frozen=True)
class PipelinesPlacement:
    """What the composition adds to the spec: where KFP's state and images are.

    Args:
        on_aws: RDS, the data bucket and Pod Identity (true) or CloudNativePG, the site's
            object store and its key pair (false).
        registry: the registry prefix images are pulled from (the stack's ECR
            ``<account>.dkr.ecr.<region>.amazonaws.com/gpu-<stack>``, or the site's).
        region: on AWS the stack's region (S3's regional endpoint).
        bucket: the artifact bucket (the stack's data bucket on AWS, a Pulumi output).
        storage_key_arn: on AWS the stack's storage key (a Pulumi output).
        database_host: on AWS the tracking RDS instance's address (a Pulumi output).
        vpc_cidr: on AWS the VPC's CIDR (RDS, the S3 and STS interface endpoints and the
            EKS API are inside it).
        storage_class: on premises the database volume's StorageClass.
        node_selector: the system pool's labels (KFP's own pods run there).
        tracking_database_secret: on AWS the ``mlflow`` namespace's Secret holding the
            RDS master user (the database init Job runs there, as Feast's does).
        database_ca: on AWS the PEM certificates of RDS's authorities in the region,
            which the database proxy verifies the instance with (on premises it
            verifies with the CloudNativePG cluster's own CA, a Secret of the cluster).
    """

    on_aws: bool
    registry: str
    node_selector: dict[str, str]
    region: str = ""
    bucket: pulumi.Input[str] = ""
    storage_key_arn: pulumi.Input[str] = ""
    database_host: pulumi.Input[str] = ""
    vpc_cidr: str = ""
    storage_class: str = ""
    tracking_database_secret: str = "mlflow-db"
    database_ca: str = ""

    def image(self, name: str) -> str:
        """A mirrored upstream image: ``<registry>/kubeflow-pipelines/<name>:<tag>``."""
        _, tag = MIRRORED_IMAGES[name]
        return f"{self.registry}/{MIRROR_PATH}/{name}:{tag}"

    def pipelines_image(self, tag: str) -> str:
        """The platform's ``pipelines`` image (publisher, trigger)."""
        return f"{self.registry}/{PIPELINES_IMAGE}:{tag}"


def s3_endpoint(region: str) -> str:
    """S3's regional endpoint; inside the VPC its private DNS name answers with the S3
    interface endpoint's addresses (`modules.aws.network`)."""
    return f"s3.{region}.amazonaws.com"


def pipeline_root(bucket: str) -> str:
    """The runs' artifact root (KFP's ``defaultPipelineRoot``)."""
    return f"s3://{bucket}/{RUNS_PREFIX.rstrip('/')}"


def placement_problems(spec: PipelinesSpec, on_aws: bool) -> list[tuple[str, object, str]]:
    """What the stack's target requires of the section, as (field, value, expected): on
    premises the site's registry, object store and API server CIDRs; on AWS none of
    them (the stack's own ECR, bucket and VPC)."""
    problems: list[tuple[str, object, str]] = []
    if on_aws:
        for name, value in (
            ("registry", spec.registry),
            ("object_store", spec.object_store),
            ("api_server_cidrs", spec.api_server_cidrs or None),
        ):
            if value is not None:
                problems.append(
                    (name, value, "leave unset on AWS (the stack's own ECR, bucket and VPC)")
                )
        return problems
    wanted = (
        ("registry", spec.registry, "required on premises: the site's registry mirroring KFP"),
        ("object_store", spec.object_store, "required on premises: the site's S3-compatible store"),
        (
            "api_server_cidrs",
            spec.api_server_cidrs or None,
            "required on premises: the API server's CIDRs",
        ),
    )
    return [(name, value, expected) for name, value, expected in wanted if value is None]


def labels(component: str) -> dict[str, Any]:
    """The platform's labels plus a component name (KFP's own objects keep theirs)."""
    return {
        "app.kubernetes.io/part-of": "gpuplatform",
        "app.kubernetes.io/managed-by": "pulumi",
        "app.kubernetes.io/component": component,
    }
