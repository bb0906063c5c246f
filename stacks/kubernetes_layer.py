"""Composition of the Kubernetes platform layer, on EKS or on an existing cluster."""

from __future__ import annotations

import functools
from dataclasses import asdict, replace

import pulumi
import pulumi_kubernetes as k8s

from modules.k8s.fleet.spec import KUBECONFIG_OUTPUT, SITE_OUTPUT, FleetInputs, FleetWorkerInputs
from modules.k8s.llm.spec import LLMBackend
from modules.k8s.platform.component import KubernetesPlatform
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.site.eks import EksInputs, FsxInputs
from modules.k8s.site.spec import SiteSpec
from modules.k8s.site_audit.component import SiteAuditPolicy
from modules.k8s.storage.spec import platform_storage_class
from modules.k8s.tracking.manifests import TRACKING_URI
from modules.k8s.tracking.spec import TrackingInputs
from modules.k8s.tracking.users import PIPELINES_USERNAME, service_password
from modules.k8s.trainer.spec import TrainerInputs
from modules.k8s.trainer.training_job.manifests import trainer_inputs
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError

from .aws_foundation import AwsFoundation
from .config import PROJECT, StackConfig
from .config_parsing import ConfigError, stack_key
from .cost import cost_inputs
from .example_job import build_example_job
from .example_service import build_example_service
from .features_layer import build_feature_store
from .fleet import load_stack, manager_inputs, site_of
from .llm_gateway_layer import build_llm_gateway
from .llm_layer import build_llm
from .pipelines_layer import build_pipelines, tracking_service_users
from .pricing import load_snapshot, snapshot_path
from .secrets import missing_secret
from .spark_layer import build_spark


def _tracking_inputs(
    config: StackConfig,
    foundation: AwsFoundation | None,
    admin_password: pulumi.Input[str] | None,
) -> TrackingInputs | None:
    """What the tracking server needs from the stack: its admin password (a secret config
    value) and, on AWS, the foundation's database and bucket."""
    if not config.tracking.enabled:
        return None
    if admin_password is None:
        raise ConfigError(
            [
                missing_secret(
                    "trackingAdminPassword",
                    "the MLflow tracking server's admin password",
                    "set tracking.enabled: false",
                )
            ]
        )
    store = foundation.tracking_store if foundation is not None else None
    # On AWS each team's password comes from its Secrets Manager secret; on premises
    # the tracking layer derives it from the admin password (the stack's secret).
    passwords = foundation.tracking_team_passwords if foundation is not None else {}
    # The platform's own users (the pipelines runs'): the same, each under its own label.
    services: dict[str, pulumi.Input[str]] = {}
    if foundation is not None:
        services.update(foundation.tracking_service_passwords)
    else:
        admin = pulumi.Output.secret(admin_password)
        for user in tracking_service_users(config):
            services[user] = admin.apply(functools.partial(service_password, username=user))
    return TrackingInputs(
        admin_password=admin_password,
        store=store,
        team_passwords=passwords,
        backup_credentials=_backup_credentials(config),
        service_passwords=services,
    )


#: The secret config pair of the site object store's access key (database backups).
BACKUP_SECRET_KEYS = ("trackingBackupAccessKeyId", "trackingBackupSecretAccessKey")


def _backup_credentials(
    config: StackConfig,
) -> tuple[pulumi.Output[str], pulumi.Output[str]] | None:
    """The object store's access key for the tracking database's backups, from the
    stack's secret config only (never the stack file); every missing key is named."""
    if config.tracking.database_backup is None:
        return None
    secrets = pulumi.Config(PROJECT)
    values = [secrets.get_secret(key) for key in BACKUP_SECRET_KEYS]
    missing = [key for key, value in zip(BACKUP_SECRET_KEYS, values, strict=True) if value is None]
    if missing:
        raise ConfigError(
            [
                missing_secret(
                    key,
                    "the site object store's access key for the tracking database's backups",
                    "remove tracking.databaseBackup",
                )
                for key in missing
            ]
        )
    access_key_id, secret_access_key = values
    assert access_key_id is not None and secret_access_key is not None
    return access_key_id, secret_access_key


def _fleet_inputs(
    config: StackConfig, foundation: AwsFoundation | None, kubeconfig: pulumi.Input[str] | None
) -> FleetInputs | None:
    """The fleet side of this stack (validated by `stacks.fleet.fleet_problems`)."""
    if config.fleet is not None:
        return FleetInputs(manager=manager_inputs(config))
    if config.fleet_worker is not None:
        own = foundation.kubeconfig if foundation is not None else kubeconfig
        assert own is not None  # the provider needed it already
        manager = load_stack(config.fleet_worker.manager)
        assert isinstance(manager, StackConfig) and manager.fleet is not None  # fleet_problems
        teams = manager.fleet.burst_teams or tuple(t.name for t in manager.teams)
        return FleetInputs(worker=FleetWorkerInputs(config.fleet_worker.manager, own, tuple(teams)))
    return None


