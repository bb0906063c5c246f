"""MLflow tracking server and model registry, kept in the cluster's site.

* The server is the community-charts ``mlflow`` chart (pinned in `versions`), run with
  MLflow's built-in ``basic-auth`` app: every request but ``/health`` needs a user; the
  admin's password is a Pulumi secret that reaches the pod only as a Kubernetes Secret.
* Backend store: PostgreSQL. On AWS an RDS instance of the foundation (CMK-encrypted,
  private subnets, password managed by Secrets Manager); on premises a CloudNativePG
  cluster (operator chart pinned here) on the site's storage class. Every client of it
  (the server, its schema migration, the Jobs making other databases on the instance)
  verifies the server's certificate and name (`DATABASE_SSL_MODE`) with its CA mounted.
* Artifacts are proxied by the server (``--serve-artifacts``), so only the server
  touches the store: on AWS the data bucket under ``mlflow/``, written with SSE-KMS
  under the stack's key through EKS Pod Identity (no static keys); on premises a
  volume on the site's checkpoint class (shared file system where the site has one).
* TLS only: a ghostunnel sidecar (pinned below) terminates TLS on the pod's 8443 with
  a certificate from the cluster CA and forwards to MLflow on the pod's loopback; the
  platform's Service ``mlflow`` (443) points at it, so teams reach
  ``https://mlflow.mlflow.svc.cluster.local``. MLflow itself listens on 5000 for the
  kubelet's probes (the chart's, plain HTTP), which no NetworkPolicy admits anyone else
  to. The chart's own Service (``mlflow-server``, port 80 to 5000) is therefore unused.
* Each team has its own MLflow user ``team-<name>`` (`team_username`), its credentials
  a Secret ``mlflow-credentials`` in the team namespace; a sidecar of the server
  (`user_sync_container`) keeps the server's users matching them through MLflow's user
  API, as the admin, on the pod's loopback.
* The ``mlflow`` namespace denies all traffic by default: the server accepts the team
  namespaces and Prometheus on 8443 only (and, where Kubeflow Pipelines runs, its
  runs' tracked steps: `modules.k8s.pipelines.manifests.tracking_allowance`, with their
  own user ``pipelines``), and reaches DNS and the
  database (and on EKS the S3 and STS endpoints and the Pod Identity agent); each team
  namespace gets an egress allowance to the server's 8443 and nothing else of it.
  Metrics are exposed with ``--expose-prometheus`` and scraped over TLS by a
  ServiceMonitor that logs in.

Charts and images cannot be pulled in the offline plan: ``pulumi up`` downloads them.
"""

from __future__ import annotations

import functools
import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from modules.k8s import netpol
from modules.k8s.common import Manifest, PlatformNamespace, metadata, system_node_selector
from modules.k8s.mirror import chart_image, mirror_image
from modules.k8s.names import MONITORING_NAMESPACE, TEAM_LABEL, TrackingAccess, team_namespace
from modules.k8s.pki.spec import CA_BUNDLE_SECRET, CA_KEY, service_dns_names, serving_certificate
from modules.k8s.security import restricted_container, restricted_pod
from modules.k8s.tenancy.spec import POD_IDENTITY_AGENT_CIDR, POD_IDENTITY_AGENT_PORT
from modules.k8s.tracking.spec import DatabaseBackupSpec, TrackingSpec
from modules.k8s.tracking.users import team_username
from modules.k8s.trainer.tracking import CREDENTIALS_FILE_KEY, mlflow_credentials_file
from modules.k8s.versions import CLOUDNATIVE_PG_POSTGRES_IMAGE

