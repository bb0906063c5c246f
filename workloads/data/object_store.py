"""The data job's object store: ``s3://`` SOURCE and OUT through boto3, without Hadoop.

The job reads raw files from, and writes its dataset to, an S3 bucket (on AWS the
stack's data bucket in the region; on premises an S3-compatible store) with boto3 alone,
so the data image needs no ``hadoop-aws`` and no AWS SDK for Java:

- **where**: the region from ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``), never a
  default: without one the job stops (boto3 would fall back to the global endpoint in
  us-east-1). An S3-compatible store's address comes from ``AWS_ENDPOINT_URL_S3`` or
  ``AWS_ENDPOINT_URL`` (boto3 reads both); against such a store checksums are sent
  only where required (`client`: no ``aws-chunked`` PUTs, which older Ceph RGW and
  MinIO refuse);
- **who**: boto3's default credential chain (on EKS the Pod Identity agent, through
  ``AWS_CONTAINER_CREDENTIALS_FULL_URI``; on premises ``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY`` from the team's Secret);
- **reading**: the driver lists the objects (`list_objects`), the executors fetch them
  (`read_object` in Spark's Python workers), each object once, streamed, split into
  lines as Spark's text source splits them, its SHA-256 computed on the way; each fetch
  is pinned to the ETag the listing saw (``If-Match``), so a fetch Spark repeats (a lost
  executor) gets the same bytes or stops the job (`SourceChangedError`), never a mix of
  two versions under one manifest;
- **writing**: every object is SSE-KMS under the key given (``ServerSideEncryption``
  ``aws:kms`` with ``SSEKMSKeyId``) and conditional (``If-None-Match: *``), so the job
  never replaces an object, even one written after its check of OUT
  (`check_out_prefix`); the manifest goes last (`upload_dataset`), so a failed run
  leaves no manifest.

Errors the user can fix (no region, no credentials, a missing bucket, access denied, an
unreachable endpoint) become `StoreError` with one line naming the cause.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.data.manifest import MANIFEST, REPORT
from workloads.data.shard_format import is_shard_name

SCHEME = "s3://"
#: S3's largest single PUT; a larger shard needs a smaller ``--shard-tokens``.
MAX_PUT_BYTES = 5 * 1024**3
#: How much of an object a worker holds at a time.
CHUNK_BYTES = 8 << 20
_REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


class StoreError(Exception):
    """The object store refused or could not be reached; the message says why."""


#: Ends `SourceChangedError`'s message; the driver finds it in an executor's failure.
SOURCE_CHANGED = "the source changed during the run"


class SourceChangedError(StoreError):
    """An object is no longer the one listed (its ETag differs): it changed while the
    job ran."""


def source_changed(err: BaseException) -> str | None:
    """The line of a `SourceChangedError` in ``err``: the error itself, or Spark's
    failure of a job whose executor raised it (the worker's traceback in its text)."""
    if isinstance(err, SourceChangedError):
        return str(err)
    for line in str(err).splitlines():
        if SOURCE_CHANGED in line:
            return line.strip().split("SourceChangedError: ", 1)[-1]
    return None


@dataclass(frozen=True)
class S3Location:
    """``s3://<bucket>/<prefix>``; ``prefix`` is empty or ends with ``/``."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def uri(self, key: str) -> str:
        return f"{SCHEME}{self.bucket}/{key}"

    @property
    def name(self) -> str:
        """The last segment of the prefix (a dataset's default name)."""
        return self.prefix.rstrip("/").rsplit("/", 1)[-1] or self.bucket


def is_s3(text: str | os.PathLike[str]) -> bool:
    return str(text).startswith(SCHEME)


def parse(text: str) -> S3Location:
    """``s3://bucket/prefix[/]`` as a location (a trailing ``/`` added).

    Raises:
        StoreError: no bucket, or a prefix with empty or relative segments.
    """
    rest = text.removeprefix(SCHEME)
    bucket, _, prefix = rest.partition("/")
    segments = [s for s in prefix.split("/") if s]
    if not bucket or any(s in (".", "..") for s in segments) or "//" in prefix.rstrip("/"):
        raise StoreError(f"{text} is not s3://<bucket>/<prefix>/ (no '.', '..' or '//')")
    return S3Location(bucket, "".join(f"{s}/" for s in segments))


def region() -> str:
    """The region the job works in (``AWS_REGION`` or ``AWS_DEFAULT_REGION``).

    Raises:
        StoreError: neither is set.
    """
    for name in _REGION_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    raise StoreError(
        "no region for the object store: set AWS_REGION (e.g. me-central-1; on premises "
        "the store's region) - the job never falls back to S3's global endpoint"
    )


#: boto3's variables naming an S3-compatible store (a site's) instead of AWS's S3.
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def site_endpoint() -> str | None:
    """The S3-compatible store's address when one is set (on premises), else None."""
    for name in ENDPOINT_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def client() -> Any:
    """An S3 client in `region`, with the default credential chain and retries.

    Against a site's S3-compatible store (`site_endpoint`) checksums are sent and
    checked only where the operation requires them: botocore 1.36 and later otherwise
    send every PUT over HTTPS as ``aws-chunked`` with a CRC32 trailer
    (``STREAMING-UNSIGNED-PAYLOAD-TRAILER``), which older Ceph RGW and MinIO refuse; a
    plain PUT with its Content-Length is what they take, and TLS guards the bytes. On
    AWS the default stays: S3 checks the CRC32 end to end."""
    import boto3  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    checksums: dict[str, Any] = (
        {"request_checksum_calculation": "when_required",
         "response_checksum_validation": "when_required"}
        if site_endpoint()
        else {}
    )  # fmt: skip
    config = Config(
        retries={"mode": "standard", "max_attempts": 8}, connect_timeout=10, **checksums
    )
    return boto3.session.Session().client("s3", region_name=region(), config=config)


def describe(err: BaseException, where: str) -> StoreError:
    """One line for a boto3/botocore error at ``where``."""
    from botocore import exceptions as be  # noqa: PLC0415

    if isinstance(err, be.NoCredentialsError | be.PartialCredentialsError):
        return StoreError(
            f"no credentials for {where}: the job uses the default chain (on EKS the "
            "ServiceAccount's Pod Identity; elsewhere AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY)"
        )
    if isinstance(err, be.EndpointConnectionError | be.ConnectTimeoutError):
        return StoreError(f"cannot reach the object store for {where} ({err})")
    if isinstance(err, be.ClientError):
        error = err.response.get("Error", {})
        code = str(error.get("Code", "?"))
        if code == "NoSuchBucket":
            return StoreError(f"{where}: the bucket does not exist")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return StoreError(f"{where}: access denied ({code}); check the role or key")
        if code in ("PreconditionFailed", "412"):
            return StoreError(f"{where} appeared while the job ran; nothing was replaced")
        return StoreError(f"{where}: {code} {error.get('Message', '')}".strip())
    if isinstance(err, be.BotoCoreError):
        return StoreError(f"{where}: {err}")
    raise err


@dataclass(frozen=True)
class StoredObject:
    """One listed object; ``etag`` pins the version a fetch must get (`read_object`)."""

    key: str
    size: int
    etag: str


def list_objects(s3: Any, where: S3Location) -> list[StoredObject]:
    """Every object under ``where``, in key order."""
    found: list[StoredObject] = []
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=where.bucket, Prefix=where.prefix
        )
        for page in pages:
            found += [
                StoredObject(o["Key"], int(o["Size"]), str(o["ETag"]))
                for o in page.get("Contents", [])
            ]
    except Exception as err:  # botocore's errors, described; others re-raised
        raise describe(err, str(where)) from err
    return sorted(found, key=lambda o: o.key)


def split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a byte stream as Spark's text source (Hadoop's LineRecordReader)
    cuts them: at ``\\n``, ``\\r`` or ``\\r\\n``, without the terminator; no empty last
    line after a final terminator."""
    pending = b""
    for chunk in chunks:
        if not chunk:
            continue
        lines = (pending + chunk).splitlines(keepends=True)
        # The last piece may be unterminated, or end in a '\r' whose '\n' is next.
        pending = lines.pop()
        if pending.endswith(b"\r\n") or pending.endswith(b"\n"):
            lines.append(pending)
            pending = b""
        for line in lines:
            yield line[:-2] if line.endswith(b"\r\n") else line[:-1]
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


def read_object(  # noqa: PLR0917
    s3: Any, bucket: str, key: str, etag: str, digest: Any, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[bytes]:
    """The lines of one object (`split_lines`), streamed; ``digest`` (a hashlib object)
    is updated with every byte read. Only the version with ``etag`` (the listing's) is
    read (``If-Match``): another raises `SourceChangedError`."""
    from botocore.exceptions import ClientError  # noqa: PLC0415

    def chunks() -> Iterator[bytes]:
        uri = f"{SCHEME}{bucket}/{key}"
        try:
            body = s3.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"]
        except ClientError as err:
            if str(err.response.get("Error", {}).get("Code")) in ("PreconditionFailed", "412"):
                raise SourceChangedError(
                    f"{uri} is no longer the object listed at the start (ETag {etag}): "
                    f"{SOURCE_CHANGED}; run the job again on a SOURCE that stays still. "
                    "Nothing was written."
                ) from err
            raise describe(err, uri) from err
        except Exception as err:
            raise describe(err, uri) from err
        with body:
            while chunk := body.read(chunk_bytes):
                digest.update(chunk)
                yield chunk

    return split_lines(chunks())


def sha256() -> Any:
    return hashlib.sha256()


def check_out_prefix(s3: Any, out: S3Location) -> None:
    """Refuse an OUT prefix that holds anything: a dataset in the store is written
    once. The job may not delete, and overwriting in place would mix two versions for
    a reader; so an earlier dataset, the shards of a failed run and anything else all
    stop the job before it starts (the conditional writes stop it later)."""
    objects = list_objects(s3, out)
    if not objects:
        return
    names = [o.key.removeprefix(out.prefix) for o in objects]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    if MANIFEST in names:
        raise StoreError(
            f"OUT {out} holds a dataset already ({shown}); a dataset in the object store is "
            "written once: choose a new OUT (a new dataset name). Nothing was changed."
        )
    if all(is_shard_name(n) or n == REPORT for n in names):
        raise StoreError(
            f"OUT {out} holds shards without a manifest ({shown}): a run that failed; "
            "remove them or choose a new OUT. Nothing was changed."
        )
    raise StoreError(
        f"OUT {out} holds objects this job did not write ({shown}); choose a new OUT. "
        "Nothing was changed."
    )


def put_file(s3: Any, path: Path, where: S3Location, name: str, kms_key: str) -> None:
    """Upload ``path`` as ``where/name``: SSE-KMS under ``kms_key``, never over an
    existing object (``If-None-Match: *``)."""
    size = path.stat().st_size
    if size > MAX_PUT_BYTES:
        raise StoreError(
            f"{name} is {size} bytes, more than one PUT takes ({MAX_PUT_BYTES}); use a "
            "smaller --shard-tokens"
        )
    try:
        with path.open("rb") as body:
            s3.put_object(
                Bucket=where.bucket,
                Key=where.key(name),
                Body=body,
                ContentLength=size,
                ServerSideEncryption="aws:kms",
                SSEKMSKeyId=kms_key,
                IfNoneMatch="*",
            )
    except Exception as err:
        raise describe(err, where.uri(where.key(name))) from err


def upload_dataset(
    s3: Any, data_dir: Path, out: S3Location, kms_key: str, first: Sequence[str]
) -> None:
    """Upload ``first`` (the shards, in order), then the report, then the manifest:
    a reader (and the trainer) takes a prefix without a manifest for no dataset."""
    for name in [*first, REPORT, MANIFEST]:
        put_file(s3, data_dir / name, out, name, kms_key)


def upload_tree(s3: Any, directory: Path, where: S3Location, kms_key: str) -> list[str]:
    """Upload every file under ``directory`` (Spark's event logs) below ``where``;
    returns the keys written."""
    written = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = path.relative_to(directory).as_posix()
        put_file(s3, path, where, name, kms_key)
        written.append(where.key(name))
    return written
