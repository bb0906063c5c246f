"""Composition of the AWS foundation from a validated stack config.

Order matters only where AWS needs it (keys before what they encrypt, nodes before
the add-ons that run on them); everything else is expressed through Outputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from modules.aws import iam, instance_types
from modules.aws.cluster import ClusterAddons, ClusterAddonsArgs, EksCluster, EksClusterArgs
from modules.aws.database import (
    DATABASE_NAME,
    MASTER_USERNAME,
    POSTGRES_PORT,
    TrackingDatabase,
    TrackingDatabaseArgs,
)
from modules.aws.kms import RegionalKeys, RegionalKeysArgs
from modules.aws.network import Network, NetworkArgs
from modules.aws.node_pool import NodePool, NodePoolArgs, pool_zones
from modules.aws.storage import (
    DataStore,
    DataStoreArgs,
    ImageRegistry,
    ImageRegistryArgs,
    SharedFileSystem,
    SharedFileSystemArgs,
)
from modules.aws.tracking_users import TrackingUserSecrets, TrackingUserSecretsArgs
from modules.aws.workload_identity import PodIdentityRole, PodIdentityRoleArgs, team_data_prefix
from modules.k8s.tracking import manifests as k8s_tracking
from modules.k8s.tracking.spec import TrackingStoreInputs, team_password
from modules.k8s.versions import RDS_POSTGRES_MAJOR
from modules.pools import NodePoolProfile

from .access_foundation import build_access_and_link
from .catalog import catalog_problems
from .config import StackConfig
from .config_parsing import ConfigError
from .cost import price_problems
from .pricing import load_snapshot, snapshot_path
from .serving_foundation import build_serving_aws

# Where the Kubernetes layer runs Cluster Autoscaler (its Pod Identity role is made here).
AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
# Every team namespace has this service account for its training jobs.
TRAINER_SERVICE_ACCOUNT = "trainer"
#: MLflow's artifacts in the data bucket.
TRACKING_ARTIFACT_PREFIX = "mlflow/"


@dataclass(frozen=True)
class AwsFoundation:
    """What the Kubernetes layer and the workloads need from the AWS foundation."""

    cluster_name: str
    kubeconfig: pulumi.Output[str]
    pools: tuple[NodePoolProfile, ...]
    storage_key_arn: pulumi.Output[str]
    vpc_cidr: str
    registry_url: pulumi.Output[str]
    training_image: str
    bucket_name: pulumi.Output[str]
    file_system: SharedFileSystem | None
    ready: list[pulumi.Resource]
    tracking_store: TrackingStoreInputs | None = None
    #: Team name -> its MLflow password as its Secrets Manager secret holds it.
    tracking_team_passwords: dict[str, pulumi.Output[str]] = field(default_factory=dict)
    #: Registry prefix of the serving images (``<ecr>/gpu-<stack>``); None without serving.
    serving_registry: str | None = None


def _training_policy(prefix: str, region: str, bucket_arn: str, key_arn: str) -> iam.Document:
    return iam.training_data_access(bucket_arn, prefix, key_arn, region)


def region_provider(config: StackConfig) -> aws.Provider:
    """The only AWS provider: pinned to the stack's region, tagging everything."""
    return aws.Provider(
        f"aws-{config.region}",
        region=config.region,
        # Refuse to run against a region the account setup did not intend, even if
        # the environment says otherwise.
        skip_region_validation=False,
        default_tags=aws.ProviderDefaultTagsArgs(tags=config.all_tags),
    )


