"""Spark jobs (the Kubeflow Spark Operator's ``SparkApplication`` and
``ScheduledSparkApplication``) keep their data in the stack's stores, in the region, and
their event logs under the stack's key.

* Locations: every URI a job names, anywhere in its spec (arguments, ``sparkConf``,
  ``hadoopConf``, dependencies, the pods' environment and commands), is ``s3a://`` (or
  ``s3://``, ``s3n://``) of a bucket this stack creates, reached through S3 in an allowed
  region, or of the site's object store: a Service of the (UAE) cluster, or a host the
  pack config allows (``allowedObjectStores``), over TLS. ``local://`` and ``file://``
  (the pod's own disk) are not stores. Anything else (another bucket, ``gs://``,
  ``abfss://``, ``hdfs://``, ``https://``) would read the data from, or write it to, a
  place the stack cannot show to be in the UAE.
* Event logs: on, written to an object store location (checked above), with S3A's
  SSE-KMS (or DSSE-KMS) under a named key; on AWS a key this stack creates, in the
  bucket's region.

S3A's settings are read from ``sparkConf`` (``spark.hadoop.<key>``) and ``hadoopConf``
(``<key>``), per bucket (``fs.s3a.bucket.<bucket>.<setting>``) before the global ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlparse

from pulumi_policy import Severity

from policies import controls
from policies.aws import is_aws_managed_key, parse_arn, region_of
from policies.k8s import metadata
from policies.model import ResourceView, StackView, stack_rule
from policies.rules.stack import BUCKET, KEY, bucket_ids, stack_key_for
from policies.settings import Settings
from policies.values import Deferred, dig, is_unknown, known, walk_strings

SPARK_APPLICATION = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
SCHEDULED_SPARK_APPLICATION = "kubernetes:sparkoperator.k8s.io/v1beta2:ScheduledSparkApplication"
SPARK_TYPES = (SPARK_APPLICATION, SCHEDULED_SPARK_APPLICATION)
#: Schemes of an S3 bucket (Hadoop's S3A, and the names other clients use).
S3_SCHEMES = ("s3a", "s3", "s3n")
#: Schemes of the pod's own file system: no store.
LOCAL_SCHEMES = ("local", "file")
#: Server-side encryption under a KMS key (S3A's ``fs.s3a.encryption.algorithm``).
KMS_ALGORITHMS = ("SSE-KMS", "DSSE-KMS")
_URI = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://[^\s\"'`<>()\[\]{},;|]*")
_AWS_S3_HOST = re.compile(
    r"^(?:[a-z0-9.-]+\.)?s3(?:[.-]dualstack|[.-]fips)?[.-]([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com$"
)


def _is_spark(resource: ResourceView) -> bool:
    return resource.type in SPARK_TYPES


def application(resource: ResourceView) -> tuple[str, Mapping[str, Any]]:
    """(path, spec) of the application: a ScheduledSparkApplication's ``spec.template``."""
    if resource.type == SCHEDULED_SPARK_APPLICATION:
        template = dig(resource.props, "spec", "template")
        return "spec.template", template if isinstance(template, Mapping) else {}
    spec = resource.props.get("spec")
    return "spec", spec if isinstance(spec, Mapping) else {}


def hadoop_settings(path: str, spec: Mapping[str, Any]) -> dict[str, list[tuple[str, Any]]]:
    """Hadoop key -> every (path, value) the application gives it (``sparkConf``'s
    ``spark.hadoop.*`` and ``hadoopConf``)."""
    found: dict[str, list[tuple[str, Any]]] = {}
    spark_conf = spec.get("sparkConf")
    if isinstance(spark_conf, Mapping):
        for key, value in spark_conf.items():
            if str(key).startswith("spark.hadoop."):
                hadoop_key = str(key).removeprefix("spark.hadoop.")
                found.setdefault(hadoop_key, []).append((f"{path}.sparkConf.{key}", value))
    hadoop_conf = spec.get("hadoopConf")
    if isinstance(hadoop_conf, Mapping):
        for key, value in hadoop_conf.items():
            found.setdefault(str(key), []).append((f"{path}.hadoopConf.{key}", value))
    return found


