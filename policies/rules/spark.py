"""Spark jobs (the Kubeflow Spark Operator's ``SparkApplication`` and
``ScheduledSparkApplication``) keep their data in the stack's stores, in the region, and
their event logs under the stack's key.

* Locations: every URI a job names, anywhere in its spec (arguments, ``sparkConf``,
  ``hadoopConf``, dependencies, the pods' environment and commands), is ``s3a://`` (or
  ``s3://``, ``s3n://``) of a bucket this stack creates, reached through S3 in an allowed
  region, or of the site's object store: a Service of the (UAE) cluster, or a host the
  pack config allows (``allowedObjectStores``), over TLS. An ``s3a://`` URI is reached
  as Hadoop's S3A settings say; an ``s3://`` (or ``s3n://``) URI as the pods' AWS SDK
  environment says (the platform's data job uses boto3: ``AWS_REGION`` or
  ``AWS_DEFAULT_REGION``, and ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` for a
  site store), read from the driver's and the executors' ``env``, ``envVars`` and pod
  templates, where sparkConf's ``spark.kubernetes.driverEnv.<name>`` and
  ``spark.executorEnv.<name>`` win (Spark adds them last); every pod must name the
  region. Those variables from ``valueFrom`` (or ``envSecretKeyRefs``), and any
  ``envFrom`` ConfigMap or Secret, cannot be read in the plan: refused. ``local://`` and ``file://``
  (the pod's own disk) are not stores. Anything else (another bucket, ``gs://``,
  ``abfss://``, ``hdfs://``, ``https://``) would read the data from, or write it to, a
  place the stack cannot show to be in the UAE.
* Event logs: on, and kept in an object store location (checked above) under a named
  KMS key; on AWS a key this stack creates, in the bucket's region. Either Spark writes
  them there with S3A's SSE-KMS (or DSSE-KMS), or Spark writes them to the driver's
  local disk (``file://``) and the platform's data job uploads them when it ends (only
  that job is trusted to: its main file, ``MAIN_FILE``, in the driver's image of the
  data repository, ``<registry>/data:<tag>``): its arguments name the location
  (``--event-log-uri s3://...``) and the key (``--kms-key``), and it writes every
  object SSE-KMS under that key (``workloads/data/object_store.py``).

S3A's settings are read from ``sparkConf`` (``spark.hadoop.<key>``) and ``hadoopConf``
(``<key>``), per bucket (``fs.s3a.bucket.<bucket>.<setting>``) before the global ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from modules.k8s.spark.spec import DATA_REPOSITORY, MAIN_FILE
from policies.aws import is_aws_managed_key, parse_arn, region_of
from policies.catalogue import stack_rule
from policies.k8s import metadata
from policies.model import ResourceView, StackFindings, StackView
from policies.rules.checks import (
    aws_region,
    endpoint,
    not_a_stack_bucket,
    site_store_problems,
    stack_buckets,
    uri_bucket,
)
from policies.rules.stack import KEY, stack_key_for
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
#: The AWS SDK's variables (boto3) for the region and the address of S3.
SDK_REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
SDK_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
#: The data job's arguments: where its event log goes, and the key of what it writes.
EVENT_LOG_ARGUMENT = "--event-log-uri"
KMS_KEY_ARGUMENT = "--kms-key"
_URI = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://[^\s\"'`<>()\[\]{},;|]*")


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


#: The sparkConf prefix of each pod role's extra environment: Spark adds these variables
#: after the pod template's, so they are the ones the container gets.
ROLE_ENV_PREFIXES = {"driver": "spark.kubernetes.driverEnv.", "executor": "spark.executorEnv."}


def pod_environments(
    path: str, spec: Mapping[str, Any], *, final: bool = True
) -> list[dict[str, list[tuple[str, Any]]]]:
    """Per pod role (driver, executor): variable name -> every (path, value) the
    role's containers get (``env``, ``envVars``, the pod template's containers), or,
    with ``final``, only the sparkConf's ``spark.kubernetes.driverEnv.<name>`` /
    ``spark.executorEnv.<name>`` where set (the value that wins); without ``final`` all
    of them. Variables from ``valueFrom`` or ``envFrom`` are not here
    (`unverifiable_environment`)."""
    found = []
    spark_conf = spec.get("sparkConf")
    for role in ("driver", "executor"):
        pod = spec.get(role)
        variables: dict[str, list[tuple[str, Any]]] = {}
        if isinstance(pod, Mapping):
            for where, items in _env_lists(path, role, pod):
                for index, item in enumerate(items):
                    if isinstance(item, Mapping) and "value" in item:
                        variables.setdefault(str(item.get("name")), []).append(
                            (f"{where}[{index}].value", item["value"])
                        )
            env_vars = pod.get("envVars")
            if isinstance(env_vars, Mapping):
                for name, value in env_vars.items():
                    variables.setdefault(str(name), []).append(
                        (f"{path}.{role}.envVars.{name}", value)
                    )
        if isinstance(spark_conf, Mapping):
            prefix = ROLE_ENV_PREFIXES[role]
            for key, value in spark_conf.items():
                if str(key).startswith(prefix) and str(key) != prefix:
                    name = str(key).removeprefix(prefix)
                    setting = (f"{path}.sparkConf.{key}", value)
                    if final:
                        variables[name] = [setting]
                    else:
                        variables.setdefault(name, []).append(setting)
        found.append(variables)
    return found


def _env_lists(
    path: str, role: str, pod: Mapping[str, Any], key: str = "env"
) -> list[tuple[str, list[Any]]]:
    """(path, list) of a role's ``key`` lists (``env`` or ``envFrom``): the operator's
    and the template's containers'."""
    lists = [(f"{path}.{role}.{key}", pod.get(key))]
    containers = dig(pod, "template", "spec", "containers")
    if isinstance(containers, list):
        lists += [
            (f"{path}.{role}.template.spec.containers[{i}].{key}", c.get(key))
            for i, c in enumerate(containers)
            if isinstance(c, Mapping)
        ]
    return [(where, items) for where, items in lists if isinstance(items, list)]


def unverifiable_environment(path: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, what) of each place a pod role takes environment the review cannot read:
    an AWS SDK variable (`SDK_REGION_VARIABLES`, `SDK_ENDPOINT_VARIABLES`) from
    ``valueFrom`` (or the operator's ``envSecretKeyRefs``), and any ``envFrom`` (a whole
    ConfigMap or Secret, which may hold them). Either could point the pods' S3 client
    anywhere while the spec shows the region's."""
    sdk = (*SDK_REGION_VARIABLES, *SDK_ENDPOINT_VARIABLES)
    for role in ("driver", "executor"):
        pod = spec.get(role)
        if not isinstance(pod, Mapping):
            continue
        for where, items in _env_lists(path, role, pod):
            for index, item in enumerate(items):
                if isinstance(item, Mapping) and item.get("name") in sdk and "valueFrom" in item:
                    yield (
                        f"{where}[{index}].valueFrom",
                        f"sets {item['name']} from {_source(item['valueFrom'])}",
                    )
        refs = pod.get("envSecretKeyRefs")
        if isinstance(refs, Mapping):
            for name in refs:
                if name in sdk:
                    yield f"{path}.{role}.envSecretKeyRefs.{name}", f"sets {name} from a Secret"
        for where, entries in _env_lists(path, role, pod, "envFrom"):
            if entries:
                kinds = ", ".join(_source(entry) for entry in entries)
                yield where, f"takes environment variables from {kinds}"


