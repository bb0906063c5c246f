"""Composition of Kubeflow Pipelines (``uae-gpu-platform:pipelines``, docs/pipelines.md).

Kept in its own module, as the feature store's is, so that the foundation and the
Kubernetes layer each call it in one place: `build_pipelines_aws` (the mirrored images'
ECR repositories and KFP's three Pod Identity roles) and `build_pipelines` (the cluster
side, `modules.k8s.pipelines`, with the compiled pipeline read from the repository).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from modules.aws import database, iam
from modules.aws.pipelines_access import prefixes_access
from modules.k8s.common import system_node_selector
from modules.k8s.pipelines import loop
from modules.k8s.pipelines import spec as kfp
from modules.k8s.pipelines.component import KubeflowPipelines, PipelinesArgs
from modules.k8s.tracking.users import PIPELINES_USERNAME

from .config import PROJECT, StackConfig
from .config_parsing import ConfigError
from .secrets import required_secret
from .workload_aws import WorkloadAws

ROOT = Path(__file__).resolve().parents[1]
_PASSWORD = re.compile(r"[A-Za-z0-9._~-]{16,}")


@dataclass(frozen=True)
class PipelinesAws:
    """What the cluster side needs from AWS."""

    registry: str
    bucket_name: pulumi.Input[str]
    storage_key_arn: pulumi.Input[str]
    database_host: pulumi.Input[str]
    vpc_cidr: str


#: Pod Identity roles: (resource name, ServiceAccount, description, write, read).
ROLES: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "pipelines-runs",
        kfp.RUNNER_ACCOUNT,
        "Kubeflow Pipelines runs: write pipelines/runs/, read pipelines/sources/",
        (kfp.RUNS_PREFIX,),
        (kfp.SOURCES_PREFIX,),
    ),
    (
        "pipelines-api-server",
        kfp.API_SERVER_ACCOUNT,
        "Kubeflow Pipelines API server: write pipelines/specs/, read pipelines/runs/",
        (kfp.SPECS_PREFIX,),
        (kfp.RUNS_PREFIX,),
    ),
    (
        "pipelines-ui",
        kfp.UI_ACCOUNT,
        "Kubeflow Pipelines UI: read pipelines/runs/",
        (),
        (kfp.RUNS_PREFIX,),
    ),
)


def tracking_service_users(config: StackConfig) -> tuple[str, ...]:
    """The platform's own MLflow users the stack needs besides the teams': ``pipelines``
    where Kubeflow Pipelines is enabled (its runs' steps log, gate and register as it)."""
    return (PIPELINES_USERNAME,) if config.pipelines.enabled else ()


def build_pipelines_aws(
    config: StackConfig, aws: WorkloadAws, database_host: pulumi.Input[str]
) -> PipelinesAws:
    """One ECR repository per mirrored KFP image (``<name>/kubeflow-pipelines/<image>``)
    and for the platform's ``pipelines`` image, and one Pod Identity role per KFP
    identity, each on its prefixes of the data bucket (`modules.aws.pipelines_access`)."""
    aws.mirror((*(f"{kfp.MIRROR_PATH}/{i}" for i in kfp.MIRRORED_IMAGES), kfp.PIPELINES_IMAGE))
    for resource, account, description, write, read in ROLES:
        aws.pod_role(
            resource,
            namespace=kfp.NAMESPACE,
            service_account=account,
            description=description,
            policy=iam.json_document(
                functools.partial(_access, region=config.region, write=write, read=read),
                aws.bucket_arn,
                aws.storage_key_arn,
            ),
        )
    return PipelinesAws(
        registry=aws.registry,
        bucket_name=aws.bucket_name,
        storage_key_arn=aws.storage_key_arn,
        database_host=database_host,
        vpc_cidr=config.network.vpc_cidr,
    )


def _access(
    bucket_arn: str,
    storage_key_arn: str,
    *,
    region: str,
    write: tuple[str, ...],
    read: tuple[str, ...],
) -> iam.Document:
    return prefixes_access(bucket_arn, storage_key_arn, region, write=write, read=read)


def _secret(key: str, what: str) -> pulumi.Output[str]:
    return required_secret(key, what, "set pipelines.enabled: false")


def database_password() -> pulumi.Output[str]:
    """KFP's database password: KFP writes it into a libpq key/value string unquoted
    (``password=%s``), so only characters that need no quoting there."""
    password = _secret(kfp.DATABASE_PASSWORD_KEY, "Kubeflow Pipelines' database password")

    def checked(value: str) -> str:
        if not _PASSWORD.fullmatch(value):
            raise pulumi.RunError(
                f"{PROJECT}:{kfp.DATABASE_PASSWORD_KEY}: use 16 or more letters, digits, '.', "
                "'_', '~' or '-'"
            )
        return value

    return password.apply(checked)


def pipeline_for(config: StackConfig, path: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """The compiled pipeline and its typed run parameters; (None, {}) while the file does
    not exist (KFP is installed, the loop left out, and the plan says so)."""
    path = path or ROOT / kfp.PIPELINE_FILE
    try:
        ir = loop.read_pipeline(path)
    except loop.PipelineFileError as err:
        raise ConfigError([f"{kfp.PIPELINE_FILE}: {err}; compile it again"]) from None
    if ir is None:
        pulumi.log.warn(
            f"pipelines: {kfp.PIPELINE_FILE} does not exist yet: Kubeflow Pipelines is "
            "installed without the data-to-model loop (no upload, recurring run or drift "
            "trigger) until the pipeline is compiled and committed"
        )
        return None, {}
    if ir.name != kfp.PIPELINE_NAME:
        raise ConfigError(
            [f"{kfp.PIPELINE_FILE}: pipeline {ir.name!r}; the loop runs {kfp.PIPELINE_NAME!r}"]
        )
    values, problems = loop.run_parameters(ir, config.pipelines.parameters)
    if problems:
        raise ConfigError(
            [
                f"{PROJECT}:pipelines.parameters.{name}: got {value!r}; {expected}"
                for name, value, expected in problems
            ]
        )
    return ir, values


def build_pipelines(
    config: StackConfig,
    provider: k8s.Provider,
    *,
    aws: PipelinesAws | None,
    tracking_password: pulumi.Input[str],
    depends_on: list[pulumi.Resource],
) -> KubeflowPipelines:
    """The cluster side: KFP, its database and store, the loop, and the runs' MLflow
    credentials (``tracking_password``: the ``pipelines`` user's, as the tracking
    server's users file has it)."""
    spec = config.pipelines
    ir, parameters = pipeline_for(config)
    keys = None
    if aws is not None:
        placement = kfp.PipelinesPlacement(
            on_aws=True,
            registry=aws.registry,
            node_selector=system_node_selector(),
            region=config.region,
            bucket=aws.bucket_name,
            storage_key_arn=aws.storage_key_arn,
            database_host=aws.database_host,
            vpc_cidr=aws.vpc_cidr,
            database_ca=database.ca_bundle(config.region),
        )
    else:
        store, onprem = spec.object_store, config.onprem
        assert store is not None and spec.registry is not None and onprem is not None  # config
        placement = kfp.PipelinesPlacement(
            on_aws=False,
            registry=spec.registry,
            node_selector=system_node_selector(),
            bucket=store.bucket,
            storage_class=onprem.storage_class,
        )
        keys = (
            _secret(kfp.OBJECT_STORE_ACCESS_KEY, "the site object store's access key id"),
            _secret(kfp.OBJECT_STORE_SECRET_KEY, "the site object store's secret key"),
        )
    return KubeflowPipelines(
        "pipelines",
        PipelinesArgs(
            provider=provider,
            spec=spec,
            placement=placement,
            kubernetes_version=config.kubernetes_version,
            database_password=database_password(),
            object_store_keys=keys,
            pipeline=ir,
            parameters=parameters,
            tracking_password=tracking_password,
        ),
        pulumi.ResourceOptions(depends_on=depends_on),
    )