TRACKING_NAMESPACE = "mlflow"
CNPG_NAMESPACE = "cnpg-system"
RELEASE = "mlflow"
#: The chart's fullname (fullnameOverride): its Deployment and its own plain Service.
SERVER_NAME = "mlflow-server"
SERVICE_ACCOUNT = "mlflow"
#: MLflow's own port (plain HTTP): the kubelet's probes and the TLS proxy, nothing else.
SERVER_PORT = 5000
#: The TLS proxy's container port and name, and the platform's Service in front of it.
TLS_PORT = 8443
TLS_PORT_NAME = "https"
TLS_SERVICE = "mlflow"
TLS_SERVICE_PORT = 443
TLS_SECRET = "mlflow-tls"
TLS_DIR = "/etc/mlflow/tls"
#: What teams set as MLFLOW_TRACKING_URI.
TRACKING_URI = f"https://{TLS_SERVICE}.{TRACKING_NAMESPACE}.svc.cluster.local"
#: In each team namespace: the team's MLflow user (keys ``username``, ``password``).
TEAM_CREDENTIALS_SECRET = "mlflow-credentials"
#: In the tracking namespace: every team user's password, for the user-sync Job.
TEAM_USERS_SECRET = "mlflow-team-users"
USERS_FILE = "users.json"
#: The ConfigMap holding the user-sync sidecar's script, and the script: it runs in the
#: MLflow image, so it lives with the code that runs in containers (`workloads/`); it is
#: read here as text, never imported.
USER_SYNC_CONFIGMAP = "mlflow-user-sync"
SYNC_SCRIPT = Path(__file__).resolve().parents[3] / "workloads" / "tracking" / "sync_users.py"
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
#: libpq's TLS towards the database: the server's certificate must chain to the mounted
#: CA and name the host connected to (``require`` would encrypt without checking who
#: answers, and send the password to them).
DATABASE_SSL_MODE = "verify-full"
#: That CA, mounted at `DATABASE_CA_DIR` in every client of the database this namespace
#: runs (the server, its migration, and on AWS the Jobs that make the Feast registry's
#: and Kubeflow Pipelines' databases on the same instance): on AWS the ConfigMap
#: `DATABASE_CA_CONFIGMAP` of the region's RDS authorities (`database_ca_configmap`),
#: on premises the ``ca.crt`` (only: the Secret also holds the CA's key) of the Secret
#: CloudNativePG keeps its cluster's CA in (``<cluster>-ca``).
DATABASE_CA_CONFIGMAP = "mlflow-database-ca"
DATABASE_CA_SECRET = f"{DATABASE_CLUSTER}-ca"
DATABASE_CA_KEY = "ca.crt"
DATABASE_CA_VOLUME = "database-ca"
DATABASE_CA_DIR = "/etc/mlflow/database-ca"
#: The chart's ConfigMap of PGHOST, PGPORT and PGDATABASE (``<fullname>-env-configmap``).
ENV_CONFIGMAP = "mlflow-server-env-configmap"
ARTIFACT_CLAIM = "mlflow-artifacts"
ARTIFACT_MOUNT = "/mlartifacts"
#: MLflow's multiprocess metrics directory: /tmp is the chart's writable emptyDir (the
#: chart's own ``serviceMonitor`` option points it at a path under the read-only root).
METRICS_DIR = "/tmp/mlflow-metrics"
#: Image tag = the chart's appVersion, pinned here so a chart bump is a reviewed change.
IMAGE_TAG = "3.15.1"
#: Every image the tracking server's pods run, by repository under the stack's registry
#: (`TrackingSpec.registry`, or on AWS the stack's own ECR) -> (upstream image, tag) to
#: mirror it from (docs/lifecycle.md). Nothing is pulled from outside the country:
#:
#: * ``burakince/mlflow``: the chart's default image (MLflow with psycopg2, boto3 and
#:   prometheus-flask-exporter), the server, its migration and the user sync;
#: * ghostunnel (github.com/ghostunnel/ghostunnel v1.11.1, Apache-2.0), its distroless
#:   image: a TLS-terminating proxy that reloads its certificate (``--timed-reload``)
#:   when cert-manager renews it;
#: * ``busybox``: the chart's own init containers (its database connection check and
#:   its auth ini writer), at the tag the chart's values pin (``initImages``);
#: * on premises the database's PostgreSQL (CloudNativePG's operand image).
#: The ones only an on-premises stack runs (on AWS the database is RDS): the database's
#: PostgreSQL and CloudNativePG's operator (chart 0.29.0's appVersion, 1.30.0).
DATABASE_IMAGE = "tracking/postgresql"
DATABASE_OPERATOR_IMAGE = "tracking/cloudnative-pg"
MIRRORED_IMAGES: dict[str, tuple[str, str]] = {
    "tracking/mlflow": ("docker.io/burakince/mlflow", IMAGE_TAG),
    "tracking/ghostunnel": ("docker.io/ghostunnel/ghostunnel", "v1.11.1-distroless"),
    "tracking/busybox": ("docker.io/library/busybox", "1.38.0"),
    DATABASE_IMAGE: CLOUDNATIVE_PG_POSTGRES_IMAGE,
    DATABASE_OPERATOR_IMAGE: ("ghcr.io/cloudnative-pg/cloudnative-pg", "1.30.0"),
}


