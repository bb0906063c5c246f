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
from modules.aws.backup import (
    BackupTarget,
    StackBackups,
    StackBackupsArgs,
    checkpoint_volume_targets,
)
from modules.aws.cluster import ClusterAddons, ClusterAddonsArgs, EksCluster, EksClusterArgs
from modules.aws.database import (
    DATABASE_NAME,
    MASTER_USERNAME,
    POSTGRES_PORT,
    TrackingDatabase,
    TrackingDatabaseArgs,
    ca_bundle,
)
from modules.aws.key_custody import KeyCustody, KeyCustodyArgs
from modules.aws.kms import KEY_PURPOSES, RegionalKeys, RegionalKeysArgs
from modules.aws.network import Network, NetworkArgs
from modules.aws.node_pool import NodePool, NodePoolArgs, pool_zones
from modules.aws.private_data_store import DataStorePlacement
from modules.aws.storage import (
    DataStore,
    DataStoreArgs,
    SharedFileSystem,
    SharedFileSystemArgs,
)
from modules.aws.tracking_users import TrackingUserSecrets, TrackingUserSecretsArgs
from modules.aws.workload_identity import PodIdentityRole, PodIdentityRoleArgs, team_data_prefix
from modules.k8s.autoscaler.spec import REPOSITORY as AUTOSCALER_REPOSITORY
from modules.k8s.cost.spec import OPENCOST_IMAGE
from modules.k8s.gateway.spec import MIRRORED_IMAGES as MIRRORED_GATEWAY_IMAGES
from modules.k8s.gpu.spec import gpu_operator_repositories
from modules.k8s.monitoring.spec import MIRRORED_REPOSITORIES as MONITORING_REPOSITORIES
from modules.k8s.names import CHECKPOINT_CLAIM_NAME, team_namespace
from modules.k8s.queueing.spec import KUEUE_IMAGE
from modules.k8s.storage.spec import FSX_CSI_IMAGES
from modules.k8s.tracking import manifests as k8s_tracking
from modules.k8s.tracking.spec import TrackingStoreInputs
from modules.k8s.tracking.users import service_password, team_password, team_username
from modules.k8s.trainer.spec import MIRRORED_REPOSITORIES as MIRRORED_TRAINER_REPOSITORIES
from modules.k8s.versions import RDS_POSTGRES_MAJOR
from modules.pools import NodePoolProfile

from .access_foundation import build_access_and_link
from .catalog import catalog_problems
from .config import StackConfig
from .config_parsing import ConfigError
from .cost import price_problems
from .features_layer import FeaturesAws, build_features_aws
from .llm_layer import build_llm_aws
from .pipelines_layer import PipelinesAws, build_pipelines_aws, tracking_service_users
from .pricing import load_snapshot, snapshot_path
from .secrets import missing_secret
from .serving_foundation import build_serving_aws
from .spark_layer import build_spark_aws
from .workload_aws import WorkloadAws

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
    #: Platform service user (``pipelines``) -> its MLflow password as its Secrets
    #: Manager secret holds it; empty when no service needs one.
    tracking_service_passwords: dict[str, pulumi.Output[str]] = field(default_factory=dict)
    #: Registry prefix of the serving images (``<ecr>/gpu-<stack>``); None without serving.
    serving_registry: str | None = None
    #: The stack's registry prefix (``<ecr>/gpu-<stack>``) holding the images mirrored
    #: from upstream: the add-ons', the tracking server's, Trainer's, the LLM gateway's.
    mirror_registry: str | None = None
    #: The feature store's AWS side (stacks/features_layer.py); None when it is off.
    features: FeaturesAws | None = None
    #: Kubeflow Pipelines' AWS side (stacks/pipelines_layer.py); None when it is off.
    pipelines: PipelinesAws | None = None


