"""The AWS side of model serving: ECR repositories for the serving images and the
inference pods' read-only access to the model artifacts (EKS Pod Identity)."""

from __future__ import annotations

import functools

from modules.aws import iam
from modules.aws.serving_access import model_artifact_read_access
from modules.k8s.names import team_namespace
from modules.k8s.serving.spec import INFERENCE_SERVICE_ACCOUNT, MIRRORED_IMAGES

from .config import StackConfig
from .workload_aws import WorkloadAws

#: The MLflow tracking server stores artifacts under this prefix of the data bucket.
MODEL_ARTIFACT_PREFIX = "mlflow/"


def build_serving_aws(config: StackConfig, aws: WorkloadAws) -> str:
    """One ECR repository per serving image (``<name>/<image>``: the predictor built
    here, the mirrored KServe, Triton, cert-manager and kube-rbac-proxy images) and a
    Pod Identity role per team for ``team-<team>/inference``. Returns the registry prefix.
    """
    aws.mirror(MIRRORED_IMAGES)
    for team in config.teams:
        aws.pod_role(
            f"inference-{team.name}",
            namespace=team_namespace(team.name),
            service_account=INFERENCE_SERVICE_ACCOUNT,
            description=f"Inference services of team {team.name}: read model artifacts",
            policy=iam.json_document(
                functools.partial(model_artifact_read_access, region=config.region),
                aws.bucket_arn,
                MODEL_ARTIFACT_PREFIX,
                aws.storage_key_arn,
            ),
        )
    return aws.registry
