"""Typed settings of the MLflow tracking server and what it needs from elsewhere.

`TrackingSpec` is the stack-file section ``uae-gpu-platform:tracking``; `TrackingInputs`
carries what the composition hands the Kubernetes layer (the admin password, a Pulumi
secret, and on AWS the RDS database and the artifact bucket). Kept apart from the
objects (`manifests`) and the component: the aggregate `modules.k8s.platform.spec`
imports these settings only.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import pulumi

from modules.validation import Checker, TextFormat, bounded

#: RDS instance classes of the burstable and general-purpose families MLflow's small,
#: mostly-idle database fits (``db.t4g.medium``, ``db.m7g.large`` ...).
_INSTANCE_CLASS = TextFormat(
    r"^db\.[a-z][a-z0-9]*\.[a-z0-9]+$",
    "an RDS instance class such as db.t4g.medium",
)
_USERNAME = TextFormat(
    r"^[a-z][a-z0-9_]{0,30}$",
    "use up to 31 lowercase letters, digits and underscores, starting with a letter",
)

Permission = Literal["READ", "EDIT", "MANAGE", "NO_PERMISSIONS"]
#: Server-side encryption barman-cloud asks the object store for (the values
#: CloudNativePG's ``barmanObjectStore.data/wal.encryption`` accepts).
BackupEncryption = Literal["AES256", "aws:kms"]
# s3://bucket[/prefix]: a bucket name as S3 and Ceph RGW accept it, then a key prefix.
_DESTINATION = TextFormat(
    r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?$",
    "s3://<bucket>[/<prefix>] in the site's object store",
)
# robfig/cron with seconds (CloudNativePG's ScheduledBackup): six fields.
_SIX_FIELD_CRON = TextFormat(
    r"^(\S+\s+){5}\S+$",
    "six cron fields, seconds first (e.g. '0 0 2 * * *' for 02:00 every day)",
)
#: CloudNativePG's retentionPolicy unit is days, weeks or months; the platform keeps days.
MAX_BACKUP_RETENTION_DAYS = 3650


@dataclass(frozen=True)
class DatabaseBackupSpec:
    """Scheduled backups of the on-premises tracking database to the site's object store
    (CloudNativePG's Barman Cloud: continuous WAL archiving plus base backups; config key
    ``uae-gpu-platform:tracking.databaseBackup``). The access key is not here: it is the
    secret config pair ``trackingBackupAccessKeyId`` / ``trackingBackupSecretAccessKey``.

    Args:
        destination_path: ``s3://<bucket>[/<prefix>]`` in the site's object store; the
            bucket must exist (Barman Cloud 3.16 and later do not create it).
        endpoint_url: the site's S3-compatible object store, ``https://host[:port]``
            (TLS only).
        endpoint_cidrs: the object store's addresses (private IPv4 CIDRs, in the site):
            the database's only way out besides its peers and the API server, so a
            name that resolves elsewhere cannot be reached.
        endpoint_ca: the PEM certificate of the CA the object store's certificate chains
            to (empty: the PostgreSQL image's system CAs).
        schedule: when base backups run, six cron fields with seconds first, UTC
            (default ``0 0 2 * * *``: 02:00 every day). WAL is archived continuously.
        retention_days: how long backups (and the WAL they need) are kept (default 30):
            CloudNativePG deletes older ones.
        encryption: the server-side encryption barman-cloud requests for every base
            backup and WAL file (``AES256``, default, or ``aws:kms``).
    """

    destination_path: str
    endpoint_url: str
    endpoint_cidrs: tuple[str, ...]
    endpoint_ca: str = ""
    schedule: str = "0 0 2 * * *"
    retention_days: int = 30
    encryption: BackupEncryption = "AES256"

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("destination_path", self.destination_path, _DESTINATION)
        url = urllib.parse.urlsplit(self.endpoint_url)
        check.require(
            url.scheme == "https" and bool(url.hostname) and url.path in ("", "/"),
            "endpoint_url",
            self.endpoint_url,
            "https://<host>[:<port>] of the site's object store (TLS only)",
        )
        check.require(
            bool(self.endpoint_cidrs),
            "endpoint_cidrs",
            [],
            "list the object store's addresses (e.g. 10.20.8.0/24): the database may reach "
            "nothing else",
        )
        for key, cidr, network in check.ipv4_networks("endpoint_cidrs", self.endpoint_cidrs):
            check.require(
                network.is_private and network.prefixlen > 0,
                key,
                cidr,
                "a private address range of the site (backups stay in the site)",
            )
        check.require(
            self.endpoint_ca == "" or self.endpoint_ca.lstrip().startswith("-----BEGIN"),
            "endpoint_ca",
            "(given)",
            "a PEM certificate (-----BEGIN CERTIFICATE-----...) or empty",
        )
        check.matches("schedule", self.schedule, _SIX_FIELD_CRON)
        check.within("retention_days", self.retention_days, 1, MAX_BACKUP_RETENTION_DAYS)
        check.one_of(
            "encryption",
            self.encryption,
            get_args(BackupEncryption),
            "backups are never written unencrypted",
        )
        check.done()

    @property
    def endpoint_port(self) -> int:
        """The object store's port (443 unless the URL names one)."""
        return urllib.parse.urlsplit(self.endpoint_url).port or 443


@dataclass(frozen=True)
class TrackingSpec:
    """MLflow tracking server and model registry (config key ``uae-gpu-platform:tracking``).

    Args:
        enabled: deploy the tracking server (default true).
        admin_username: MLflow's built-in basic-auth admin (default ``admin``); its
            password is the secret config value ``trackingAdminPassword``.
        default_permission: what an authenticated user may do with experiments and
            models others created: ``READ`` (default), ``EDIT``, ``MANAGE`` or
            ``NO_PERMISSIONS``.
        replicas: tracking server pods (default 1; 2 or more for no downtime on a node
            drain: the server is stateless, the database and artifacts hold the state).
        cpu_millicores: CPU request and limit of a server pod (default 1000).
        memory_mib: memory request and limit of a server pod (default 2048).
        database_instance_class: RDS instance class on AWS (default ``db.t4g.medium``).
        database_storage_gib: database storage in GiB (default 20; RDS grows it up to
            ``database_max_storage_gib``; on premises the volume's size).
        database_max_storage_gib: RDS storage autoscaling ceiling (default 100).
        database_backup_retention_days: automated backups kept (default 7, 1 to 35).
        database_multi_az: a standby in another zone on AWS (default false).
        database_instances: PostgreSQL instances on premises (CloudNativePG primary plus
            replicas, default 2).
        artifact_storage_gib: size of the artifact volume on premises (default 100); on
            AWS artifacts go to the data bucket under ``mlflow/``.
        database_backup: on premises, scheduled backups of the database to the site's
            object store (`DatabaseBackupSpec`); ``null`` for none. On AWS the RDS
            instance's automated backups and AWS Backup (``backup``) keep it.
        registry: where the tracking server's images are pulled from, ``host[/path]``
            holding the mirrors `modules.k8s.tracking.manifests.MIRRORED_IMAGES` names
            (``<registry>/tracking/mlflow:3.15.1`` ...). AWS stacks leave it unset and
            get one ECR repository per image in their own registry; required on
            premises (the site's registry, or the UAE region's ECR).
    """

    enabled: bool = True
    admin_username: str = "admin"
    default_permission: Permission = "READ"
    replicas: int = bounded(1, 10, default=1)
    cpu_millicores: int = bounded(250, 16_000, default=1000)
    memory_mib: int = bounded(512, 65_536, default=2048)
    database_instance_class: str = "db.t4g.medium"
    database_storage_gib: int = bounded(20, 65_536, default=20)
    database_max_storage_gib: int = 100
    database_backup_retention_days: int = bounded(1, 35, default=7)
    database_multi_az: bool = False
    database_instances: int = bounded(1, 5, default=2)
    artifact_storage_gib: int = bounded(1, 65_536, default=100)
    database_backup: DatabaseBackupSpec | None = None
    registry: str | None = None

    def __post_init__(self) -> None:
        check = Checker()
        check.matches("admin_username", self.admin_username, _USERNAME)
        check.registry("registry", self.registry)
        check.one_of("default_permission", self.default_permission, get_args(Permission))
        check.ranges(self)
        check.require(
            self.database_max_storage_gib >= self.database_storage_gib
            and self.database_max_storage_gib <= 65_536,
            "database_max_storage_gib",
            self.database_max_storage_gib,
            f"use {self.database_storage_gib} (databaseStorageGib) to 65536",
        )
        check.matches("database_instance_class", self.database_instance_class, _INSTANCE_CLASS)
        check.require(
            not self.database_instance_class.endswith((".micro", ".small")),
            "database_instance_class",
            self.database_instance_class,
            "use medium or larger: micro and small classes have no Performance Insights "
            "(which the platform turns on, encrypted with the stack's key)",
        )
        check.done()


@dataclass(frozen=True)
class TrackingStoreInputs:
    """Where the tracking server keeps its state on AWS (outputs of the foundation).

    Args:
        database_host: the RDS instance's address.
        database_port: its port (5432).
        database_name: the database MLflow uses.
        database_username: the RDS master user name.
        database_password: the master password, as Secrets Manager holds it (a secret).
        bucket_name: the stack's data bucket.
        artifact_prefix: the key prefix of MLflow's artifacts, e.g. ``mlflow/``.
        storage_key_arn: the CMK every artifact is written with (SSE-KMS).
        database_ca: the PEM certificates of RDS's authorities in the region
            (`modules.aws.database.ca_bundle`): the database's clients verify it.
    """

    database_host: pulumi.Input[str]
    database_port: int
    database_name: str
    database_username: str
    database_password: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    artifact_prefix: str
    storage_key_arn: pulumi.Input[str]
    database_ca: str = ""


@dataclass(frozen=True)
class TrackingInputs:
    """What the tracking server needs besides its spec.

    Args:
        admin_password: the basic-auth admin password (a Pulumi secret).
        store: the RDS database and artifact bucket on AWS; ``None`` on premises, where
            the database is a CloudNativePG cluster and artifacts a volume.
        team_passwords: team name -> its MLflow user's password as an in-region secret
            store holds it (on AWS: the team's Secrets Manager secret); a team left out
            gets `modules.k8s.tracking.users.team_password` of the admin password.
        backup_credentials: on premises with ``database_backup``, the object store's
            access key id and secret access key (Pulumi secrets); ``None`` otherwise.
        service_passwords: MLflow user name -> password of each platform service user
            the server must know besides the teams' (the Kubeflow Pipelines runs'
            ``pipelines`` where pipelines are enabled; empty otherwise). Their
            credentials Secrets live with the service (`modules.k8s.pipelines`).
    """

    admin_password: pulumi.Input[str]
    store: TrackingStoreInputs | None = None
    team_passwords: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    backup_credentials: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    service_passwords: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
