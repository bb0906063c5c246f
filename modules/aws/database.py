"""The tracking server's PostgreSQL database on RDS: in the stack's region, in its
private subnets, reachable only from the cluster, encrypted with the stack's key, its
master password held and rotated by Secrets Manager under the stack's secrets key."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws

from modules.aws.private_data_store import (
    DataStorePlacement,
    StoreAccess,
    private_data_store_network,
)
from modules.component_base import AwsComponent, Outputs

POSTGRES_PORT = 5432
#: MLflow's database and the RDS master user (MLflow is the only client).
DATABASE_NAME = "mlflow"
MASTER_USERNAME = "mlflow"
#: The database is reached on PostgreSQL's port from the EKS cluster only.
ACCESS = StoreAccess(
    POSTGRES_PORT,
    "postgres",
    "MLflow database: PostgreSQL from the EKS cluster only",
    "PostgreSQL from the cluster's nodes and pods",
)


#: The certificate authority of the instance's server certificate (RDS's identifier), and
#: the folder of each region's RDS root certificates (``<region>-bundle.pem``, with their
#: source), which clients that verify the database mount.
CA_CERT_IDENTIFIER = "rds-ca-rsa2048-g1"
CA_BUNDLES = Path(__file__).resolve().parent / "rds_ca"


def ca_bundle(region: str) -> str:
    """The PEM certificates of RDS's certificate authorities in ``region`` (the file's
    comments, before the first certificate, say where they come from).

    Raises:
        ValueError: the repository holds no bundle for ``region``.
    """
    path = CA_BUNDLES / f"{region}-bundle.pem"
    if not path.is_file():
        raise ValueError(f"no RDS CA bundle for {region} in {CA_BUNDLES}; add AWS's")
    return path.read_text(encoding="utf-8")


def parameter_family(major_version: str) -> str:
    """The parameter group family of a PostgreSQL major version (``17`` -> ``postgres17``)."""
    return f"postgres{major_version}"


def tls_only_parameters() -> dict[str, str]:
    """Refuse unencrypted connections; log connections for the audit trail."""
    return {"rds.force_ssl": "1", "log_connections": "1"}


def master_password(secret_string: str) -> str:
    """The password in an RDS-managed master secret (``{"username", "password"}``)."""
    return str(json.loads(secret_string)["password"])


@dataclass(frozen=True)
class TrackingDatabaseArgs:
    """Args of `TrackingDatabase`.

    Args:
        name_prefix: stem of the AWS names (``<prefix>-mlflow``).
        placement: the stack's VPC, its private subnets, and the one security group
            admitted on 5432 (`DataStorePlacement`).
        storage_key_arn: CMK encrypting storage, snapshots and Performance Insights.
        secrets_key_arn: CMK encrypting the Secrets Manager master secret.
        engine_major_version: PostgreSQL major version (e.g. ``"17"``).
        instance_class: RDS instance class.
        storage_gib: allocated storage (GiB).
        max_storage_gib: storage autoscaling ceiling (GiB).
        backup_retention_days: automated backups kept (1 to 35).
        multi_az: a synchronous standby in another zone.
    """

    name_prefix: str
    placement: DataStorePlacement
    storage_key_arn: pulumi.Input[str]
    secrets_key_arn: pulumi.Input[str]
    engine_major_version: str
    instance_class: str
    storage_gib: int
    max_storage_gib: int
    backup_retention_days: int
    multi_az: bool


class TrackingDatabase(AwsComponent[TrackingDatabaseArgs]):
    """RDS for PostgreSQL for MLflow's backend store (protected: it is data)."""

    instance: aws.rds.Instance

    def declare(self, name: str, args: TrackingDatabaseArgs) -> Outputs:
        child = pulumi.ResourceOptions(parent=self)
        identifier = f"{args.name_prefix}-mlflow"
        network = private_data_store_network(
            name, aws.rds.SubnetGroup, identifier, args.placement, access=ACCESS, opts=child
        )
        parameters = aws.rds.ParameterGroup(
            name,
            name=identifier,
            family=parameter_family(args.engine_major_version),
            description="MLflow database: TLS only",
            parameters=[
                aws.rds.ParameterGroupParameterArgs(name=key, value=value)
                for key, value in tls_only_parameters().items()
            ],
            opts=child,
        )
        self.instance = aws.rds.Instance(
            name,
            identifier=identifier,
            engine="postgres",
            engine_version=args.engine_major_version,
            auto_minor_version_upgrade=True,
            instance_class=args.instance_class,
            allocated_storage=args.storage_gib,
            max_allocated_storage=args.max_storage_gib,
            storage_type="gp3",
            storage_encrypted=True,
            kms_key_id=args.storage_key_arn,
            db_name=DATABASE_NAME,
            username=MASTER_USERNAME,
            # No password in code or state: Secrets Manager creates and rotates it,
            # encrypted with the stack's secrets key.
            manage_master_user_password=True,
            master_user_secret_kms_key_id=args.secrets_key_arn,
            iam_database_authentication_enabled=True,
            db_subnet_group_name=network.subnet_group.name,
            vpc_security_group_ids=[network.security_group.id],
            parameter_group_name=parameters.name,
            publicly_accessible=False,
            multi_az=args.multi_az,
            port=POSTGRES_PORT,
            ca_cert_identifier=CA_CERT_IDENTIFIER,
            backup_retention_period=args.backup_retention_days,
            copy_tags_to_snapshot=True,
            delete_automated_backups=False,
            deletion_protection=True,
            skip_final_snapshot=False,
            final_snapshot_identifier=f"{identifier}-final",
            performance_insights_enabled=True,
            performance_insights_kms_key_id=args.storage_key_arn,
            performance_insights_retention_period=7,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        return {"address": self.instance.address, "identifier": self.instance.identifier}

    def password(self, invoke: pulumi.InvokeOutputOptions) -> pulumi.Output[str]:
        """The master password as Secrets Manager holds it now (a secret Output).

        Read at deploy time so the cluster's Secret matches it; after a rotation the
        next ``pulumi up`` writes the new one (see docs/lifecycle.md).
        """
        secret_arn = self.instance.master_user_secrets.apply(
            lambda secrets: secrets[0].secret_arn if secrets else ""
        )
        version = aws.secretsmanager.get_secret_version_output(secret_id=secret_arn, opts=invoke)
        return pulumi.Output.secret(version.secret_string.apply(master_password))
