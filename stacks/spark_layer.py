"""Composition of Spark on the cluster (``uae-gpu-platform:spark``, docs/data.md).

Kept in its own module so the foundation and the Kubernetes layer each call it in one
place: `build_spark_aws` (the data image's ECR repository and each team's Pod Identity
role for its Spark jobs) and `build_spark` (the cluster side, `modules.k8s.spark`).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pulumi
import pulumi_kubernetes as k8s

from modules.aws import iam
from modules.aws.spark_access import spark_data_access
from modules.k8s.common import system_node_selector
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.spark import spec as ss
from modules.k8s.spark.component import SparkPlatform
from modules.pools import NodePoolProfile

from .config import StackConfig
from .workload_aws import WorkloadAws


def build_spark_aws(config: StackConfig, aws: WorkloadAws) -> None:
    """The data image's repository (``<name>/data``), the operator's mirror (unless
    ``spark.operatorRegistry`` names one) and, per team with a Spark job, a
    role only the team's ServiceAccount ``spark-<team>`` in the team's Spark namespace
    (``spark-<team>``, `ss.jobs_namespace`) can assume: the team's raw files read, its
    datasets and event logs written, the storage key through S3 in the region."""
    aws.repository("registry-data", ss.DATA_REPOSITORY)
    if config.spark.operator_registry is None:
        # The operator's image mirrored into the stack's ECR (`build_spark` points the
        # chart there): nothing pulled from outside the country.
        aws.mirror([ss.OPERATOR_IMAGE[1]])
    for team in config.spark.teams:
        aws.pod_role(
            f"spark-{team}",
            namespace=ss.jobs_namespace(team),
            service_account=ss.service_account_name(team),
            description=f"Spark jobs of team {team}: raw files in, datasets and logs out",
            policy=iam.json_document(
                functools.partial(
                    spark_data_access,
                    region=config.region,
                    raw_prefix=ss.raw_prefix(team),
                    datasets_prefix=ss.datasets_prefix(team),
                    event_log_prefix=ss.event_log_prefix(team),
                ),
                aws.bucket_arn,
                aws.storage_key_arn,
            ),
        )


def build_spark(
    config: StackConfig,
    provider: k8s.Provider,
    *,
    pools: tuple[NodePoolProfile, ...],
    training_image: str | None,
    bucket_name: pulumi.Input[str] | None,
    storage_key_arn: pulumi.Input[str] | None,
    vpc_cidr: str | None,
    network: ClusterNetwork,
    depends_on: list[pulumi.Resource],
) -> SparkPlatform:
    """The operator and the jobs. On AWS (``bucket_name`` given) the data image is in
    the stack's ECR next to the training image; on premises in ``spark.registry``. The
    section was checked against the teams and pools with the stack config."""
    spec = config.spark
    if bucket_name is not None and storage_key_arn is not None and training_image is not None:
        # The training image is <ecr>/<name>/<repository>:<tag>; the data image sits
        # beside it (`build_spark_aws`).
        registry = training_image.rsplit("/", 1)[0]
        store = ss.aws_store(bucket_name, config.region, storage_key_arn)
        # The operator's image from the same registry, unless the stack names a mirror.
        spec = replace(spec, operator_registry=spec.operator_registry or registry)
    else:
        assert spec.object_store is not None and spec.registry is not None  # config checks
        registry = spec.registry
        store = ss.onprem_store(spec.object_store)
        # The operator's image from the add-ons' mirror, unless the section names one.
        if spec.operator_registry is None and config.onprem is not None:
            spec = replace(spec, operator_registry=config.onprem.registry or None)
    jobs = []
    for job in spec.jobs:
        pool = ss.job_pool(job, pools)
        assert pool is not None  # config checks
        jobs.append(ss.SparkJobPlacement(job, pool))
    return SparkPlatform(
        "spark",
        ss.SparkInputs(
            spec=spec,
            jobs=tuple(jobs),
            store=store,
            image=ss.data_image(registry, spec.image_tag),
            kubernetes_version=config.kubernetes_version,
            network=network,
            vpc_cidr=vpc_cidr,
            egress_cidrs=config.onprem.egress_cidrs if config.onprem is not None else (),
            node_selector=system_node_selector(),
        ),
        provider,
        pulumi.ResourceOptions(depends_on=depends_on),
    )
