"""Where the offline store's Parquet sources are: a local directory (``make features``)
or a prefix of the stack's in-region bucket (``s3://<bucket>/features``, on AWS).

On S3 every client is pointed at the region's own endpoint (``https://s3.<region>.
amazonaws.com``, which the cluster passes: `modules.k8s.features.spec`), so no request
leaves the region: Feast's file sources carry it (``s3_endpoint_override``, read
by its PyArrow and Dask readers), and pandas/s3fs take it from `OfflineStore.storage_options`.
Credentials are the default chain's (EKS Pod Identity on the cluster). Objects are
written with SSE-KMS: under the given key, or the bucket's default key (the stack's),
which the bucket policy also enforces (`modules.aws.storage.data_bucket_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OfflineStore:
    """The Parquet sources' location.

    Args:
        uri: a local directory, or ``s3://<bucket>/<prefix>``.
        s3_endpoint: the S3 endpoint (``https://s3.<region>.amazonaws.com``; a test's
            S3 server). Empty: the default chain's (``AWS_ENDPOINT_URL``, the region's).
        kms_key_id: the SSE-KMS key objects are written with; empty: the bucket's
            default key, still SSE-KMS.
    """

    uri: str
    s3_endpoint: str = ""
    kms_key_id: str = ""

    @property
    def on_s3(self) -> bool:
        return self.uri.startswith("s3://")

    def path(self, name: str) -> str:
        """The location of the source file ``name``."""
        return f"{self.uri.rstrip('/')}/{name}"

    def storage_options(self, *, write: bool = False) -> dict[str, Any] | None:
        """fsspec's options for pandas (None for a local directory): the endpoint, and
        for writes SSE-KMS."""
        if not self.on_s3:
            return None
        options: dict[str, Any] = {}
        if self.s3_endpoint:
            options["client_kwargs"] = {"endpoint_url": self.s3_endpoint}
        if write:
            encryption = {"ServerSideEncryption": "aws:kms"}
            if self.kms_key_id:
                encryption["SSEKMSKeyId"] = self.kms_key_id
            options["s3_additional_kwargs"] = encryption
        return options
