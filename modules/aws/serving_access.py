"""IAM for model serving: inference pods read registered model artifacts, nothing else."""

from __future__ import annotations

from modules.aws.iam import Document, document, list_prefixes, storage_key_through_s3


def model_artifact_read_access(
    bucket_arn: str, prefix: str, storage_key_arn: str, region: str
) -> Document:
    """Read-only access to the model artifacts below ``prefix`` of the data bucket, and
    decryption with the storage key only through S3 in the region.

    Args:
        bucket_arn: ARN of the data bucket.
        prefix: the artifacts' key prefix, e.g. ``mlflow/`` (MLflow's artifact root).
        storage_key_arn: ARN of the CMK the bucket is encrypted with.
        region: the stack's region.
    """
    return document(
        list_prefixes(bucket_arn, [prefix], sid="ListModelArtifacts"),
        {
            "Sid": "ReadModelArtifacts",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": f"{bucket_arn}/{prefix}*",
        },
        storage_key_through_s3(storage_key_arn, region, write=False, sid="DecryptThroughS3"),
    )