def s3a_values(
    settings: Mapping[str, list[tuple[str, Any]]], bucket: str, *names: str
) -> list[tuple[str, Any]]:
    """The values S3A uses for ``bucket``: ``fs.s3a.bucket.<bucket>.<name>`` where set,
    else ``fs.s3a.<name>``; the first of ``names`` that is set (current name first)."""
    for name in names:
        for key in (f"fs.s3a.bucket.{bucket}.{name}", f"fs.s3a.{name}"):
            if key in settings:
                return settings[key]
    return []


def _is_endpoint_key(path: str) -> bool:
    """An S3A endpoint setting: a place the client connects to, judged with the bucket."""
    key = path.rsplit(".sparkConf.", 1)[-1].rsplit(".hadoopConf.", 1)[-1]
    key = key.removeprefix("spark.hadoop.")
    return bool(re.fullmatch(r"fs\.s3a\.(bucket\.[^.]+(\.[^.]+)*?\.)?endpoint", key))


def locations(path: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, URI) of every URI the application names outside the endpoint settings."""
    for where, text in walk_strings(spec, path):
        if is_unknown(text) or _is_endpoint_key(where):
            continue
        for match in _URI.finditer(text):
            yield where, match.group(0)


def stack_buckets(stack: StackView) -> dict[str, ResourceView]:
    """The buckets this stack creates, by every name other resources may use."""
    buckets: dict[str, ResourceView] = {}
    for bucket in stack.of_type(BUCKET):
        for name in bucket_ids(bucket):
            buckets[name] = bucket
    return buckets


def _host(endpoint: str) -> tuple[str, str]:
    """(scheme, host[:port]) of an endpoint given as a URL or a bare host."""
    parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
    return parsed.scheme, parsed.netloc.lower()


def aws_region_of_endpoint(host: str) -> str | None:
    match = _AWS_S3_HOST.match(host.split(":", 1)[0])
    return match.group(1) if match else None


def _in_cluster(host: str) -> bool:
    name = host.split(":", 1)[0]
    return name.endswith(".svc") or name.endswith(".svc.cluster.local")


def _one(values: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    for where, value in values:
        yield where, known(value, where)


def store_problems(
    uri: str,
    settings: Mapping[str, list[tuple[str, Any]]],
    buckets: Mapping[str, ResourceView],
    policy: Settings,
) -> Iterator[str]:
    """Why ``uri`` is not in the stack's stores (nothing when it is)."""
    scheme = uri.split("://", 1)[0].lower()
    if scheme in LOCAL_SCHEMES:
        return
    if scheme not in S3_SCHEMES:
        yield f"{uri} uses {scheme}://, outside the stack's stores (s3a:// of its buckets)"
        return
    bucket = urlparse(uri).netloc
    if not bucket:
        yield f"{uri} names no bucket"
        return
    endpoints = list(_one(s3a_values(settings, bucket, "endpoint")))
    regions = list(_one(s3a_values(settings, bucket, "endpoint.region")))
    for where, value in _one(s3a_values(settings, bucket, "connection.ssl.enabled")):
        if str(value).lower() == "false":
            yield f"{uri}: `{where}` turns TLS off: the data crosses the network in clear text"
    site = [(w, e) for w, e in endpoints if not _host(str(e))[1].endswith("amazonaws.com")]
    if site:
        for where, endpoint in site:
            scheme_of, host = _host(str(endpoint))
            if scheme_of != "https":
                yield f"{uri}: `{where}` {endpoint} is not HTTPS"
            if not (_in_cluster(host) or host in policy.allowed_object_stores):
                allowed = ", ".join(policy.allowed_object_stores) or "none configured"
                yield (
                    f"{uri}: `{where}` {endpoint} is neither a Service of the cluster nor an "
                    f"allowed object store ({allowed})"
                )
        return
    target = buckets.get(bucket)
    if target is None:
        known_buckets = ", ".join(sorted({b.props.get("bucket", b.name) for b in buckets.values()}))
        yield (
            f"{uri} is bucket {bucket!r}, not one this stack creates "
            f"({known_buckets or 'it creates none'})"
        )
        return
    reached = {aws_region_of_endpoint(_host(str(e))[1]) for _, e in endpoints}
    reached |= {str(r) for _, r in regions}
    if None in reached:
        yield f"{uri}: an S3A endpoint is S3's global endpoint, outside any region"
    reached.discard(None)
    if not reached:
        yield (
            f"{uri}: neither fs.s3a.endpoint nor fs.s3a.endpoint.region is set: the S3 "
            "client starts at the global endpoint (us-east-1)"
        )
    bucket_region = known(region_of(target), f"{target.name}.region")
    for region in sorted(r for r in reached if r is not None):
        if region not in policy.allowed_regions:
            yield f"{uri}: S3A reaches S3 in {region}, outside the allowed regions"
        elif bucket_region and region != bucket_region:
            yield f"{uri}: S3A reaches S3 in {region}, the bucket is in {bucket_region}"