def _source(item: Any) -> str:
    """A ``valueFrom`` or ``envFrom`` entry in words (its kind and name)."""
    if not isinstance(item, Mapping):
        return "an unreadable source"
    for key, value in item.items():
        if key != "prefix":
            name = value.get("name") if isinstance(value, Mapping) else None
            return f"{key} {name}" if name else str(key)
    return "an unreadable source"


def sdk_settings(path: str, spec: Mapping[str, Any]) -> dict[str, list[tuple[str, Any]]]:
    """The pods' AWS SDK settings in S3A's terms (``fs.s3a.endpoint``,
    ``fs.s3a.endpoint.region``), judged like them: each pod role's endpoint (the first of
    `SDK_ENDPOINT_VARIABLES` set) and region (the first of `SDK_REGION_VARIABLES`). A
    role that names no region gets none, so the location check reports it."""
    endpoints: list[tuple[str, Any]] = []
    regions: list[tuple[str, Any]] = []
    missing = False
    for variables in pod_environments(path, spec):
        endpoints += next((variables[n] for n in SDK_ENDPOINT_VARIABLES if n in variables), [])
        region = next((variables[n] for n in SDK_REGION_VARIABLES if n in variables), [])
        regions += region
        missing |= not region
    settings: dict[str, list[tuple[str, Any]]] = {}
    if endpoints:
        settings["fs.s3a.endpoint"] = endpoints
    if regions and not missing:
        settings["fs.s3a.endpoint.region"] = regions
    return settings


def _endpoint_paths(path: str, spec: Mapping[str, Any]) -> set[str]:
    """Where the pods' SDK endpoints are set: places the client connects to, judged with
    the bucket, not locations of data."""
    return {
        where
        for variables in pod_environments(path, spec, final=False)
        for name in SDK_ENDPOINT_VARIABLES
        for where, _ in variables.get(name, [])
    }