def mirrored_repositories(on_aws: bool) -> list[str]:
    """The repositories of `MIRRORED_IMAGES` the target's pods pull from."""
    onprem_only = (DATABASE_IMAGE, DATABASE_OPERATOR_IMAGE)
    return [name for name in MIRRORED_IMAGES if not (on_aws and name in onprem_only)]


def image(spec: TrackingSpec, repository: str) -> str:
    """``<registry>/<repository>:<tag>`` of one of `MIRRORED_IMAGES`; the registry must
    be resolved by then (the AWS foundation sets it)."""
    return mirror_image(spec.registry, "tracking", repository, MIRRORED_IMAGES[repository][1])


def _chart_image(spec: TrackingSpec, repository: str) -> dict[str, str]:
    """The chart's ``{repository, tag, pullPolicy}`` form of `image`."""
    return {**chart_image(image(spec, repository)), "pullPolicy": "Always"}


#: The chart's selector labels (``mlflow.selectorLabels``: chart name and release).
SERVER_POD_LABELS = {"app.kubernetes.io/name": "mlflow", "app.kubernetes.io/instance": RELEASE}
#: The platform's TLS Service carries these besides the server's labels (the
#: ServiceMonitor selects it, not the chart's plain Service).
TLS_SERVICE_LABELS = {**SERVER_POD_LABELS, "app.kubernetes.io/component": "tls-endpoint"}
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
        on_aws: the database is RDS (its CA is the ConfigMap `database_ca_configmap`),
            not CloudNativePG's cluster (its CA Secret), for `database_ca_volume`.
    """

    database_host: str
    database_secret: str
    auth_database_secret: str = ""
    bucket: str = ""
    artifact_prefix: str = ""
    kms_key_arn: str = ""
    region: str = ""
    on_aws: bool = False


TRACKING_NS = PlatformNamespace(TRACKING_NAMESPACE)
CNPG_NS = PlatformNamespace(CNPG_NAMESPACE)


def credentials_secret(
    name: str,
    username: str,
    password: pulumi.Input[str],
    secret_namespace: str = TRACKING_NAMESPACE,
    *,
    extra: dict[str, pulumi.Input[str]] | None = None,
) -> dict[str, pulumi.Input[Any]]:
    """An Opaque Secret with ``username`` and ``password`` (``stringData``: the provider
    stores it; the plan shows the password only as ``[secret]``), and ``extra`` keys
    made from them (secret too)."""
    data: dict[str, pulumi.Input[str]] = {
        "username": username,
        "password": pulumi.Output.secret(password),
    }
    data |= {key: pulumi.Output.secret(value) for key, value in (extra or {}).items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(name, secret_namespace),
        "type": "Opaque",
        "stringData": data,
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
    # The server's store and its auth app's both connect through libpq in this
    # container, without TLS settings of their own (``postgresql://`` and the auth ini's
    # URL): the environment's verify-full and CA apply to both.
    env: dict[str, Any] = database_tls_env()
    extra_volumes: list[dict[str, Any]] = [database_ca_volume(store.on_aws)]
    extra_mounts: list[dict[str, Any]] = [database_ca_mount()]
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
        # Every image from the mirror, pulled at each start (`modules.k8s.security.
        # pull_always`: Helm values do not pass through it).
        "image": _chart_image(spec, "tracking/mlflow"),
        "initImages": {
            "dbchecker": _chart_image(spec, "tracking/busybox"),
            "mlflowDbMigration": _chart_image(spec, "tracking/mlflow"),
            "iniFileInitializer": _chart_image(spec, "tracking/busybox"),
        },
        # The server needs no Kubernetes API; EKS Pod Identity mounts its own token.
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT, "automount": False},
        "podSecurityContext": {
            **restricted_pod(SERVER_UID),
            "fsGroupChangePolicy": "OnRootMismatch",
        },
        "securityContext": {**restricted_container(SERVER_UID), "privileged": False},
        "resources": _resources(spec),
        "nodeSelector": system_node_selector(),
        # The chart's own Service (plain, to 5000) always exists; nothing may reach it.
        "service": {"enabled": True, "type": "ClusterIP", "port": 80},
        "ingress": {"enabled": False},
        "telemetry": {"enabled": False},
        "backendStore": {
            # Schema migrations run in an init container before the server starts: ours
            # (`migration_container`), since the chart's gets neither extraEnvVars nor
            # extraVolumeMounts and so could not verify the database.
            "databaseMigration": False,
            "databaseConnectionCheck": True,
            "postgres": postgres,
            "existingDatabaseSecret": existing,
        },
        "artifactRoot": artifact_root,
        "initContainers": [migration_container(spec, store)],
        # The TLS proxy in front of MLflow and the teams' user sync (module docstring).
        "extraContainers": [tls_proxy_container(spec), user_sync_container(spec)],
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
        "extraVolumes": [
            *extra_volumes,
            {"name": "tls", "secret": {"secretName": TLS_SECRET, "defaultMode": 0o440}},
            *user_sync_volumes(),
        ],
        "extraVolumeMounts": extra_mounts,
    }


def database_tls_env() -> dict[str, str]:
    """libpq's settings for a client of the database: verify the server's certificate
    and name (`DATABASE_SSL_MODE`) against the CA `database_ca_mount` puts in place."""
    return {"PGSSLMODE": DATABASE_SSL_MODE, "PGSSLROOTCERT": f"{DATABASE_CA_DIR}/{DATABASE_CA_KEY}"}


def database_ca_volume(on_aws: bool) -> dict[str, Any]:
    """The volume of the database's CA (`DATABASE_CA_CONFIGMAP`): the RDS authorities'
    ConfigMap on AWS, only the ``ca.crt`` of CloudNativePG's CA Secret on premises."""
    items = [{"key": DATABASE_CA_KEY, "path": DATABASE_CA_KEY}]
    if on_aws:
        return {
            "name": DATABASE_CA_VOLUME,
            "configMap": {"name": DATABASE_CA_CONFIGMAP, "items": items},
        }
    return {
        "name": DATABASE_CA_VOLUME,
        "secret": {"secretName": DATABASE_CA_SECRET, "items": items},
    }


