"""The AWS side of model serving: ECR repositories for the serving images and the
inference pods' read-only access to the model artifacts (EKS Pod Identity)."""

from __future__ import annotations

import functools

import pulumi

from modules.aws import iam
from modules.aws.serving_access import model_artifact_read_access
from modules.aws.storage import ImageRegistry, ImageRegistryArgs
from modules.aws.workload_identity import PodIdentityRole, PodIdentityRoleArgs
from modules.k8s.names import team_namespace
from modules.k8s.serving.spec import INFERENCE_SERVICE_ACCOUNT, MIRRORED_IMAGES

from .config import StackConfig

#: The MLflow tracking server stores artifacts under this prefix of the data bucket.
MODEL_ARTIFACT_PREFIX = "mlflow/"


def serving_registry(account_id: str, region: str, name: str) -> str:
    """The registry prefix every serving image is pulled from: ``<ecr>/<name>``."""
    return f"{account_id}.dkr.ecr.{region}.amazonaws.com/{name}"


def build_serving_aws(
    name: str,
    account_id: str,
    config: StackConfig,
    *,
    cluster_name: pulumi.Input[str],
    bucket_arn: pulumi.Input[str],
    storage_key_arn: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> str:
    """One ECR repository per serving image (``<name>/<image>``: the predictor built
    here, the mirrored KServe, Triton, cert-manager and kube-rbac-proxy images) and a
    Pod Identity role per team for ``team-<team>/inference``. Returns the registry prefix.
    """
    for repository in MIRRORED_IMAGES:
        ImageRegistry(
            f"registry-{repository}",
            ImageRegistryArgs(
                repository_name=f"{name}/{repository}", storage_key_arn=storage_key_arn
            ),
            opts,
        )
    for team in config.teams:
        PodIdentityRole(
            f"inference-{team.name}",
            PodIdentityRoleArgs(
                cluster_name=cluster_name,
                namespace=team_namespace(team.name),
                service_account=INFERENCE_SERVICE_ACCOUNT,
                description=f"Inference services of team {team.name}: read model artifacts",
                policy=iam.json_document(
                    functools.partial(
                        model_artifact_read_access,
                        region=config.region,
                    ),
                    bucket_arn,
                    MODEL_ARTIFACT_PREFIX,
                    storage_key_arn,
                ),
            ),
            opts,
        )
    return serving_registry(account_id, config.region, name)