def _platform_args(
    config: StackConfig,
    provider: k8s.Provider,
    foundation: AwsFoundation | None,
    tracking: TrackingInputs | None = None,
    fleet: FleetInputs | None = None,
) -> KubernetesPlatformArgs:
    """The layer's typed args; their combined checks become config problems."""
    # Prices were checked with the config (`stacks.program`): every pool has a shape.
    site_name = config.site.name if config.site is not None else f"aws-{config.region}"
    cost = cost_inputs(config, load_snapshot(snapshot_path(config.region)), site_name)
    if cost is not None:
        # OpenCost's image from the add-ons' mirror: the stack's own ECR on AWS,
        # onprem.registry on premises.
        mirror = foundation.mirror_registry if foundation is not None else None
        if mirror is None and config.onprem is not None:
            mirror = config.onprem.registry or None
        cost = replace(cost, registry=mirror)
    if cost is None:
        # Never a figure that is not a real price (docs/cost.md): no OpenCost until
        # `make prices-refresh` wrote verified prices for every pool.
        pulumi.log.warn(
            "cost allocation (OpenCost) left out: the price snapshot has no verified price "
            "for every pool; run `make prices-refresh`"
        )
    try:
        eks: EksInputs | None = None
        if foundation is None:
            assert config.site is not None  # checked by StackConfig for target onprem
            site, pools, serving = config.site, config.onprem_node_pools, config.serving
        else:
            site = SiteSpec(name=f"aws-{config.region}", kind="aws-eks", region=config.region)
            pools = foundation.pools
            eks = EksInputs(
                cluster_name=foundation.cluster_name,
                region=config.region,
                storage_kms_key_arn=foundation.storage_key_arn,
                vpc_cidr=foundation.vpc_cidr,
                fsx=_fsx_inputs(config, foundation),
                registry=foundation.mirror_registry,
            )
            # Serving images come from the stack's own ECR repositories.
            serving = (
                replace(config.serving, registry=foundation.serving_registry)
                if config.serving is not None
                else None
            )
        return KubernetesPlatformArgs(
            cluster_kind="onprem" if eks is None else "eks",
            site=site,
            pools=pools,
            eks=eks,
            onprem=config.onprem if eks is None else None,
            infiniband=config.infiniband,
            provider=provider,
            kubernetes_version=config.kubernetes_version,
            teams=config.teams,
            monitoring=config.monitoring,
            queueing=config.queueing,
            # On AWS the tracking images come from the stack's own ECR repositories.
            tracking=(
                replace(config.tracking, registry=foundation.mirror_registry)
                if foundation is not None and config.tracking.enabled
                else config.tracking
            ),
            tracking_inputs=tracking,
            serving=serving,
            fleet=fleet,
            cost=cost,
            # Trainer's images from the stack's ECR on AWS, from the add-ons' mirror on
            # premises, unless the section names its own mirror.
            trainer=(
                replace(
                    config.trainer, registry=config.trainer.registry or foundation.mirror_registry
                )
                if foundation is not None
                else replace(
                    config.trainer,
                    registry=config.trainer.registry
                    or (config.onprem.registry or None if config.onprem is not None else None),
                )
            ),
            trainer_inputs=_trainer_inputs(config, pools, foundation),
            confidential_computing_pools=(
                config.confidential_computing.pools if config.confidential_computing else ()
            ),
        )
    except InvalidArgsError as err:
        raise ConfigError(
            [p.describe(_config_key(config, p.field)) for p in err.problems]
        ) from None


def _fsx_inputs(config: StackConfig, foundation: AwsFoundation) -> FsxInputs | None:
    """The FSx for Lustre file system the EKS cluster mounts, if the stack has one."""
    if foundation.file_system is None:
        return None
    fs = foundation.file_system.file_system
    return FsxInputs(
        file_system_id=fs.id,
        dns_name=fs.dns_name,
        mount_name=fs.mount_name,
        capacity_gib=config.storage.fsx.storage_capacity_gib,
        init_image=foundation.training_image,
    )


def _trainer_inputs(
    config: StackConfig, pools: tuple[NodePoolProfile, ...], foundation: AwsFoundation | None
) -> TrainerInputs | None:
    """The runtimes' image and per-pool environment; an onprem stack names its training
    image (``trainingImage``), an AWS stack's is in its own ECR repository."""
    if not config.trainer.enabled:
        return None
    image = foundation.training_image if foundation is not None else config.training_image
    if image is None:
        raise ConfigError(
            [
                f"{PROJECT}:trainingImage: missing; the training runtimes of Kubeflow Trainer "
                "run the training image: set it to the image in the UAE registry (or set "
                "trainer.enabled: false)"
            ]
        )
    return trainer_inputs(pools, image)


def _config_key(config: StackConfig, field: str) -> str:
    """The stack-file key behind a `KubernetesPlatformArgs` field: its ``pools`` are the
    stack's ``nodePools`` (or ``onpremNodePools``), its ``cluster_kind`` the ``target``."""
    head, dot, rest = field.partition(".")
    name, bracket, index = head.partition("[")
    renamed = {
        "pools": "onprem_node_pools" if config.target == "onprem" else "node_pools",
        "cluster_kind": "target",
    }.get(name, name)
    return f"{PROJECT}:" + stack_key(renamed + bracket + index + dot + rest)