def database_ca_mount() -> dict[str, Any]:
    return {"name": DATABASE_CA_VOLUME, "mountPath": DATABASE_CA_DIR, "readOnly": True}


def database_ca_configmap(pem: str) -> Manifest:
    """On AWS: the region's RDS certificate authorities (``pem``,
    `modules.aws.database.ca_bundle`) in the ``mlflow`` namespace, for every database
    client there.

    Raises:
        ValueError: ``pem`` holds no certificate (the composition always gives one).
    """
    if "BEGIN CERTIFICATE" not in pem:
        raise ValueError("the tracking server on AWS needs the RDS CA bundle (database_ca)")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(DATABASE_CA_CONFIGMAP, TRACKING_NAMESPACE),
        "data": {DATABASE_CA_KEY: pem},
    }


#: What the chart's own migration container runs (its ``<fullname>-migrations``
#: ConfigMap for PostgreSQL): create the tables of a new database, upgrade an existing
#: one to this MLflow's schema. Connection settings come from libpq's environment.
MIGRATION_SCRIPT = (
    "from mlflow.store.db import utils\n"
    'engine = utils.create_sqlalchemy_engine_with_retry("postgresql://")\n'
    "utils._initialize_tables(engine)\n"
)


def migration_container(spec: TrackingSpec, store: StoreSettings) -> dict[str, Any]:
    """The schema migration before the server starts, in the server's image, as the
    chart's ``mlflow-db-migration`` is (its host, port and database from the chart's env
    ConfigMap, the user from the database Secret, the server's resources and security
    context), but verifying the database (`database_tls_env`, `database_ca_mount`)."""
    secret = store.database_secret
    return {
        "name": "mlflow-db-migration",
        "image": image(spec, "tracking/mlflow"),
        "imagePullPolicy": "Always",
        "command": ["python", "-c", MIGRATION_SCRIPT],
        "envFrom": [{"configMapRef": {"name": ENV_CONFIGMAP}}],
        "env": [
            *[
                {"name": env, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
                for env, key in (("PGUSER", "username"), ("PGPASSWORD", "password"))
            ],
            *[{"name": name, "value": value} for name, value in database_tls_env().items()],
        ],
        "resources": _resources(spec),
        "securityContext": {**restricted_container(SERVER_UID), "privileged": False},
        # The chart's /tmp emptyDir, as its migration container mounts it.
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, database_ca_mount()],
    }


