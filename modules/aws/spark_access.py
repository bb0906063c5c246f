"""IAM for a team's Spark jobs: its raw files in, its datasets and event logs out, the
stack's key through S3 in the region; nothing else (`modules.k8s.spark.spec` has the
prefixes).

Exactly what the data job does (``workloads/data/object_store.py``): it lists and reads
the raw files; it lists the dataset's prefix to refuse an existing dataset; it writes
each object with one ``PutObject`` (at most 5 GiB, ``If-None-Match: *``, SSE-KMS), the
dataset's files and the event log's alike. It never reads back what it wrote, never
lists the event logs and never uploads in parts, so the role has no ``GetObject`` on
datasets, no listing of ``spark-events/``, and no multipart actions."""

from __future__ import annotations

from modules.aws.iam import Document, document, list_prefixes, storage_key_through_s3


def spark_data_access(
    bucket_arn: str,
    storage_key_arn: str,
    region: str,
    *,
    raw_prefix: str,
    datasets_prefix: str,
    event_log_prefix: str,
) -> Document:
    """The policy of one team's Spark role.

    Args:
        bucket_arn: ARN of the data bucket.
        storage_key_arn: ARN of the CMK the bucket is encrypted with.
        region: the stack's region (the key may only be used via S3 there).
        raw_prefix: the team's raw files (read only), e.g. ``teams/nlp/raw/``.
        datasets_prefix: the team's datasets (listed, to refuse an existing dataset, and
            written; never read back or deleted: a dataset is written once).
        event_log_prefix: the team's Spark event logs, written only (the job uploads
            them from the driver's disk, never over an existing object; it neither
            lists, reads, renames nor deletes them, so the role can do none of these).
    """
    return document(
        list_prefixes(bucket_arn, [raw_prefix, datasets_prefix]),
        {
            "Sid": "ReadRawFiles",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": f"{bucket_arn}/{raw_prefix}*",
        },
        {
            "Sid": "WriteDatasetsOnce",
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": f"{bucket_arn}/{datasets_prefix}*",
        },
        {
            "Sid": "WriteEventLogs",
            "Effect": "Allow",
            "Action": "s3:PutObject",
            "Resource": f"{bucket_arn}/{event_log_prefix}*",
        },
        storage_key_through_s3(storage_key_arn, region, write=True),
    )
