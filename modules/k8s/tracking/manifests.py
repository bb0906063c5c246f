"""MLflow tracking server and model registry, kept in the cluster's site.

* The server is the community-charts ``mlflow`` chart (pinned in `versions`), run with
  MLflow's built-in ``basic-auth`` app: every request but ``/health`` needs a user; the
  admin's password is a Pulumi secret that reaches the pod only as a Kubernetes Secret.
* Backend store: PostgreSQL. On AWS an RDS instance of the foundation (CMK-encrypted,
  private subnets, password managed by Secrets Manager); on premises a CloudNativePG
  cluster (operator chart pinned here) on the site's storage class.
* Artifacts are proxied by the server (``--serve-artifacts``), so only the server
  touches the store: on AWS the data bucket under ``mlflow/``, written with SSE-KMS
  under the stack's key through EKS Pod Identity (no static keys); on premises a
  volume on the site's checkpoint class (shared file system where the site has one).
* Reached only from team namespaces and scraped by Prometheus (NetworkPolicies on the
  server pods; each team namespace gets an egress allowance to it); metrics are
  exposed with ``--expose-prometheus`` and scraped by a ServiceMonitor that logs in.

Charts and images cannot be pulled in the offline plan: ``pulumi up`` downloads them.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import pulumi

from modules.k8s.common import Manifest, metadata, namespace, system_node_selector
from modules.k8s.names import KUBE_SYSTEM, MONITORING_NAMESPACE, TEAM_LABEL, team_namespace
from modules.k8s.tenancy.spec import POD_IDENTITY_AGENT_CIDR, POD_IDENTITY_AGENT_PORT
from modules.k8s.tracking.spec import TrackingSpec
from modules.k8s.versions import CLOUDNATIVE_PG_POSTGRES_IMAGE

TRACKING_NAMESPACE = "mlflow"
CNPG_NAMESPACE = "cnpg-system"
RELEASE = "mlflow"
#: The chart's fullname (fullnameOverride): Deployment, Service and ServiceAccount.
SERVER_NAME = "mlflow"
SERVICE_ACCOUNT = "mlflow"
SERVER_PORT = 5000  # the container port; the Service listens on 80
SERVICE_PORT = 80
#: What teams set as MLFLOW_TRACKING_URI.
TRACKING_URI = f"http://{SERVER_NAME}.{TRACKING_NAMESPACE}.svc.cluster.local"
ADMIN_SECRET = "mlflow-admin"
#: The admin credentials escaped for the chart's auth ini (see `ini_safe_admin`).
ADMIN_INI_SECRET = "mlflow-admin-ini"
#: On AWS: the RDS credentials; on premises CloudNativePG writes ``<cluster>-app``.
DATABASE_SECRET = "mlflow-db"
#: On AWS: the same user with its password percent-encoded, for the auth app's database
#: URL (the chart writes the password into a URL with sed; RDS passwords may hold
#: characters that break either). CloudNativePG's generated password is used as is
#: (assumed alphanumeric; not verified here).
AUTH_DATABASE_SECRET = "mlflow-auth-db"
DATABASE_CLUSTER = "mlflow-db"
DATABASE_NAME = "mlflow"
DATABASE_PORT = 5432
ARTIFACT_CLAIM = "mlflow-artifacts"
ARTIFACT_MOUNT = "/mlartifacts"
#: MLflow's multiprocess metrics directory: /tmp is the chart's writable emptyDir (the
#: chart's own ``serviceMonitor`` option points it at a path under the read-only root).
METRICS_DIR = "/tmp/mlflow-metrics"
IMAGE_REPOSITORY = "burakince/mlflow"
#: Image tag = the chart's appVersion, pinned here so a chart bump is a reviewed change.
IMAGE_TAG = "3.15.1"
#: The chart's selector labels (``mlflow.selectorLabels``) with fullname/release mlflow.
SERVER_POD_LABELS = {"app.kubernetes.io/name": "mlflow", "app.kubernetes.io/instance": RELEASE}
CNPG_CLUSTER_LABEL = "cnpg.io/cluster"
#: UID/GID of the server (the chart's defaults; the image's ``mlflow`` user).
SERVER_UID = 1001


@dataclass(frozen=True)
class StoreSettings:
    """Resolved (plain-string) view of where the server keeps its state.

    Args:
        database_host: PostgreSQL host.
        database_secret: Secret with ``username`` and ``password`` keys.
        auth_database_secret: the same for the auth app's database URL (default: the
            ``database_secret``).
        bucket: on AWS the artifact bucket (empty on premises).
        artifact_prefix: key prefix in the bucket, without slashes at the ends.
        kms_key_arn: on AWS the CMK artifacts are written with.
        region: on AWS the region (the S3 client's).
        ssl_mode: libpq ``sslmode`` towards the database.
    """

    database_host: str
    database_secret: str
    auth_database_secret: str = ""
    bucket: str = ""
    artifact_prefix: str = ""
    kms_key_arn: str = ""
    region: str = ""
    ssl_mode: str = "require"


def tracking_namespace(kubernetes_version: str) -> Manifest:
    return namespace(TRACKING_NAMESPACE, "restricted", kubernetes_version)


def cnpg_namespace(kubernetes_version: str) -> Manifest:
    return namespace(CNPG_NAMESPACE, "restricted", kubernetes_version)


def credentials_secret(
    name: str, username: str, password: pulumi.Input[str]
) -> dict[str, pulumi.Input[Any]]:
    """An Opaque Secret with ``username`` and ``password`` (``stringData``: the provider
    stores it; the plan shows the password only as ``[secret]``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(name, TRACKING_NAMESPACE),
        "type": "Opaque",
        "stringData": {"username": username, "password": pulumi.Output.secret(password)},
    }


# The chart's init container writes the admin password and the auth database URL into
# an ini file with ``sed "s/<placeholder>/${VALUE}/g"``, and MLflow reads that file with
# configparser (which interpolates ``%``). Values are escaped for both on the way in.


def _ini(value: str) -> str:
    return value.replace("%", "%%")


def _sed_replacement(value: str) -> str:
    return value.replace("\\", "\\\\").replace("&", "\\&").replace("/", "\\/")


def ini_safe_admin(password: str) -> str:
    """The admin password as it must reach sed so that MLflow reads it back unchanged."""
    return _sed_replacement(_ini(password))


def url_safe(password: str) -> str:
    """A database password for the auth app's URL: percent-encoded (SQLAlchemy decodes
    it; nothing sed treats specially is left), with ``%`` doubled for configparser."""
    return _ini(urllib.parse.quote(password, safe=""))


def _resources(spec: TrackingSpec) -> dict[str, Any]:
    amount = {"cpu": f"{spec.cpu_millicores}m", "memory": f"{spec.memory_mib}Mi"}
    return {"requests": dict(amount), "limits": dict(amount)}


def mlflow_values(spec: TrackingSpec, store: StoreSettings) -> dict[str, Any]:
    """Values of the community-charts ``mlflow`` chart (checked against the pinned
    chart's values.schema.json in the tests)."""
    postgres = {
        "enabled": True,
        "host": store.database_host,
        "port": DATABASE_PORT,
        "database": DATABASE_NAME,
    }
    existing = {"name": store.database_secret, "usernameKey": "username", "passwordKey": "password"}
    auth_existing = {**existing, "name": store.auth_database_secret or store.database_secret}
    env: dict[str, Any] = {"PGSSLMODE": store.ssl_mode}
    extra_volumes: list[dict[str, Any]] = []
    extra_mounts: list[dict[str, Any]] = []
    if store.bucket:
        artifact_root: dict[str, Any] = {
            "proxiedArtifactStorage": True,
            "s3": {"enabled": True, "bucket": store.bucket, "path": store.artifact_prefix},
        }
        env |= {
            "AWS_REGION": store.region,
            "AWS_DEFAULT_REGION": store.region,
            # Every artifact is written with SSE-KMS under the stack's key (the bucket
            # policy refuses any other key); boto3 passes these on each upload.
            "MLFLOW_S3_UPLOAD_EXTRA_ARGS": json.dumps(
                {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": store.kms_key_arn},
                sort_keys=True,
            ),
        }
    else:
        artifact_root = {
            "proxiedArtifactStorage": True,
            "defaultArtifactsDestination": ARTIFACT_MOUNT,
        }
        extra_volumes.append(
            {"name": "artifacts", "persistentVolumeClaim": {"claimName": ARTIFACT_CLAIM}}
        )
        extra_mounts.append({"name": "artifacts", "mountPath": ARTIFACT_MOUNT})
    return {
        "fullnameOverride": SERVER_NAME,
        "replicaCount": spec.replicas,
        "image": {"repository": IMAGE_REPOSITORY, "tag": IMAGE_TAG, "pullPolicy": "IfNotPresent"},
        # The server needs no Kubernetes API; EKS Pod Identity mounts its own token.
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT, "automount": False},
        "podSecurityContext": {
            "runAsNonRoot": True,
            "runAsUser": SERVER_UID,
            "runAsGroup": SERVER_UID,
            "fsGroup": SERVER_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "privileged": False,
            "runAsUser": SERVER_UID,
            "runAsGroup": SERVER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": _resources(spec),
        "nodeSelector": system_node_selector(),
        "service": {"enabled": True, "type": "ClusterIP", "port": SERVICE_PORT},
        "ingress": {"enabled": False},
        "telemetry": {"enabled": False},
        "backendStore": {
            # Schema migrations run in an init container before the server starts.
            "databaseMigration": True,
            "databaseConnectionCheck": True,
            "postgres": postgres,
            "existingDatabaseSecret": existing,
        },
        "artifactRoot": artifact_root,
        "auth": {
            "enabled": True,
            "appName": "basic-auth",
            "existingAdminSecret": {
                "name": ADMIN_INI_SECRET,
                "usernameKey": "username",
                "passwordKey": "password",
            },
            "defaultPermission": spec.default_permission,
            # Users and permissions live in the same database, not in a pod-local file.
            "postgres": {**postgres, "existingSecret": auth_existing},
        },
        # Metrics for Prometheus; the ServiceMonitor is ours (see module docstring).
        "extraArgs": {"exposePrometheus": METRICS_DIR},
        "serviceMonitor": {"enabled": False},
        "extraEnvVars": env,
        "extraVolumes": extra_volumes,
        "extraVolumeMounts": extra_mounts,
    }


def cloudnative_pg_values() -> dict[str, Any]:
    """Values of the CloudNativePG operator chart: on the system pool, with limits."""
    amount = {"cpu": "500m", "memory": "512Mi"}
    return {
        "nodeSelector": system_node_selector(),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": amount},
        "monitoring": {"podMonitorEnabled": False},
    }


def database_cluster(spec: TrackingSpec, storage_class: str) -> Manifest:
    """The CloudNativePG ``Cluster`` holding MLflow's database on premises.

    The volume is on the site's storage class; whether that class encrypts at rest is
    the site's to guarantee (this layer cannot see into the storage backend).
    """
    amount = {"cpu": "1", "memory": "2Gi"}
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": metadata(DATABASE_CLUSTER, TRACKING_NAMESPACE),
        "spec": {
            "instances": spec.database_instances,
            "imageName": CLOUDNATIVE_PG_POSTGRES_IMAGE,
            "primaryUpdateStrategy": "unsupervised",
            "enableSuperuserAccess": False,
            "bootstrap": {"initdb": {"database": DATABASE_NAME, "owner": DATABASE_NAME}},
            "storage": {"storageClass": storage_class, "size": f"{spec.database_storage_gib}Gi"},
            "resources": {"requests": dict(amount), "limits": dict(amount)},
            "affinity": {"nodeSelector": system_node_selector(), "enablePodAntiAffinity": True},
            "enablePDB": spec.database_instances > 1,
        },
    }


def database_secret_name(on_aws: bool) -> str:
    """The Secret holding the database user: ours on AWS, CloudNativePG's on premises."""
    return DATABASE_SECRET if on_aws else f"{DATABASE_CLUSTER}-app"


def database_host(on_aws: bool, rds_host: str = "") -> str:
    """The database host: the RDS address, or CloudNativePG's read-write service."""
    return rds_host if on_aws else f"{DATABASE_CLUSTER}-rw.{TRACKING_NAMESPACE}.svc"


def artifact_claim(spec: TrackingSpec, storage_class: str, access_mode: str) -> Manifest:
    """The artifact volume on premises (a shared file system class lets replicas share it)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(ARTIFACT_CLAIM, TRACKING_NAMESPACE),
        "spec": {
            "storageClassName": storage_class,
            "accessModes": [access_mode],
            "resources": {"requests": {"storage": f"{spec.artifact_storage_gib}Gi"}},
        },
    }


def _policy(ns: str, name: str, spec: Manifest) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, ns),
        "spec": spec,
    }


def _namespace_peer(name: str) -> Manifest:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


_DNS_EGRESS = {
    "to": [
        {
            **_namespace_peer(KUBE_SYSTEM),
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}


def server_network_policies(vpc_cidr: pulumi.Input[str] | None) -> list[Manifest]:
    """The server pods accept only team namespaces (any namespace labelled with a team)
    and Prometheus, and reach only DNS and the database; on EKS also the Pod Identity
    agent and HTTPS inside the VPC (the S3 and STS endpoints). CloudNativePG's pods
    accept PostgreSQL only from the server, their own instances and the operator."""
    server = {"matchLabels": dict(SERVER_POD_LABELS)}
    egress: list[Manifest] = [_DNS_EGRESS]
    if vpc_cidr is None:
        database_peer: Manifest = {
            "podSelector": {"matchLabels": {CNPG_CLUSTER_LABEL: DATABASE_CLUSTER}}
        }
        egress.append(
            {"to": [database_peer], "ports": [{"protocol": "TCP", "port": DATABASE_PORT}]}
        )
    else:
        egress += [
            {
                "to": [{"ipBlock": {"cidr": vpc_cidr}}],
                "ports": [
                    {"protocol": "TCP", "port": DATABASE_PORT},
                    {"protocol": "TCP", "port": 443},
                ],
            },
            {
                "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                "ports": [{"protocol": "TCP", "port": POD_IDENTITY_AGENT_PORT}],
            },
        ]
    policies = [
        _policy(
            TRACKING_NAMESPACE,
            "mlflow-server",
            {
                "podSelector": server,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]
                                }
                            },
                            _namespace_peer(MONITORING_NAMESPACE),
                        ],
                        "ports": [{"protocol": "TCP", "port": SERVER_PORT}],
                    }
                ],
                "egress": egress,
            },
        )
    ]
    if vpc_cidr is None:
        instances = {"matchLabels": {CNPG_CLUSTER_LABEL: DATABASE_CLUSTER}}
        policies.append(
            _policy(
                TRACKING_NAMESPACE,
                "mlflow-database",
                {
                    "podSelector": instances,
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"podSelector": server}, {"podSelector": instances}],
                            "ports": [{"protocol": "TCP", "port": DATABASE_PORT}],
                        },
                        # The operator talks to each instance's manager (status, 8000)
                        # and to PostgreSQL itself.
                        {
                            "from": [_namespace_peer(CNPG_NAMESPACE)],
                            "ports": [
                                {"protocol": "TCP", "port": 8000},
                                {"protocol": "TCP", "port": DATABASE_PORT},
                            ],
                        },
                        # Prometheus scrapes the instances' exporter (9187).
                        {
                            "from": [_namespace_peer(MONITORING_NAMESPACE)],
                            "ports": [{"protocol": "TCP", "port": 9187}],
                        },
                    ],
                },
            )
        )
    return policies


def team_egress_policy(team: str) -> Manifest:
    """Lets a team namespace's pods reach the tracking server (their namespace denies
    all egress by default)."""
    return _policy(
        team_namespace(team),
        "allow-mlflow",
        {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            **_namespace_peer(TRACKING_NAMESPACE),
                            "podSelector": {"matchLabels": dict(SERVER_POD_LABELS)},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": SERVER_PORT}],
                }
            ],
        },
    )


def service_monitor(scrape_interval_seconds: int) -> Manifest:
    """Scrapes the server's ``/metrics``. Basic auth protects every path but
    ``/health``, so Prometheus logs in with the admin Secret (MLflow has no read-only
    role that a config file could create)."""
    credentials = {
        "username": {"name": ADMIN_SECRET, "key": "username"},
        "password": {"name": ADMIN_SECRET, "key": "password"},
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(SERVER_NAME, TRACKING_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": dict(SERVER_POD_LABELS)},
            "namespaceSelector": {"matchNames": [TRACKING_NAMESPACE]},
            "endpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": f"{scrape_interval_seconds}s",
                    "basicAuth": credentials,
                }
            ],
        },
    }


def database_pod_monitor() -> Manifest:
    """Scrapes the CloudNativePG instances' exporter (port ``metrics``, 9187); the
    operator chart's own PodMonitor option is deprecated upstream."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(DATABASE_CLUSTER, TRACKING_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": {CNPG_CLUSTER_LABEL: DATABASE_CLUSTER}},
            "namespaceSelector": {"matchNames": [TRACKING_NAMESPACE]},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}],
        },
    }