@stack_rule(
    id="uae-spark-data-location",
    description=(
        "Spark jobs read and write only the stack's stores: every location a "
        "SparkApplication or ScheduledSparkApplication names is s3a:// of a bucket the "
        "stack creates, reached through S3 in an allowed region, or of the site's object "
        "store (a Service of the cluster, or an allowed host) over TLS."
    ),
    severity=Severity.CRITICAL,
    remediation=(
        "Put the job's input, output and event logs in the stack's data bucket "
        "(s3a://<data bucket>/teams/<team>/raw|datasets/..., spark-events/<team>/) and "
        "set spark.hadoop.fs.s3a.endpoint.region (or the region's endpoint); on premises "
        "point spark.hadoop.fs.s3a.endpoint at the site's store over https:// (a Service "
        "of the cluster, or a host in `allowedObjectStores`). Copy data from elsewhere into "
        "the stack's store first; keep settings in sparkConf/hadoopConf, not ConfigMaps."
    ),
    controls=(*controls.RESIDENCY, controls.ISO_8_12),
    applies_to=_is_spark,
    config_keys=("allowedRegions", "allowedObjectStores"),
)
def spark_data_location(stack: StackView, settings: Settings) -> Iterator[tuple[str | None, str]]:
    buckets = stack_buckets(stack)
    deferred = Deferred()
    for app in stack.of_type(*SPARK_TYPES):
        name = metadata(app).get("name", app.name)
        path, spec = application(app)
        hadoop = hadoop_settings(path, spec)
        for key in ("sparkConfigMap", "hadoopConfigMap"):
            if spec.get(key) not in (None, ""):
                yield (
                    app.urn,
                    (
                        f"Spark job {name} `{path}.{key}` keeps settings in ConfigMap "
                        f"{spec.get(key)}, which the review cannot see"
                    ),
                )
        for where, uri in locations(path, spec):
            with deferred.each():
                for problem in store_problems(uri, hadoop, buckets, settings):
                    yield app.urn, f"Spark job {name} `{where}`: {problem}"
    deferred.finish()