def kubernetes_provider(
    config: StackConfig, foundation: AwsFoundation | None, kubeconfig: pulumi.Input[str] | None
) -> k8s.Provider:
    """The cluster's provider: from the EKS cluster, or from the secret kubeconfig."""
    if foundation is not None:
        return k8s.Provider(
            "eks",
            kubeconfig=foundation.kubeconfig,
            # Platform objects go in only once nodes and core add-ons are up.
            opts=pulumi.ResourceOptions(depends_on=foundation.ready),
        )
    if kubeconfig is None:
        raise ConfigError(
            [
                f"{PROJECT}:kubeconfig: missing; an onprem stack reaches its cluster through it: "
                "pulumi config set --secret kubeconfig < path/to/kubeconfig"
            ]
        )
    assert config.site is not None
    return k8s.Provider(f"onprem-{config.site.name}", kubeconfig=kubeconfig)


def build_kubernetes_layer(
    config: StackConfig,
    foundation: AwsFoundation | None,
    kubeconfig: pulumi.Input[str] | None,
    tracking_admin_password: pulumi.Input[str] | None = None,
) -> KubernetesPlatform:
    """Declare the Kubernetes platform layer through the cluster's explicit provider."""
    tracking = _tracking_inputs(config, foundation, tracking_admin_password)
    provider = kubernetes_provider(config, foundation, kubeconfig)
    args = _platform_args(
        config, provider, foundation, tracking, _fleet_inputs(config, foundation, kubeconfig)
    )
    platform = KubernetesPlatform("platform", args)
    if config.api_audit is not None:
        SiteAuditPolicy("site-audit", config.api_audit, provider)
    pulumi.export("teams", {t: asdict(p) for t, p in platform.placements.items()})
    if args.tracking_enabled:
        pulumi.export("trackingUri", TRACKING_URI)
    if platform.fleet_kubeconfig is not None:
        # What the manager reads through its StackReference: a secret stays a secret.
        pulumi.export(KUBECONFIG_OUTPUT, platform.fleet_kubeconfig)
        pulumi.export(SITE_OUTPUT, vars(site_of(config)))
    if config.features.enabled:
        build_feature_store(
            config,
            provider,
            registry=(foundation.serving_registry if foundation else None)
            or (config.serving.registry if config.serving else None)
            or "",
            aws=foundation.features if foundation is not None else None,
            registry_host=(
                foundation.tracking_store.database_host
                if foundation is not None and foundation.tracking_store is not None
                else None
            ),
            depends_on=[platform],
            pools=args.pools,
            network=args.network,
        )
    if config.pipelines.enabled:
        # StackConfig requires tracking for pipelines: the runs' user is in its inputs.
        assert tracking is not None
        build_pipelines(
            config,
            provider,
            aws=foundation.pipelines if foundation is not None else None,
            tracking_password=tracking.service_passwords[PIPELINES_USERNAME],
            depends_on=[platform],
        )
    if config.spark.enabled:
        build_spark(
            config,
            provider,
            pools=args.pools,
            training_image=foundation.training_image if foundation is not None else None,
            bucket_name=foundation.bucket_name if foundation is not None else None,
            storage_key_arn=foundation.storage_key_arn if foundation is not None else None,
            vpc_cidr=foundation.vpc_cidr if foundation is not None else None,
            network=args.network,
            depends_on=[platform],
        )
    backends: tuple[LLMBackend, ...] = ()
    if config.llm is not None and args.serving is not None:  # StackConfig requires serving
        llm = build_llm(
            config,
            provider,
            serving=args.serving,
            pools=args.pools,
            placements=platform.placements,
            bucket=foundation.bucket_name if foundation is not None else None,
            network=args.network,
            depends_on=[platform],
        )
        backends = tuple(llm.backends)
        # What the gateway routes each model to (its OpenAI `model` field).
        pulumi.export("llmBackends", [vars(b) for b in backends])
    if config.llm_gateway is not None:
        build_llm_gateway(
            config,
            provider,
            backends=backends,
            network=args.network,
            storage_class=platform_storage_class(args),
            eks=args.eks is not None,
            depends_on=[platform],
            registry=foundation.mirror_registry if foundation is not None else None,
        )
    if config.example_job is not None:
        image = foundation.training_image if foundation is not None else config.training_image
        assert image is not None  # StackConfig requires it for onprem stacks with a job
        build_example_job(
            config.example_job,
            args.pools,
            platform,
            provider,
            image,
            trainer=config.trainer.enabled,
        )
    if config.example_service is not None and args.serving is not None:
        bucket = foundation.bucket_name if foundation is not None else None
        service = build_example_service(
            config.example_service,
            args.serving,
            args.pools,
            platform,
            provider=provider,
            bucket=bucket,
            region=config.region if foundation is not None else None,
        )
        pulumi.export("exampleServiceEndpoint", service.endpoint)
        pulumi.export("exampleServiceGrpcEndpoint", service.grpc_endpoint)
    return platform
