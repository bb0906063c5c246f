"""Composition of the feature store (``uae-gpu-platform:features``, docs/features.md).

Kept in its own module so the foundation and the Kubernetes layer each call it in one
place: `build_features_aws` (ElastiCache, the features image's ECR repository, the
materialisation's read access to the offline store) and `build_feature_store` (the
cluster side, `modules.k8s.features`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from modules.aws import iam
from modules.aws.database import ca_bundle
from modules.aws.online_store.component import OnlineStore, OnlineStoreArgs
from modules.aws.online_store.spec import auth_token_problem
from modules.aws.private_data_store import DataStorePlacement
from modules.aws.serving_access import model_artifact_read_access
from modules.k8s.common import system_node_selector
from modules.k8s.features import spec as fs
from modules.k8s.features import training as ft
from modules.k8s.features.component import FeatureStore, FeatureStoreArgs, FeatureTrainingArgs
from modules.k8s.names import team_namespace
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.serving.spec import SERVING_CA_ISSUER
from modules.k8s.tracking.manifests import team_tracking_access
from modules.pools import NodePoolProfile

from .config import PROJECT, StackConfig
from .config_parsing import ConfigError
from .secrets import required_secret
from .workload_aws import WorkloadAws

#: The offline store's Parquet sources live under this prefix of the data bucket.
OFFLINE_PREFIX = "features/"
REGISTRY_PASSWORD_KEY = "featuresRegistryPassword"
REDIS_TOKEN_KEY = "featuresRedisAuthToken"


@dataclass(frozen=True)
class FeaturesAws:
    """What the cluster side needs from AWS."""

    redis_host: pulumi.Output[str]
    bucket_name: pulumi.Input[str]


def _secret(key: str, what: str) -> pulumi.Output[str]:
    return required_secret(key, what, "set features.enabled: false")


def redis_token() -> pulumi.Output[str]:
    token = _secret(REDIS_TOKEN_KEY, "the feature store's Redis password (ElastiCache AUTH)")

    def checked(value: str) -> str:
        problem = auth_token_problem(value)
        if problem:  # reported at `pulumi up` (the value is a secret, known only then)
            raise pulumi.RunError(f"{PROJECT}:{REDIS_TOKEN_KEY}: {problem}")
        return value

    return token.apply(checked)


def registry_password() -> pulumi.Output[str]:
    password = _secret(REGISTRY_PASSWORD_KEY, "the feature registry database user's password")

    def checked(value: str) -> str:
        # It goes into the registry's database URL as it is: URL-safe characters only.
        if len(value) < 16 or not re.fullmatch(r"[A-Za-z0-9._~-]+", value):
            raise pulumi.RunError(
                f"{PROJECT}:{REGISTRY_PASSWORD_KEY}: use 16 or more letters, digits, '.', '_', "
                "'~' or '-'"
            )
        return value

    return password.apply(checked)


def build_features_aws(
    config: StackConfig, aws: WorkloadAws, data_stores: DataStorePlacement
) -> FeaturesAws:
    """ElastiCache for the online store, the ``features`` image repository, and the
    feature store's Pod Identity role (read the offline store's prefix)."""
    online = OnlineStore(
        "features-online",
        OnlineStoreArgs(
            name_prefix=aws.name,
            spec=config.features.online_store,
            placement=data_stores,
            storage_key_arn=aws.storage_key_arn,
            auth_token=redis_token(),
        ),
        aws.opts,
    )
    aws.repository("registry-features", "features")
    # Who reads the offline store: Feast, and the tabular model's TrainJob if it has one.
    readers = [
        (
            "features-offline",
            fs.NAMESPACE,
            fs.SERVICE_ACCOUNT,
            "Feast: read the offline store (the data bucket's features/ prefix)",
        )
    ]
    if config.features.training_team:
        readers.append(
            (
                # "training" in the name: the policy pack checks such roles' S3 scoping.
                "features-training",
                team_namespace(config.features.training_team),
                ft.SERVICE_ACCOUNT,
                "The tabular model's TrainJob: read the offline store (features/)",
            )
        )
    offline_read = iam.json_document(
        functools.partial(model_artifact_read_access, region=config.region),
        aws.bucket_arn,
        OFFLINE_PREFIX,
        aws.storage_key_arn,
    )
    for role_name, namespace, service_account, description in readers:
        aws.pod_role(
            role_name,
            namespace=namespace,
            service_account=service_account,
            description=description,
            policy=offline_read,
        )
    return FeaturesAws(
        redis_host=online.group.primary_endpoint_address, bucket_name=aws.bucket_name
    )


def _training(
    config: StackConfig, on_aws: bool, pools: tuple[NodePoolProfile, ...]
) -> FeatureTrainingArgs | None:
    """The TrainJob's settings, checked against the stack's teams and pools."""
    spec = config.features
    # The job is a TrainJob: without Kubeflow Trainer (trainer.enabled: false) there is
    # none (docs/features.md).
    if not spec.training_team or not config.trainer.enabled:
        return None
    key = f"{PROJECT}:features"
    problems: list[str] = []
    if not on_aws:
        problems.append(f"{key}.trainingTeam: the training job reads S3 (AWS stacks only)")
    if spec.training_team not in [t.name for t in config.teams]:
        problems.append(f"{key}.trainingTeam: {spec.training_team!r} is not a team of the stack")
    pool = next((p for p in pools if p.name == spec.training_pool), None)
    if pool is None or pool.role != "cpu-training":
        cpu = [p.name for p in pools if p.role == "cpu-training"] or ["none"]
        problems.append(
            f"{key}.trainingPool: {spec.training_pool!r} is not a cpu-training pool of the "
            f"stack (those: {', '.join(cpu)})"
        )
    if problems:
        raise ConfigError(problems)
    assert pool is not None
    return FeatureTrainingArgs(
        team=spec.training_team,
        pool=pool,
        held=spec.training_held,
        tracking=team_tracking_access(),
    )


def build_feature_store(
    config: StackConfig,
    provider: k8s.Provider,
    *,
    registry: str,
    aws: FeaturesAws | None,
    registry_host: pulumi.Input[str] | None,
    depends_on: list[pulumi.Resource],
    pools: tuple[NodePoolProfile, ...] = (),
    network: ClusterNetwork,
) -> FeatureStore:
    """The cluster side: feature server, registry, online store (on premises),
    materialisation."""
    spec = config.features
    if config.serving is None:
        raise ConfigError(
            [f"{PROJECT}:features: needs the serving section (its CA and images' registry)"]
        )
    if not config.tracking.enabled:
        raise ConfigError(
            [f"{PROJECT}:features: needs tracking (the registry is on its database server)"]
        )
    on_aws = aws is not None
    placement = fs.Placement(
        on_aws=on_aws,
        registry=registry,
        offline_uri=(
            pulumi.Output.concat("s3://", aws.bucket_name, "/", OFFLINE_PREFIX.rstrip("/"))
            if aws is not None
            else "/data/features"
        ),
        node_selector=system_node_selector(),
        region=config.region if on_aws else "",
        database_ca=ca_bundle(config.region) if on_aws else "",
    )
    storage_class = config.onprem.storage_class if config.onprem is not None else ""
    return FeatureStore(
        "features",
        FeatureStoreArgs(
            provider=provider,
            spec=spec,
            placement=placement,
            kubernetes_version=config.kubernetes_version,
            ca_issuer=SERVING_CA_ISSUER,
            registry_password=registry_password(),
            redis_password=(
                redis_token()
                if on_aws
                else _secret(REDIS_TOKEN_KEY, "the feature store's Redis password")
            ),
            registry_host=registry_host or "",
            redis_host=aws.redis_host if aws is not None else "",
            storage_class=storage_class,
            training=_training(config, on_aws, pools),
            network=network,
            vpc_cidr=config.network.vpc_cidr if on_aws else None,
        ),
        pulumi.ResourceOptions(depends_on=depends_on),
    )