def tls_proxy_container(spec: TrackingSpec) -> dict[str, Any]:
    """ghostunnel: TLS on the pod's 8443 (certificate from the cluster CA, re-read every
    hour), forwarding to MLflow on the pod's loopback only (ghostunnel refuses any other
    target unless told). No client certificates: MLflow authenticates every request."""
    return {
        "name": "tls-proxy",
        "image": image(spec, "tracking/ghostunnel"),
        "imagePullPolicy": "Always",
        "args": [
            "server",
            f"--listen=0.0.0.0:{TLS_PORT}",
            f"--target=127.0.0.1:{SERVER_PORT}",
            f"--cert={TLS_DIR}/tls.crt",
            f"--key={TLS_DIR}/tls.key",
            "--disable-authentication",
            "--timed-reload=1h",
        ],
        "ports": [{"name": TLS_PORT_NAME, "containerPort": TLS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": TLS_PORT_NAME}, "periodSeconds": 10},
        "livenessProbe": {"tcpSocket": {"port": TLS_PORT_NAME}, "periodSeconds": 30},
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "securityContext": restricted_container(SERVER_UID),
        "volumeMounts": [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}],
    }


def tls_certificate() -> Manifest:
    """The tracking endpoint's certificate: the names of the platform's Service, and
    ``localhost`` for ``kubectl port-forward`` (a laptop's client checks the name)."""
    names = [*service_dns_names(TLS_SERVICE, TRACKING_NAMESPACE), "localhost"]
    return serving_certificate(TLS_SECRET, TRACKING_NAMESPACE, names)


def tls_service() -> Manifest:
    """``mlflow`` on 443: the TLS proxy of every server pod."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(TLS_SERVICE, TRACKING_NAMESPACE, labels=TLS_SERVICE_LABELS),
        "spec": {
            "type": "ClusterIP",
            "selector": dict(SERVER_POD_LABELS),
            "ports": [
                {
                    "name": TLS_PORT_NAME,
                    "port": TLS_SERVICE_PORT,
                    "targetPort": TLS_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def cloudnative_pg_values(spec: TrackingSpec) -> dict[str, Any]:
    """Values of the CloudNativePG operator chart: on the system pool, with limits, its
    image from the tracking server's mirror (`MIRRORED_IMAGES`), pulled at each start."""
    amount = {"cpu": "500m", "memory": "512Mi"}
    return {
        "image": _chart_image(spec, DATABASE_OPERATOR_IMAGE),
        "nodeSelector": system_node_selector(),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": amount},
        "monitoring": {"podMonitorEnabled": False},
    }


#: The database's backups on premises: the object store's access key (the Secret's
#: keys are CloudNativePG's usual names), the CA bundle of the object store, and the
#: schedule of base backups.
BACKUP_CREDENTIALS_SECRET = "mlflow-db-backup-credentials"
BACKUP_ACCESS_KEY_ID = "ACCESS_KEY_ID"
BACKUP_SECRET_ACCESS_KEY = "ACCESS_SECRET_KEY"
BACKUP_CA_SECRET = "mlflow-db-backup-ca"
SCHEDULED_BACKUP = "mlflow-db-daily"


def database_backup(backup: DatabaseBackupSpec) -> Manifest:
    """The ``Cluster``'s ``spec.backup``: Barman Cloud to the site's object store over
    TLS (the site's CA where given), with the access key from a Secret, every base
    backup and WAL file compressed and encrypted by the object store, base backups
    taken from a standby where there is one, and ``retentionPolicy`` in days (the
    operator deletes older backups and the WAL they need).

    CloudNativePG 1.26 deprecated this in-tree Barman Cloud support in favour of its
    Barman Cloud plugin; it remains functional in the operator the platform pins
    (1.30.0). Moving to the plugin is a migration of its own (docs/recovery.md)."""
    store: Manifest = {
        "destinationPath": backup.destination_path,
        "endpointURL": backup.endpoint_url,
        "s3Credentials": {
            "accessKeyId": {"name": BACKUP_CREDENTIALS_SECRET, "key": BACKUP_ACCESS_KEY_ID},
            "secretAccessKey": {
                "name": BACKUP_CREDENTIALS_SECRET,
                "key": BACKUP_SECRET_ACCESS_KEY,
            },
        },
        "data": {"compression": "gzip", "encryption": backup.encryption},
        "wal": {"compression": "gzip", "encryption": backup.encryption, "maxParallel": 2},
    }
    if backup.endpoint_ca:
        store["endpointCA"] = {"name": BACKUP_CA_SECRET, "key": CA_KEY}
    return {
        "barmanObjectStore": store,
        "retentionPolicy": f"{backup.retention_days}d",
        "target": "prefer-standby",
    }


def backup_credentials_secret(
    access_key_id: pulumi.Input[str], secret_access_key: pulumi.Input[str]
) -> Manifest:
    """The object store's access key (secret config values, never in the stack file)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(BACKUP_CREDENTIALS_SECRET, TRACKING_NAMESPACE),
        "type": "Opaque",
        "stringData": {
            BACKUP_ACCESS_KEY_ID: access_key_id,
            BACKUP_SECRET_ACCESS_KEY: secret_access_key,
        },
    }


def backup_ca_secret(backup: DatabaseBackupSpec) -> Manifest:
    """The CA bundle barman-cloud verifies the object store's certificate with."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(BACKUP_CA_SECRET, TRACKING_NAMESPACE),
        "type": "Opaque",
        "stringData": {CA_KEY: backup.endpoint_ca},
    }