@dataclass(frozen=True)
class KeyStoreSecrets:
    """The secret config values of a custom key store (`stacks.config.KEY_STORE_SECRET_KEYS`),
    as the program reads them; None where unset."""

    key_store_password: pulumi.Input[str] | None = None
    xks_access_key_id: pulumi.Input[str] | None = None
    xks_secret_access_key: pulumi.Input[str] | None = None


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
    key_store_secrets: KeyStoreSecrets | None = None,
    tracking_admin_password: pulumi.Input[str] | None = None,
) -> AwsFoundation | None:
    """Declare the AWS foundation; raises `ConfigError` if the catalog rejects a pool.

    Args:
        stack: the stack name (used in resource names: ``gpu-<stack>``).
        config: the validated stack config.
        provider: the region-pinned AWS provider.
        key_store_secrets: the custom key store's secrets (key custody ``hsm``).
        tracking_admin_password: the MLflow admin password (a Pulumi secret); each
            team's MLflow password, kept in Secrets Manager, is derived from it.

    Returns:
        The foundation, or None while a key store the stack creates is not ready for
        keys yet (stage ``cluster`` or ``key-store``): then only the key custody's
        resources (and the VPC of a CloudHSM cluster) exist, and nothing that needs a key.
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
    custody = config.key_custody
    network: Network | None = None
    store_id: pulumi.Input[str] | None = None
    if custody.key_store is not None:
        store = custody.key_store
        secrets = key_store_secrets or KeyStoreSecrets()
        _check_key_store_secrets(store.type, store.created_by_stack, custody.stage, secrets)
        if store.create_cluster:
            # The cluster's HSMs live in the stack's private subnets; the flow logs
            # follow once the logs key exists (below).
            network = _network(
                config, name, zones=vpc_zones, account_id=account_id, logs_key_arn=None, opts=opts
            )
        key_custody = KeyCustody(
            "key-custody",
            KeyCustodyArgs(
                spec=store,
                stage=custody.stage,
                store_name=store.name or name,
                subnet_ids_by_zone=(
                    {z: s.id for z, s in network.private_subnets.items()} if network else None
                ),
                key_store_password=secrets.key_store_password,
                xks_access_key_id=secrets.xks_access_key_id,
                xks_secret_access_key=secrets.xks_secret_access_key,
            ),
            opts,
        )
        store_id = key_custody.key_store_id
        pulumi.export(
            "keyCustody",
            {
                "custody": custody.custody,
                "stage": custody.stage,
                "keyStoreType": store.type,
                "keyStoreId": store_id,
                "cloudHsmClusterId": (
                    key_custody.cluster.cluster_id if key_custody.cluster else store.cluster_id
                ),
            },
        )
        if not custody.complete:
            return None
    keys = RegionalKeys(
        "keys",
        RegionalKeysArgs(
            name_prefix=name,
            account_id=account_id,
            region=config.region,
            custom_key_store_id=store_id,
            xks_key_ids={
                p: custody.key_store.external_key_ids[p]
                for p in KEY_PURPOSES
                if custody.key_store is not None and p in custody.key_store.external_key_ids
            },
        ),
        opts,
    )
    if network is None:
        network = _network(
            config,
            name,
            zones=vpc_zones,
            account_id=account_id,
            logs_key_arn=keys.arn("logs"),
            opts=opts,
        )
    else:
        network.enable_flow_logs(keys.arn("logs"))
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
    # Where the managed data stores (the tracking database, the online store) are.
    data_stores = DataStorePlacement(
        vpc_id=network.vpc.id,
        subnet_ids=[s.id for s in network.private_subnets.values()],
        client_security_group_id=security_group_id,
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
    # What the training jobs, the autoscaler and the workload layers' AWS parts build on.
    stack_aws = WorkloadAws(
        name=name,
        account_id=account_id,
        region=config.region,
        cluster_name=cluster.cluster.name,
        bucket_arn=data.bucket.arn,
        bucket_name=data.bucket.bucket,
        storage_key_arn=keys.arn("storage"),
        opts=opts,
    )
    registry = stack_aws.repository("registry", config.storage.registry_name)

    for team in config.teams:
        stack_aws.pod_role(
            # "training" in the name: the policy pack checks such roles' S3 scoping.
            f"training-{team.name}",
            namespace=f"team-{team.name}",
            service_account=TRAINER_SERVICE_ACCOUNT,
            description=f"Training jobs of team {team.name}: its bucket prefix only",
            policy=iam.json_document(
                functools.partial(_training_policy, team_data_prefix(team.name), config.region),
                data.bucket.arn,
                keys.arn("storage"),
            ),
        )
    stack_aws.pod_role(
        "cluster-autoscaler",
        namespace=AUTOSCALER_NAMESPACE,
        service_account=AUTOSCALER_SERVICE_ACCOUNT,
        description="Cluster Autoscaler: scales this cluster's node groups only",
        policy=iam.json_document(lambda: iam.cluster_autoscaler_access(name)),
    )

    tracking_store, database = None, None
    team_passwords: dict[str, pulumi.Output[str]] = {}
    service_passwords: dict[str, pulumi.Output[str]] = {}
    if config.tracking.enabled and tracking_admin_password is not None:
        # Each team's and each platform service's MLflow credentials in Secrets
        # Manager (the stack's secrets key); two components, so that a service user's
        # resource names cannot meet a team's.
        admin = pulumi.Output.from_input(tracking_admin_password)
        team_passwords = _tracking_user_secrets(
            "tracking-users",
            name,
            keys.arn("secrets"),
            [
                (
                    t.name,
                    team_username(t.name),
                    admin.apply(functools.partial(team_password, team=t.name)),
                )
                for t in config.teams
            ],
            holder="team",
            provider=provider,
        )
        service_passwords = _tracking_user_secrets(
            "tracking-service-users",
            name,
            keys.arn("secrets"),
            [
                (u, u, admin.apply(functools.partial(service_password, username=u)))
                for u in tracking_service_users(config)
            ],
            holder="service",
            provider=provider,
        )
    if config.tracking.enabled:
        tracking_store, database = _tracking_store(
            config,
            name=name,
            placement=data_stores,
            keys=keys,
            data=data,
            cluster=cluster,
            provider=provider,
        )

    if config.backups.enabled:
        # What survives a deletion or a ransomware run: the database, the bucket and,
        # where checkpoints are EBS volumes (no FSx), the teams' checkpoint volumes. An
        # FSx file system linked to the bucket cannot be backed up (backup_spec); what
        # its linked path holds is the bucket's.
        targets = [BackupTarget("data-bucket", [data.bucket.arn])]
        if database is not None:
            targets.append(BackupTarget("tracking-db", [database.instance.arn]))
        if file_system is None:
            targets += checkpoint_volume_targets(
                [team_namespace(t.name) for t in config.teams],
                CHECKPOINT_CLAIM_NAME,
                config.region,
                account_id,
            )
        backups = StackBackups(
            "backup",
            StackBackupsArgs(
                name_prefix=name,
                account_id=account_id,
                spec=config.backups,
                key_arn=keys.arn("storage"),
                targets=targets,
            ),
            opts,
        )
        pulumi.export(
            "backup",
            {
                "vault": backups.vault.name,
                "planId": backups.plan.id,
                "backupRoleArn": backups.backup_role.arn,
                "restoreRoleArn": backups.restore_role.arn,
            },
        )

    # Images mirrored from upstream into the stack's own ECR, under their upstream
    # repository paths (nothing pulled from outside the country): the cluster add-ons'
    # (the Cluster Autoscaler's, OpenCost's, Kueue's, the monitoring stack's; the FSx
    # CSI driver's where the stack has FSx, the GPU Operator's where it has GPUs), the
    # tracking server's, Kubeflow Trainer's (unless trainer.registry names a mirror) and
    # the LLM gateway's. The layers pull them from `AwsFoundation.mirror_registry`.
    mirrors = [AUTOSCALER_REPOSITORY, OPENCOST_IMAGE[1], KUEUE_IMAGE[1], *MONITORING_REPOSITORIES]
    if file_system is not None:
        mirrors += list(FSX_CSI_IMAGES)
    profiles = [p.profile for p in pools]
    if any(p.has_gpus for p in profiles):
        # The GPU Operator's (driver and toolkit come with the EKS GPU AMI).
        uses_mig = any(p.has_gpus and p.gpu_sharing == "mig" for p in profiles)
        mirrors += gpu_operator_repositories(False, False, uses_mig, cc=False)
    if config.tracking.enabled:
        mirrors += k8s_tracking.mirrored_repositories(on_aws=True)
    if config.trainer.enabled and config.trainer.registry is None:
        mirrors += MIRRORED_TRAINER_REPOSITORIES
    if config.llm_gateway is not None:
        mirrors += list(MIRRORED_GATEWAY_IMAGES)
    stack_aws.mirror(mirrors)

    # Model serving: image repositories and the inference pods' read-only model access.
    serving_registry = None
    if config.serving is not None:
        serving_registry = build_serving_aws(config, stack_aws)
        build_llm_aws(config, stack_aws)  # the LLM images, beside the serving ones

    features = None
    if config.features.enabled:
        features = build_features_aws(config, stack_aws, data_stores)

    pipelines = None
    if config.pipelines.enabled and tracking_store is not None:  # config requires tracking
        pipelines = build_pipelines_aws(config, stack_aws, tracking_store.database_host)

    if config.spark.enabled:
        build_spark_aws(config, stack_aws)

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
        tracking_service_passwords=service_passwords,
        serving_registry=serving_registry,
        mirror_registry=stack_aws.registry,
        features=features,
        pipelines=pipelines,
    )


def _tracking_user_secrets(
    resource_name: str,
    name: str,
    secrets_key_arn: pulumi.Input[str],
    users: list[tuple[str, str, pulumi.Output[str]]],
    *,
    holder: str,
    provider: aws.Provider,
) -> dict[str, pulumi.Output[str]]:
    """MLflow credentials in Secrets Manager, ``<prefix>/mlflow/<user>``, one secret per
    (holder's name, MLflow user, password); nothing when there are none."""
    if not users:
        return {}
    secrets = TrackingUserSecrets(
        resource_name,
        TrackingUserSecretsArgs(
            name_prefix=name, secrets_key_arn=secrets_key_arn, teams=users, holder=holder
        ),
        pulumi.ResourceOptions(provider=provider),
    )
    return secrets.passwords


def _network(
    config: StackConfig,
    name: str,
    *,
    zones: tuple[str, ...],
    account_id: str,
    logs_key_arn: pulumi.Input[str] | None,
    opts: pulumi.ResourceOptions,
) -> Network:
    return Network(
        "network",
        NetworkArgs(
            name_prefix=name,
            vpc_cidr=config.network.vpc_cidr,
            zones=zones,
            region=config.region,
            account_id=account_id,
            nat_gateway_per_zone=config.network.nat_gateway_per_zone,
            logs_key_arn=logs_key_arn,
            flow_log_retention_days=config.network.flow_log_retention_days,
            cluster_name=name,
        ),
        opts,
    )


def _check_key_store_secrets(
    store_type: str, created_by_stack: bool, stage: str, secrets: KeyStoreSecrets
) -> None:
    """A `ConfigError` naming each secret the key store the stack creates needs and does
    not have (none are needed for an existing store, or before stage key-store)."""
    if not created_by_stack or stage == "cluster":
        return
    if store_type == "cloudhsm":
        wanted = {"key_store_password": ("keyStorePassword", "the CloudHSM kmsuser's password")}
    else:
        wanted = {
            "xks_access_key_id": (
                "xksProxyAccessKeyId",
                "the XKS proxy credential's access key id",
            ),
            "xks_secret_access_key": (
                "xksProxySecretAccessKey",
                "the XKS proxy credential's secret access key (43 to 64 characters)",
            ),
        }
    missing = [
        missing_secret(key, what)
        for field_name, (key, what) in wanted.items()
        if getattr(secrets, field_name) is None
    ]
    if missing:
        raise ConfigError(missing)


def _tracking_store(
    config: StackConfig,
    *,
    name: str,
    placement: DataStorePlacement,
    keys: RegionalKeys,
    data: DataStore,
    cluster: EksCluster,
    provider: aws.Provider,
) -> tuple[TrackingStoreInputs, TrackingDatabase]:
    """MLflow's RDS database and its artifact role (the bucket's ``mlflow/`` prefix)."""
    spec = config.tracking
    database = TrackingDatabase(
        "tracking-db",
        TrackingDatabaseArgs(
            name_prefix=name,
            placement=placement,
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
    inputs = TrackingStoreInputs(
        database_host=database.instance.address,
        database_port=POSTGRES_PORT,
        database_name=DATABASE_NAME,
        database_username=MASTER_USERNAME,
        database_password=database.password(pulumi.InvokeOutputOptions(provider=provider)),
        bucket_name=data.bucket.bucket,
        artifact_prefix=TRACKING_ARTIFACT_PREFIX,
        storage_key_arn=keys.arn("storage"),
        database_ca=ca_bundle(config.region),
    )
    return inputs, database