def build_aws_foundation(
    stack: str,
    config: StackConfig,
    provider: aws.Provider,
    tracking_admin_password: pulumi.Input[str] | None = None,
) -> AwsFoundation:
    """Declare the AWS foundation; raises `ConfigError` if the catalog rejects a pool.

    Args:
        stack: the stack name (used in resource names: ``gpu-<stack>``).
        config: the validated stack config.
        provider: the region-pinned AWS provider.
        tracking_admin_password: the MLflow admin password (a Pulumi secret); each
            team's MLflow password, kept in Secrets Manager, is derived from it.
    """
    invoke = pulumi.InvokeOptions(provider=provider)
    account_id = aws.get_caller_identity(opts=invoke).account_id
    zones = tuple(sorted(aws.get_availability_zones(state="available", opts=invoke).names))
    vpc_zones = zones[: config.network.zone_count]
    catalog = {
        t: instance_types.lookup(t, invoke)
        for t in sorted({p.instance_type for p in config.node_pools})
    }
    problems = catalog_problems(config, vpc_zones, catalog)
    # -- cost: a price for every pool the catalog accepts (docs/cost.md) --
    problems += [
        p
        for p in price_problems(config, load_snapshot(snapshot_path(config.region)))
        if not any(p.split(":", 2)[1].split(";")[0].split(".")[0] in c for c in problems)
    ]
    if problems:
        raise ConfigError(problems)

    name = f"gpu-{stack}"
    opts = pulumi.ResourceOptions(provider=provider)
    keys = RegionalKeys(
        "keys",
        RegionalKeysArgs(name_prefix=name, account_id=account_id, region=config.region),
        opts,
    )
    network = Network(
        "network",
        NetworkArgs(
            name_prefix=name,
            vpc_cidr=config.network.vpc_cidr,
            zones=vpc_zones,
            region=config.region,
            account_id=account_id,
            nat_gateway_per_zone=config.network.nat_gateway_per_zone,
            logs_key_arn=keys.arn("logs"),
            flow_log_retention_days=config.network.flow_log_retention_days,
            cluster_name=name,
        ),
        opts,
    )
    cluster = EksCluster(
        "cluster",
        EksClusterArgs(
            cluster_name=name,
            kubernetes_version=config.kubernetes_version,
            region=config.region,
            account_id=account_id,
            subnet_ids=[s.id for s in network.private_subnets.values()],
            secrets_key_arn=keys.arn("secrets"),
            logs_key_arn=keys.arn("logs"),
            log_retention_days=config.cluster.log_retention_days,
            public_access_cidrs=config.cluster.public_access_cidrs,
            endpoint_private_access=config.cluster.endpoint_private_access,
            admin_role_arns=config.cluster.admin_role_arns,
            creator_admin_access=config.cluster.creator_admin_access,
        ),
        opts,
    )
    security_group_id = cluster.cluster.vpc_config.apply(
        lambda v: v.cluster_security_group_id or ""
    )
    build_access_and_link(
        config,
        name=name,
        cluster=cluster,
        network=network,
        cluster_security_group_id=security_group_id,
        logs_key_arn=keys.arn("logs"),
        opts=opts,
    )
    pools: list[NodePool] = []
    for spec in config.node_pools:
        info = catalog[spec.instance_type]
        if info is None:  # catalog_problems reported it; kept for the type checker
            raise ConfigError([f"nodePools: unknown instance type {spec.instance_type}"])
        pools.append(
            NodePool(
                f"pool-{spec.name}",
                NodePoolArgs(
                    spec=spec,
                    info=info,
                    zones=pool_zones(spec, info, vpc_zones),
                    cluster_name=name,
                    cluster_security_group_id=security_group_id,
                    node_role_arn=cluster.node_role.arn,
                    subnet_ids_by_zone={z: s.id for z, s in network.private_subnets.items()},
                    storage_key_arn=keys.arn("storage"),
                    tags=config.all_tags,
                ),
                pulumi.ResourceOptions(provider=provider, depends_on=[cluster]),
            )
        )
    addons = ClusterAddons(
        "cluster-addons",
        ClusterAddonsArgs(cluster_name=cluster.cluster.name, storage_key_arn=keys.arn("storage")),
        pulumi.ResourceOptions(provider=provider, depends_on=[p.node_group for p in pools]),
    )

    data = DataStore(
        "data",
        DataStoreArgs(
            bucket_prefix=name,
            account_id=account_id,
            storage_key_arn=keys.arn("storage"),
            logs_key_arn=keys.arn("logs"),
            noncurrent_version_retention_days=config.storage.noncurrent_version_retention_days,
            access_log_retention_days=config.storage.access_log_retention_days,
        ),
        opts,
    )
    file_system = None
    if config.storage.fsx.enabled:
        # Put the file system in the zone of the first GPU pool: Lustre traffic then
        # stays inside the zone the training nodes are in.
        gpu_zones = [z for p in pools if p.profile.has_gpus for z in p.profile.zones]
        fsx_zone = gpu_zones[0] if gpu_zones else vpc_zones[0]
        file_system = SharedFileSystem(
            "shared-fs",
            SharedFileSystemArgs(
                vpc_id=network.vpc.id,
                vpc_cidr=config.network.vpc_cidr,
                subnet_id=network.private_subnets[fsx_zone].id,
                storage_key_arn=keys.arn("storage"),
                storage_capacity_gib=config.storage.fsx.storage_capacity_gib,
                throughput_mib_per_tib=config.storage.fsx.throughput_mib_per_tib,
                bucket_name=data.bucket.bucket,
                file_system_path=config.storage.fsx.file_system_path,
            ),
            opts,
        )
    registry = ImageRegistry(
        "registry",
        ImageRegistryArgs(
            repository_name=f"{name}/{config.storage.registry_name}",
            storage_key_arn=keys.arn("storage"),
        ),
        opts,
    )

    for team in config.teams:
        PodIdentityRole(
            # "training" in the name: the policy pack checks such roles' S3 scoping.
            f"training-{team.name}",
            PodIdentityRoleArgs(
                cluster_name=cluster.cluster.name,
                namespace=f"team-{team.name}",
                service_account=TRAINER_SERVICE_ACCOUNT,
                description=f"Training jobs of team {team.name}: its bucket prefix only",
                policy=iam.json_document(
                    functools.partial(_training_policy, team_data_prefix(team.name), config.region),
                    data.bucket.arn,
                    keys.arn("storage"),
                ),
            ),
            opts,
        )
    PodIdentityRole(
        "cluster-autoscaler",
        PodIdentityRoleArgs(
            cluster_name=cluster.cluster.name,
            namespace=AUTOSCALER_NAMESPACE,
            service_account=AUTOSCALER_SERVICE_ACCOUNT,
            description="Cluster Autoscaler: scales this cluster's node groups only",
            policy=iam.json_document(lambda: iam.cluster_autoscaler_access(name)),
        ),
        opts,
    )

    tracking_store = None
    team_passwords: dict[str, pulumi.Output[str]] = {}
    if config.tracking.enabled and tracking_admin_password is not None and config.teams:
        team_passwords = _tracking_users(
            config, name, keys.arn("secrets"), tracking_admin_password, provider
        )
    if config.tracking.enabled:
        tracking_store = _tracking_store(
            config,
            name=name,
            network=network,
            cluster_security_group_id=security_group_id,
            keys=keys,
            data=data,
            cluster=cluster,
            provider=provider,
        )

    # Model serving: image repositories and the inference pods' read-only model access.
    serving_registry = None
    if config.serving is not None:
        serving_registry = build_serving_aws(
            name,
            account_id,
            config,
            cluster_name=cluster.cluster.name,
            bucket_arn=data.bucket.arn,
            storage_key_arn=keys.arn("storage"),
            opts=opts,
        )

    pulumi.export("clusterName", cluster.cluster.name)
    pulumi.export("clusterEndpoint", cluster.cluster.endpoint)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("dataBucket", data.bucket.bucket)
    pulumi.export("registryUrl", registry.repository.repository_url)
    pulumi.export("nodePools", [p.node_group.node_group_name for p in pools])
    if file_system is not None:
        pulumi.export(
            "fsx",
            {
                "fileSystemId": file_system.file_system.id,
                "dnsName": file_system.file_system.dns_name,
                "mountName": file_system.file_system.mount_name,
            },
        )
    return AwsFoundation(
        cluster_name=name,
        kubeconfig=cluster.kubeconfig,
        pools=tuple(p.profile for p in pools),
        storage_key_arn=keys.arn("storage"),
        vpc_cidr=config.network.vpc_cidr,
        registry_url=registry.repository.repository_url,
        training_image=(
            f"{account_id}.dkr.ecr.{config.region}.amazonaws.com/"
            f"{name}/{config.storage.registry_name}:{config.training_image_tag}"
        ),
        bucket_name=data.bucket.bucket,
        file_system=file_system,
        ready=[addons, *[p.node_group for p in pools]],
        tracking_store=tracking_store,
        tracking_team_passwords=team_passwords,
        serving_registry=serving_registry,
    )