def scheduled_backup(backup: DatabaseBackupSpec) -> Manifest:
    """Base backups of the database on ``backup.schedule`` (the first one at once), each
    ``Backup`` object owned by this schedule; WAL is archived continuously between them."""
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "ScheduledBackup",
        "metadata": metadata(SCHEDULED_BACKUP, TRACKING_NAMESPACE),
        "spec": {
            "cluster": {"name": DATABASE_CLUSTER},
            "schedule": backup.schedule,
            "method": "barmanObjectStore",
            "immediate": True,
            "backupOwnerReference": "self",
        },
    }


def database_cluster(spec: TrackingSpec, storage_class: str) -> Manifest:
    """The CloudNativePG ``Cluster`` holding MLflow's database on premises.

    The volume is on the site's storage class; whether that class encrypts at rest is
    the site's to guarantee (this layer cannot see into the storage backend). With
    ``spec.database_backup`` it archives to the site's object store (`database_backup`).
    """
    amount = {"cpu": "1", "memory": "2Gi"}
    cluster_spec: Manifest = {
        "instances": spec.database_instances,
        "imageName": image(spec, DATABASE_IMAGE),
        "primaryUpdateStrategy": "unsupervised",
        "enableSuperuserAccess": False,
        "bootstrap": {"initdb": {"database": DATABASE_NAME, "owner": DATABASE_NAME}},
        "storage": {"storageClass": storage_class, "size": f"{spec.database_storage_gib}Gi"},
        "resources": {"requests": dict(amount), "limits": dict(amount)},
        "affinity": {"nodeSelector": system_node_selector(), "enablePodAntiAffinity": True},
        "enablePDB": spec.database_instances > 1,
    }
    if spec.database_backup is not None:
        cluster_spec["backup"] = database_backup(spec.database_backup)
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": metadata(DATABASE_CLUSTER, TRACKING_NAMESPACE),
        "spec": cluster_spec,
    }


def database_secret_name(on_aws: bool) -> str:
    """The Secret holding the database user: ours on AWS, CloudNativePG's on premises."""
    return DATABASE_SECRET if on_aws else f"{DATABASE_CLUSTER}-app"


def database_host(on_aws: bool, rds_host: str = "") -> str:
    """The database host: the RDS address, or CloudNativePG's read-write service (one of
    the names its server certificate carries: ``<service>``, ``.<namespace>``,
    ``.svc`` and ``.svc.<cluster domain>``, operator 1.30's ``GetClusterAltDNSNames``),
    which verify-full checks."""
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


#: CloudNativePG's instance manager (status, 8000) and PostgreSQL's exporter (9187).
CNPG_STATUS_PORT = 8000
CNPG_METRICS_PORT = 9187
#: The CloudNativePG operator's pods and admission webhook port (9443).
CNPG_OPERATOR_LABELS = {"app.kubernetes.io/name": "cloudnative-pg"}
CNPG_WEBHOOK_PORT = 9443