def _is_endpoint_key(path: str) -> bool:
    """An S3A endpoint setting: a place the client connects to, judged with the bucket."""
    key = path.rsplit(".sparkConf.", 1)[-1].rsplit(".hadoopConf.", 1)[-1]
    key = key.removeprefix("spark.hadoop.")
    return bool(re.fullmatch(r"fs\.s3a\.(bucket\.[^.]+(\.[^.]+)*?\.)?endpoint", key))


def locations(path: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, URI) of every URI the application names outside the endpoint settings."""
    endpoints = _endpoint_paths(path, spec)
    for where, text in walk_strings(spec, path):
        if is_unknown(text) or _is_endpoint_key(where) or where in endpoints:
            continue
        for match in _URI.finditer(text):
            yield where, match.group(0)


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
    bucket = uri_bucket(uri)
    if not bucket:
        yield f"{uri} names no bucket"
        return
    endpoints = [(w, str(e)) for w, e in _one(s3a_values(settings, bucket, "endpoint"))]
    regions = list(_one(s3a_values(settings, bucket, "endpoint.region")))
    for where, value in _one(s3a_values(settings, bucket, "connection.ssl.enabled")):
        if str(value).lower() == "false":
            yield f"{uri}: `{where}` turns TLS off: the data crosses the network in clear text"
    # Each endpoint's region: None for the site's store (not AWS), "" for S3's global one.
    by_region = [(where, text, aws_region(endpoint(text).host)) for where, text in endpoints]
    if any(region is None for _, _, region in by_region):
        for where, text, region in by_region:
            if region is None:
                for problem in site_store_problems(text, policy.allowed_object_stores):
                    yield f"{uri}: `{where}` {problem}"
        # One pod on the site's store, another on AWS S3: that one is judged by region.
        for where, text, region in by_region:
            if region is not None and region not in policy.allowed_regions:
                yield f"{uri}: `{where}` {text} is S3 outside the allowed regions"
        return
    target = buckets.get(bucket)
    if target is None:
        yield not_a_stack_bucket(uri, bucket, buckets)
        return
    for where, text in endpoints:
        if endpoint(text).scheme == "http":
            yield (
                f"{uri}: `{where}` {text} is plain HTTP: the data crosses the network in clear text"
            )
    reached = {region for _, _, region in by_region if region}
    reached |= {str(r) for _, r in regions}
    if any(region == "" for _, _, region in by_region):
        yield f"{uri}: an S3A endpoint is S3's global endpoint, outside any region"
    if not reached:
        yield (
            f"{uri}: no region is set (fs.s3a.endpoint or fs.s3a.endpoint.region for "
            "s3a://; AWS_REGION in every pod for s3://): the S3 client starts at the global "
            "endpoint (us-east-1)"
        )
    bucket_region = known(region_of(target), f"{target.name}.region")
    for region in sorted(reached):
        if region not in policy.allowed_regions:
            yield f"{uri}: S3A reaches S3 in {region}, outside the allowed regions"
        elif bucket_region and region != bucket_region:
            yield f"{uri}: S3A reaches S3 in {region}, the bucket is in {bucket_region}"


def _spark_jobs(stack: StackView) -> Iterator[tuple[ResourceView, str]]:
    """Every Spark job of the stack (SparkApplication, ScheduledSparkApplication), with
    the name the findings give it."""
    for app in stack.of_type(*SPARK_TYPES):
        yield app, str(metadata(app).get("name", app.name))


@stack_rule("uae-spark-data-location")
def spark_data_location(stack: StackView, settings: Settings) -> StackFindings:
    buckets = stack_buckets(stack)
    deferred = Deferred()
    for app, name in _spark_jobs(stack):
        path, spec = application(app)
        hadoop = hadoop_settings(path, spec)
        sdk = sdk_settings(path, spec)
        for key in ("sparkConfigMap", "hadoopConfigMap"):
            if spec.get(key) not in (None, ""):
                yield (
                    app.urn,
                    (
                        f"Spark job {name} `{path}.{key}` keeps settings in ConfigMap "
                        f"{spec.get(key)}, which the review cannot see"
                    ),
                )
        for where, what in unverifiable_environment(path, spec):
            yield app.urn, f"Spark job {name} `{where}` {what}, which the review cannot see"
        for where, uri in locations(path, spec):
            with deferred.each():
                by = hadoop if uri.lower().startswith("s3a://") else sdk
                for problem in store_problems(uri, by, buckets, settings):
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
    if scheme == "file":
        yield from _uploaded_event_log_problems(stack, app, buckets, directory)
        return
    if scheme not in S3_SCHEMES:
        yield (
            f"`spark.eventLog.dir` {directory} is not an object store location: the logs "
            "are not under the stack's key (and go with the pod)"
        )
        return
    bucket = uri_bucket(directory)
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
    yield from _key_problems(stack, app, buckets.get(bucket), keys)


def _argument(path: str, spec: Mapping[str, Any], flag: str) -> tuple[str, Any] | None:
    """(path, value) of the application argument after ``flag``; None when absent."""
    arguments = spec.get("arguments")
    if not isinstance(arguments, list):
        return None
    for index, value in enumerate(arguments[:-1]):
        if value == flag:
            return f"{path}.arguments[{index + 1}]", arguments[index + 1]
    return None


def _not_the_data_job(path: str, spec: Mapping[str, Any]) -> Iterator[str]:
    """Why the driver may not be the platform's data job (nothing when it is): its main
    file is not `MAIN_FILE`, or an image the driver may run is not of the data image's
    repository (`DATA_REPOSITORY`). Only that job uploads a local event log under the
    key its arguments name; another program given the same arguments need not."""
    main = known(spec.get("mainApplicationFile"), f"{path}.mainApplicationFile")
    if main != MAIN_FILE:
        yield f"`{path}.mainApplicationFile` is {main}"
    images: list[tuple[str, Any]] = [(f"{path}.image", spec.get("image"))]
    driver = spec.get("driver")
    if isinstance(driver, Mapping):
        images.append((f"{path}.driver.image", driver.get("image")))
        containers = dig(driver, "template", "spec", "containers")
        if isinstance(containers, list):
            images += [
                (f"{path}.driver.template.spec.containers[{i}].image", c.get("image"))
                for i, c in enumerate(containers)
                if isinstance(c, Mapping)
            ]
    conf = spec.get("sparkConf")
    if isinstance(conf, Mapping):
        for key in ("spark.kubernetes.container.image", "spark.kubernetes.driver.container.image"):
            images.append((f"{path}.sparkConf.{key}", conf.get(key)))
    for where, value in images:
        image = known(value, where)
        if image is not None and _repository_name(str(image)) != DATA_REPOSITORY:
            yield f"`{where}` is {image}"


def _repository_name(image: str) -> str:
    """The last part of an image's repository: ``<registry>/team/data:1@sha256:..`` ->
    ``data``."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def _uploaded_event_log_problems(
    stack: StackView, app: ResourceView, buckets: Mapping[str, ResourceView], directory: str
) -> Iterator[str]:
    """A local event-log directory: the data job must upload it (``--event-log-uri``)
    to an object store location, SSE-KMS under a named key (``--kms-key``)."""
    path, spec = application(app)
    not_the_data_job = list(_not_the_data_job(path, spec))
    if not_the_data_job:
        yield (
            f"`spark.eventLog.dir` {directory} is not an object store location, and the "
            f"driver is not the platform's data job ({MAIN_FILE} in its {DATA_REPOSITORY} "
            f"image), whose `{EVENT_LOG_ARGUMENT}` upload the review knows: "
            + "; ".join(not_the_data_job)
        )
        return
    upload = _argument(path, spec, EVENT_LOG_ARGUMENT)
    if upload is None:
        yield (
            f"`spark.eventLog.dir` {directory} is not an object store location and no "
            f"`{EVENT_LOG_ARGUMENT}` uploads it: the logs are not under the stack's key "
            "(and go with the pod)"
        )
        return
    where, uri = upload
    uri = known(uri, where)
    scheme = str(uri).split("://", 1)[0].lower() if "://" in str(uri) else "file"
    if scheme not in S3_SCHEMES:
        yield f"`{where}` {uri} is not an object store location: the logs go with the pod"
        return
    key = _argument(path, spec, KMS_KEY_ARGUMENT)
    if key is None:
        yield (
            f"event logs uploaded to {uri} name no key (`{KMS_KEY_ARGUMENT}`): not SSE-KMS "
            "under the stack's key"
        )
        return
    yield from _key_problems(stack, app, buckets.get(uri_bucket(str(uri))), [key])


def _key_problems(
    stack: StackView,
    app: ResourceView,
    target: ResourceView | None,
    keys: list[tuple[str, Any]],
) -> Iterator[str]:
    """Why the KMS keys at ``keys`` are not the stack's (nothing when they are)."""
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


@stack_rule("uae-spark-event-logs-encrypted")
def spark_event_logs_encrypted(stack: StackView, settings: Settings) -> StackFindings:
    buckets = stack_buckets(stack)
    deferred = Deferred()
    for app, name in _spark_jobs(stack):
        with deferred.each():
            for problem in _event_log_problems(stack, app, buckets):
                yield app.urn, f"Spark job {name}: {problem}"
    deferred.finish()