def _event_log_problems(
    stack: StackView, app: ResourceView, buckets: Mapping[str, ResourceView]
) -> Iterator[str]:
    path, spec = application(app)
    conf = spec.get("sparkConf") if isinstance(spec.get("sparkConf"), Mapping) else {}
    assert isinstance(conf, Mapping)
    enabled = known(conf.get("spark.eventLog.enabled"), f"{path}.sparkConf.spark.eventLog.enabled")
    if str(enabled).lower() != "true":
        yield (
            "`spark.eventLog.enabled` is not true: no record of the job's stages is kept "
            "in the stack's store"
        )
        return
    directory = known(conf.get("spark.eventLog.dir"), f"{path}.sparkConf.spark.eventLog.dir")
    if not isinstance(directory, str) or not directory:
        yield "`spark.eventLog.dir` is not set: Spark writes event logs to the pod's /tmp"
        return
    scheme = directory.split("://", 1)[0].lower() if "://" in directory else "file"
    if scheme not in S3_SCHEMES:
        yield (
            f"`spark.eventLog.dir` {directory} is not an object store location: the logs "
            "are not under the stack's key (and go with the pod)"
        )
        return
    bucket = urlparse(directory).netloc
    hadoop = hadoop_settings(path, spec)
    algorithms = list(
        _one(s3a_values(hadoop, bucket, "encryption.algorithm", "server-side-encryption-algorithm"))
    )
    if not algorithms:
        yield (
            f"event logs in {directory} get no S3A encryption setting "
            "(fs.s3a.encryption.algorithm): not SSE-KMS under the stack's key"
        )
    for where, algorithm in algorithms:
        if str(algorithm).upper() not in KMS_ALGORITHMS:
            yield f"`{where}` is {algorithm}: event logs are not SSE-KMS under the stack's key"
    keys = s3a_values(hadoop, bucket, "encryption.key", "server-side-encryption.key")
    if not keys:
        yield (
            f"event logs in {directory} name no key (fs.s3a.encryption.key): S3 would use "
            "its AWS-managed key"
        )
    target = buckets.get(bucket)
    keys_known = any(
        isinstance(key.props.get(name), str) and not is_unknown(key.props[name])
        for key in stack.of_type(KEY)
        for name in ("arn", "keyId", "id")
    )
    for where, value in keys:
        if value in (None, ""):
            yield f"`{where}` is empty: S3 would use its AWS-managed key"
            continue
        if target is None:
            continue  # the site's store: its key is the site's (the location rule checks it)
        if not is_unknown(value) and is_aws_managed_key(str(value)):
            yield f"`{where}` is the AWS-managed key {value}, not a key of the stack"
            continue
        # The dependency is on the whole spec, which may depend on a stack key for
        # another reason: where the stack's keys are known (an existing stack), a known
        # value must name one of them itself; an unknown value (or a first preview,
        # where no key's ARN is known yet) is traced through the spec's dependencies.
        by_value = not is_unknown(value) and keys_known
        named_by = replace(app, property_dependencies={}) if by_value else app
        key = stack_key_for(stack, named_by, "spec", value)
        if key is None:
            known(value, where)
            yield f"`{where}` uses key {value}, which this stack does not create"
            continue
        key_region = known(region_of(key), f"{key.name}.region")
        bucket_region = known(region_of(target), f"{target.name}.region")
        if key_region and bucket_region and key_region != bucket_region:
            yield f"`{where}` uses key {key.name} in {key_region} for a bucket in {bucket_region}"
        if not is_unknown(value):
            arn = parse_arn(str(value))
            if arn is not None and arn.region and arn.region != key_region:
                yield f"`{where}` names a key in {arn.region}"


@stack_rule(
    id="uae-spark-event-logs-encrypted",
    description=(
        "Spark jobs keep event logs, in an object store location, encrypted with SSE-KMS "
        "under a named key: on AWS a KMS key the stack creates, in the bucket's region."
    ),
    severity=Severity.HIGH,
    remediation=(
        "Set spark.eventLog.enabled=true, spark.eventLog.dir=s3a://<data bucket>/"
        "spark-events/<team>/, spark.hadoop.fs.s3a.encryption.algorithm=SSE-KMS and "
        "spark.hadoop.fs.s3a.encryption.key=<the stack's storage key ARN> (on premises the "
        "site store's key id)."
    ),
    controls=(*controls.CRYPTO, controls.ISO_8_9, controls.PDPL_22_TRANSFER),
    applies_to=_is_spark,
    config_keys=("allowedRegions",),
)
def spark_event_logs_encrypted(
    stack: StackView, settings: Settings
) -> Iterator[tuple[str | None, str]]:
    buckets = stack_buckets(stack)
    deferred = Deferred()
    for app in stack.of_type(*SPARK_TYPES):
        name = metadata(app).get("name", app.name)
        with deferred.each():
            for problem in _event_log_problems(stack, app, buckets):
                yield app.urn, f"Spark job {name}: {problem}"
    deferred.finish()