def server_network_policies(
    network: netpol.ClusterNetwork,
    vpc_cidr: pulumi.Input[str] | None,
    backup: DatabaseBackupSpec | None = None,
) -> list[Manifest]:
    """The ``mlflow`` namespace: default deny and DNS; the server pods accept the team
    namespaces (any namespace labelled with a team) and Prometheus on the TLS port only,
    and reach the database (on EKS also the Pod Identity agent and HTTPS inside the VPC:
    the S3 and STS endpoints). On premises, CloudNativePG's instances accept PostgreSQL from the
    server, each other and the operator (which also reads their status), Prometheus'
    scrape of their exporter, and reach each other and the API server; with
    ``backup``, also the site's object store at its declared addresses and port (WAL
    archiving from the primary, base backups from a standby), and nowhere else."""
    ns = TRACKING_NAMESPACE
    server = {"matchLabels": dict(SERVER_POD_LABELS)}
    egress: list[Manifest] = []
    if vpc_cidr is None:
        database_peer: Manifest = {
            "podSelector": {"matchLabels": {CNPG_CLUSTER_LABEL: DATABASE_CLUSTER}}
        }
        egress.append({"to": [database_peer], "ports": netpol.tcp(DATABASE_PORT)})
    else:
        egress += [
            {"to": netpol.cidr_peers([vpc_cidr]), "ports": netpol.tcp(DATABASE_PORT, 443)},
            {
                "to": netpol.cidr_peers([POD_IDENTITY_AGENT_CIDR]),
                "ports": netpol.tcp(POD_IDENTITY_AGENT_PORT),
            },
        ]
    policies = [
        *netpol.baseline(ns, network, api_server=False),
        netpol.policy(
            ns,
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
                            netpol.namespace_peer(MONITORING_NAMESPACE),
                        ],
                        "ports": netpol.tcp(TLS_PORT),
                    }
                ],
                "egress": egress,
            },
        ),
    ]
    if vpc_cidr is None:
        instances = {CNPG_CLUSTER_LABEL: DATABASE_CLUSTER}
        policies += [
            netpol.policy(
                ns,
                "mlflow-database",
                {
                    "podSelector": netpol.pods(instances),
                    "policyTypes": ["Ingress", "Egress"],
                    "ingress": [
                        {
                            "from": [
                                {"podSelector": server},
                                netpol.same_namespace_peer(instances),
                            ],
                            "ports": netpol.tcp(DATABASE_PORT),
                        },
                        # The operator talks to each instance's manager and to PostgreSQL.
                        {
                            "from": [netpol.namespace_peer(CNPG_NAMESPACE)],
                            "ports": netpol.tcp(CNPG_STATUS_PORT, DATABASE_PORT),
                        },
                        {
                            "from": [netpol.namespace_peer(MONITORING_NAMESPACE)],
                            "ports": netpol.tcp(CNPG_METRICS_PORT),
                        },
                    ],
                    # Replication between the instances; their managers watch the API.
                    "egress": [
                        {
                            "to": [netpol.same_namespace_peer(instances)],
                            "ports": netpol.tcp(DATABASE_PORT, CNPG_STATUS_PORT),
                        }
                    ],
                },
            ),
            netpol.allow_api_server(
                ns, network, pod_labels=instances, name="mlflow-database-api-server"
            ),
        ]
        if backup is not None:
            policies.append(
                netpol.allow_egress(
                    ns,
                    "mlflow-database-backup",
                    netpol.cidr_peers(backup.endpoint_cidrs),
                    netpol.tcp(backup.endpoint_port),
                    pod_labels=instances,
                )
            )
    return policies


def cnpg_network_policies(network: netpol.ClusterNetwork) -> list[Manifest]:
    """The CloudNativePG operator reaches DNS, the API server and the database instances
    (their manager and PostgreSQL); the API server calls its webhook."""
    ns = CNPG_NAMESPACE
    return [
        *netpol.baseline(ns, network),
        netpol.allow_from_api_server(
            ns, network, netpol.tcp(CNPG_WEBHOOK_PORT), pod_labels=CNPG_OPERATOR_LABELS
        ),
        netpol.allow_egress(
            ns,
            "allow-database-instances",
            [netpol.namespace_peer(TRACKING_NAMESPACE, {CNPG_CLUSTER_LABEL: DATABASE_CLUSTER})],
            netpol.tcp(CNPG_STATUS_PORT, DATABASE_PORT),
            pod_labels=CNPG_OPERATOR_LABELS,
        ),
    ]


def team_egress_policy(team: str) -> Manifest:
    """Lets a team namespace's pods reach the tracking server's TLS port (their
    namespace denies all egress by default) and nothing else of the ``mlflow``
    namespace."""
    return netpol.allow_egress(
        team_namespace(team),
        "allow-mlflow",
        [netpol.namespace_peer(TRACKING_NAMESPACE, SERVER_POD_LABELS)],
        netpol.tcp(TLS_PORT),
    )


