"""IAM for Kubeflow Pipelines (pure documents): each of KFP's identities gets one
prefix of the data bucket under ``pipelines/``, and the storage key only through S3 in
the region.

* the runs (``pipeline-runner``): read and write the pipeline root
  (``pipelines/runs/``), read the inputs staged for them (``pipelines/sources/``);
* the API server (``ml-pipeline``): read and write its pipeline specs
  (``pipelines/specs/``), read the runs' artifacts (it serves their downloads);
* the UI (``ml-pipeline-ui``): read the runs' artifacts.
"""

from __future__ import annotations

from modules.aws.iam import Document, document, list_prefixes, storage_key_through_s3

_WRITE = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]


def prefixes_access(
    bucket_arn: str,
    storage_key_arn: str,
    region: str,
    *,
    write: tuple[str, ...] = (),
    read: tuple[str, ...] = (),
) -> Document:
    """Read/write of the ``write`` prefixes and read of the ``read`` prefixes of the data
    bucket (no deletes: KFP keeps artifacts; the bucket's lifecycle expires old versions),
    and the storage key through S3 in ``region`` (decrypt, plus data keys to write).

    Args:
        bucket_arn: ARN of the data bucket.
        storage_key_arn: ARN of the CMK the bucket is encrypted with.
        region: the stack's region.
        write: prefixes read and written, e.g. ``("pipelines/runs/",)``.
        read: prefixes only read.
    """
    if not write and not read:
        raise ValueError("a pipelines role needs at least one prefix")
    statements: list[dict[str, object]] = [list_prefixes(bucket_arn, [*write, *read])]
    if write:
        statements.append(
            {
                "Sid": "ReadWriteOwnPrefixes",
                "Effect": "Allow",
                "Action": list(_WRITE),
                "Resource": [f"{bucket_arn}/{p}*" for p in write],
            }
        )
    if read:
        statements.append(
            {
                "Sid": "ReadPrefixes",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": [f"{bucket_arn}/{p}*" for p in read],
            }
        )
    statements.append(storage_key_through_s3(storage_key_arn, region, write=bool(write)))
    return document(*statements)