def _tracking_users(
    config: StackConfig,
    name: str,
    secrets_key_arn: pulumi.Input[str],
    admin_password: pulumi.Input[str],
    provider: aws.Provider,
) -> dict[str, pulumi.Output[str]]:
    """Each team's MLflow credentials in Secrets Manager (the stack's secrets key)."""
    admin = pulumi.Output.from_input(admin_password)
    users = TrackingUserSecrets(
        "tracking-users",
        TrackingUserSecretsArgs(
            name_prefix=name,
            secrets_key_arn=secrets_key_arn,
            teams=[
                (
                    team.name,
                    k8s_tracking.team_username(team.name),
                    admin.apply(functools.partial(_team_password, team.name)),
                )
                for team in config.teams
            ],
        ),
        pulumi.ResourceOptions(provider=provider),
    )
    return users.passwords


def _tracking_store(
    config: StackConfig,
    *,
    name: str,
    network: Network,
    cluster_security_group_id: pulumi.Input[str],
    keys: RegionalKeys,
    data: DataStore,
    cluster: EksCluster,
    provider: aws.Provider,
) -> TrackingStoreInputs:
    """MLflow's RDS database and its artifact role (the bucket's ``mlflow/`` prefix)."""
    spec = config.tracking
    database = TrackingDatabase(
        "tracking-db",
        TrackingDatabaseArgs(
            name_prefix=name,
            vpc_id=network.vpc.id,
            subnet_ids=[s.id for s in network.private_subnets.values()],
            client_security_group_id=cluster_security_group_id,
            storage_key_arn=keys.arn("storage"),
            secrets_key_arn=keys.arn("secrets"),
            engine_major_version=RDS_POSTGRES_MAJOR,
            instance_class=spec.database_instance_class,
            storage_gib=spec.database_storage_gib,
            max_storage_gib=spec.database_max_storage_gib,
            backup_retention_days=spec.database_backup_retention_days,
            multi_az=spec.database_multi_az,
        ),
        pulumi.ResourceOptions(provider=provider),
    )
    PodIdentityRole(
        "tracking-artifacts",
        PodIdentityRoleArgs(
            cluster_name=cluster.cluster.name,
            namespace=k8s_tracking.TRACKING_NAMESPACE,
            service_account=k8s_tracking.SERVICE_ACCOUNT,
            description="MLflow tracking server: the data bucket's mlflow/ prefix only",
            policy=iam.json_document(
                functools.partial(_training_policy, TRACKING_ARTIFACT_PREFIX, config.region),
                data.bucket.arn,
                keys.arn("storage"),
            ),
        ),
        pulumi.ResourceOptions(provider=provider),
    )
    return TrackingStoreInputs(
        database_host=database.instance.address,
        database_port=POSTGRES_PORT,
        database_name=DATABASE_NAME,
        database_username=MASTER_USERNAME,
        database_password=database.password(pulumi.InvokeOutputOptions(provider=provider)),
        bucket_name=data.bucket.bucket,
        artifact_prefix=TRACKING_ARTIFACT_PREFIX,
        storage_key_arn=keys.arn("storage"),
    )


def _team_password(team: str, admin_password: str) -> str:
    return team_password(admin_password, team)
