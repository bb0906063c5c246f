"""Typed settings of the MLflow tracking server and what it needs from elsewhere.

`TrackingSpec` is the stack-file section ``uae-gpu-platform:tracking``; `TrackingInputs`
carries what the composition hands the Kubernetes layer (the admin password, a Pulumi
secret, and on AWS the RDS database and the artifact bucket). Kept apart from the
objects (`manifests`) and the component: the aggregate `modules.k8s.platform.spec`
imports these settings only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi

from modules.validation import Checker

#: RDS instance classes of the burstable and general-purpose families MLflow's small,
#: mostly-idle database fits (``db.t4g.medium``, ``db.m7g.large`` ...).
_INSTANCE_CLASS = re.compile(r"^db\.[a-z][a-z0-9]*\.[a-z0-9]+$")
_USERNAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")

Permission = Literal["READ", "EDIT", "MANAGE", "NO_PERMISSIONS"]


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
    """

    enabled: bool = True
    admin_username: str = "admin"
    default_permission: Permission = "READ"
    replicas: int = 1
    cpu_millicores: int = 1000
    memory_mib: int = 2048
    database_instance_class: str = "db.t4g.medium"
    database_storage_gib: int = 20
    database_max_storage_gib: int = 100
    database_backup_retention_days: int = 7
    database_multi_az: bool = False
    database_instances: int = 2
    artifact_storage_gib: int = 100

    def __post_init__(self) -> None:
        check = Checker()
        check.require(
            bool(_USERNAME.match(self.admin_username)),
            "admin_username",
            self.admin_username,
            "use up to 31 lowercase letters, digits and underscores, starting with a letter",
        )
        check.require(
            self.default_permission in ("READ", "EDIT", "MANAGE", "NO_PERMISSIONS"),
            "default_permission",
            self.default_permission,
            "one of 'READ', 'EDIT', 'MANAGE', 'NO_PERMISSIONS'",
        )
        ranges = {
            "replicas": (1, 10),
            "cpu_millicores": (250, 16_000),
            "memory_mib": (512, 65_536),
            "database_storage_gib": (20, 65_536),
            "database_backup_retention_days": (1, 35),
            "database_instances": (1, 5),
            "artifact_storage_gib": (1, 65_536),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            check.require(low <= value <= high, name, value, f"use {low} to {high}")
        check.require(
            self.database_max_storage_gib >= self.database_storage_gib
            and self.database_max_storage_gib <= 65_536,
            "database_max_storage_gib",
            self.database_max_storage_gib,
            f"use {self.database_storage_gib} (databaseStorageGib) to 65536",
        )
        check.require(
            bool(_INSTANCE_CLASS.match(self.database_instance_class)),
            "database_instance_class",
            self.database_instance_class,
            "an RDS instance class such as db.t4g.medium",
        )
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
    """

    database_host: pulumi.Input[str]
    database_port: int
    database_name: str
    database_username: str
    database_password: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    artifact_prefix: str
    storage_key_arn: pulumi.Input[str]


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
    """

    admin_password: pulumi.Input[str]
    store: TrackingStoreInputs | None = None
    team_passwords: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