def service_monitor(scrape_interval_seconds: int) -> Manifest:
    """Scrapes the server's ``/metrics`` through the TLS Service (verifying the
    certificate with the cluster CA). Basic auth protects every path but ``/health``,
    so Prometheus logs in with the admin Secret (MLflow has no read-only role that a
    config file could create)."""
    credentials = {
        "username": {"name": ADMIN_SECRET, "key": "username"},
        "password": {"name": ADMIN_SECRET, "key": "password"},
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(TLS_SERVICE, TRACKING_NAMESPACE),
        "spec": {
            "selector": {"matchLabels": dict(TLS_SERVICE_LABELS)},
            "namespaceSelector": {"matchNames": [TRACKING_NAMESPACE]},
            "endpoints": [
                {
                    "port": TLS_PORT_NAME,
                    "scheme": "https",
                    "tlsConfig": {
                        "ca": {"secret": {"name": TLS_SECRET, "key": CA_KEY}},
                        "serverName": f"{TLS_SERVICE}.{TRACKING_NAMESPACE}.svc",
                    },
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


# -- the teams' MLflow users --------------------------------------------------------


def team_tracking_access() -> TrackingAccess:
    """What a team's job is given to reach the server: the URI, the team's credentials
    Secret and the cluster CA (both in the team's namespace)."""
    return TrackingAccess(TRACKING_URI, TEAM_CREDENTIALS_SECRET, CA_BUNDLE_SECRET, CA_KEY)


def team_credentials_secret(team: str, password: pulumi.Input[str]) -> Manifest:
    """The team's MLflow credentials in its own namespace (what its jobs read):
    ``username`` and ``password``, and the same login as MLflow's own credentials file
    (``credentials``, `mlflow_credentials_file`), which the training pods mount."""
    username = team_username(team)
    as_file = pulumi.Output.from_input(password).apply(
        functools.partial(mlflow_credentials_file, username)
    )
    return credentials_secret(
        TEAM_CREDENTIALS_SECRET,
        username,
        password,
        team_namespace(team),
        extra={CREDENTIALS_FILE_KEY: as_file},
    )


def team_users_secret(users: pulumi.Input[str]) -> Manifest:
    """Every team's and platform service's user password, as the user-sync sidecar
    reads them (`users_json`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(TEAM_USERS_SECRET, TRACKING_NAMESPACE),
        "type": "Opaque",
        "stringData": {USERS_FILE: pulumi.Output.secret(users)},
    }


def user_sync_configmap() -> Manifest:
    """The user-sync script (`workloads/tracking/sync_users.py`, standard library
    only: it runs in the MLflow image)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(USER_SYNC_CONFIGMAP, TRACKING_NAMESPACE),
        "data": {SYNC_SCRIPT.name: SYNC_SCRIPT.read_text(encoding="utf-8")},
    }


def user_sync_container(spec: TrackingSpec) -> dict[str, Any]:
    """The sidecar that keeps MLflow's users matching the teams' credentials
    (`sync_users.py`): it calls the server's user API on the pod's loopback as the
    admin, at start and whenever the mounted users Secret changes."""
    admin = {"MLFLOW_TRACKING_USERNAME": "username", "MLFLOW_TRACKING_PASSWORD": "password"}
    return {
        "name": "user-sync",
        "image": image(spec, "tracking/mlflow"),
        "imagePullPolicy": "Always",
        "command": ["python", f"/scripts/{SYNC_SCRIPT.name}"],
        "env": [
            {"name": "MLFLOW_TRACKING_URI", "value": f"http://127.0.0.1:{SERVER_PORT}"},
            {"name": "USERS_FILE", "value": f"/users/{USERS_FILE}"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            *[
                {"name": env, "valueFrom": {"secretKeyRef": {"name": ADMIN_SECRET, "key": key}}}
                for env, key in admin.items()
            ],
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"},
        },
        "securityContext": restricted_container(SERVER_UID),
        "volumeMounts": [
            {"name": "user-sync-script", "mountPath": "/scripts", "readOnly": True},
            {"name": "team-users", "mountPath": "/users", "readOnly": True},
        ],
    }


def user_sync_volumes() -> list[dict[str, Any]]:
    return [
        {"name": "user-sync-script", "configMap": {"name": USER_SYNC_CONFIGMAP}},
        {"name": "team-users", "secret": {"secretName": TEAM_USERS_SECRET, "defaultMode": 0o440}},
    ]
