"""The Spark rules: a compliant plan with two SparkApplications as the platform writes
them (`modules.k8s.spark.spec`: one on the stack's bucket through S3 in the region, one
on the site's object store inside the cluster) passes every rule; each job broken one
setting at a time, or with the setting left out, fails exactly its rule (the failing,
passing and missing twins); broken copies of the shipped plans' jobs are caught."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import pytest

from modules.k8s.spark import spec as ss
from modules.pools import NodePoolProfile
from stacks.offline_plan import build_plan
from tests.policies.builder import ECR, REGION, PlanBuilder, compliant_plan, find_step, key_arn
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.twins import breaking_caught, twin_tests

Plan = dict[str, Any]
APP = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
SCHEDULED = "kubernetes:sparkoperator.k8s.io/v1beta2:ScheduledSparkApplication"
LOCATION, EVENTS = "uae-spark-data-location", "uae-spark-event-logs-encrypted"
POOL = NodePoolProfile(
    name="preprocess", role="preprocess", instance_type="m7i.2xlarge", vcpus=8, memory_gib=32
)
JOB = ss.SparkJobSpec(name="prepare-corpus", team="a", source="corpus/2026-07", dataset="c-v1")
SITE_STORE = ss.ObjectStoreSpec(
    endpoint="https://rook-ceph-rgw-data.rook-ceph.svc",
    bucket="site-data",
    region="dc1",
    kms_key_id="site-data-key",
)
IMAGE = f"{ECR}/gpu-test/data:0.1.0"
AWS_JOB, SITE_JOB = "spark-aws", "spark-site"


def aws_application() -> dict[str, Any]:
    store = ss.aws_store("uae-data", REGION, key_arn("1"))
    return ss.spark_application(JOB, store, POOL, IMAGE, ss.locations(JOB, "uae-data"))


def site_application() -> dict[str, Any]:
    store = ss.onprem_store(SITE_STORE)
    manifest = ss.spark_application(JOB, store, POOL, IMAGE, ss.locations(JOB, "site-data"))
    manifest["metadata"]["name"] = "prepare-on-site"
    return manifest


def plan_with_jobs() -> Plan:
    plan = compliant_plan()
    steps = [s["newState"] for s in plan["steps"]]
    k8s = next(s["urn"] for s in steps if s["type"] == "pulumi:providers:kubernetes")
    key = find_step(plan, "aws:kms/key:Key", "storage-key")["urn"]
    builder = PlanBuilder()
    builder.add(APP, AWS_JOB, aws_application(), provider=f"{k8s}::id", deps={"spec": [key]})
    builder.add(APP, SITE_JOB, site_application(), provider=f"{k8s}::id")
    plan["steps"].extend(builder.steps)
    return plan


def spec(plan: Plan, job: str = AWS_JOB) -> dict[str, Any]:
    return find_step(plan, APP, job)["inputs"]["spec"]  # type: ignore[no-any-return]


def conf(plan: Plan, job: str = AWS_JOB) -> dict[str, Any]:
    return spec(plan, job)["sparkConf"]  # type: ignore[no-any-return]


def put_conf(key: str, value: Any, job: str = AWS_JOB) -> Callable[[Plan], None]:
    return lambda plan: conf(plan, job).update({key: value})


def drop_conf(*keys: str, job: str = AWS_JOB) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        for key in keys:
            del conf(plan, job)[key]

    return mutate


def containers(plan: Plan, job: str, roles: tuple[str, ...]) -> list[dict[str, Any]]:
    return [c for role in roles for c in spec(plan, job)[role]["template"]["spec"]["containers"]]


def set_env(
    name: str, value: str, job: str = AWS_JOB, roles: tuple[str, ...] = ("driver", "executor")
) -> Callable[[Plan], None]:
    """Set (or add) a variable in the pods' containers."""

    def mutate(plan: Plan) -> None:
        for container in containers(plan, job, roles):
            found = [item for item in container["env"] if item["name"] == name]
            for item in found:
                item["value"] = value
            if not found:
                container["env"].append({"name": name, "value": value})

    return mutate


def drop_env(
    *names: str, job: str = AWS_JOB, roles: tuple[str, ...] = ("driver", "executor")
) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        for container in containers(plan, job, roles):
            container["env"] = [item for item in container["env"] if item["name"] not in names]

    return mutate


def set_argument(flag: str | int, value: str, job: str = AWS_JOB) -> Callable[[Plan], None]:
    """Set the argument at an index, or after a flag."""

    def mutate(plan: Plan) -> None:
        arguments = spec(plan, job)["arguments"]
        index = flag if isinstance(flag, int) else arguments.index(flag) + 1
        arguments[index] = value

    return mutate


def drop_argument(flag: str, job: str = AWS_JOB) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        arguments = spec(plan, job)["arguments"]
        index = arguments.index(flag)
        del arguments[index : index + 2]

    return mutate


def add_argument(value: str) -> Callable[[Plan], None]:
    return lambda plan: spec(plan)["arguments"].append(value)


def set_spec(key: str, value: Any) -> Callable[[Plan], None]:
    return lambda plan: spec(plan).update({key: value})


def value_from(name: str, roles: tuple[str, ...] = ("driver",)) -> Callable[[Plan], None]:
    """The variable from a ConfigMap instead of a value the review can read."""

    def mutate(plan: Plan) -> None:
        for container in containers(plan, AWS_JOB, roles):
            for item in container["env"]:
                if item["name"] == name:
                    del item["value"]
                    item["valueFrom"] = {"configMapKeyRef": {"name": "s3-settings", "key": name}}

    return mutate


def env_from(role: str, in_template: bool) -> Callable[[Plan], None]:
    """A whole ConfigMap (on the operator's pod spec) or Secret (a template's container)
    in the role's environment."""

    def mutate(plan: Plan) -> None:
        pod = spec(plan)[role]
        if in_template:
            pod["template"]["spec"]["containers"][0]["envFrom"] = [
                {"secretRef": {"name": "s3-settings"}}
            ]
        else:
            pod["envFrom"] = [{"configMapRef": {"name": "s3-settings"}}]

    return mutate


def both(*mutations: Callable[[Plan], None]) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        for mutation in mutations:
            mutation(plan)

    return mutate


H = "spark.hadoop.fs.s3a."
OTHER_KEY = "arn:aws:kms:me-central-1:210987654321:key/11111111-2222-4333-8444-555555555555"
REGIONS = ("AWS_REGION", "AWS_DEFAULT_REGION")
ENDPOINT = ss.ENV_ENDPOINT
EVENT_LOG, KMS = "--event-log-uri", "--kms-key"
#: Event logs written by S3A instead of uploaded by the job (the rule takes both).
S3A_EVENT_LOGS = {
    "spark.eventLog.dir": "s3a://uae-data/spark-events/a/",
    H + "endpoint.region": REGION,
    H + "encryption.algorithm": "SSE-KMS",
    H + "encryption.key": key_arn("1"),
}


def s3a_event_logs(**changes: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        conf(plan).update(S3A_EVENT_LOGS)
        for key, value in changes.items():
            if value is None:
                del conf(plan)[key]
            else:
                conf(plan)[key] = value

    return mutate


CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    # -- where the data is --
    ("input-foreign-bucket", set_argument(0, "s3://someone-else/raw/"), LOCATION,
     "not one this stack creates"),
    ("output-gcs", set_argument("--out", "gs://abroad/datasets/c-v1/"), LOCATION, "gs://"),
    ("output-abfss", set_argument("--out", "abfss://c@acct.dfs.core.windows.net/x"), LOCATION,
     "abfss://"),
    ("argument-https", add_argument("https://example.com/corpus.jsonl"), LOCATION, "https://"),
    ("event-log-foreign-bucket", set_argument(EVENT_LOG, "s3://someone-else/logs/"),
     LOCATION, "someone-else"),
    ("region-abroad", set_env("AWS_REGION", "eu-west-1"), LOCATION,
     "eu-west-1, outside the allowed regions"),
    ("executor-region-abroad", set_env("AWS_REGION", "eu-central-1", roles=("executor",)),
     LOCATION, "eu-central-1"),
    ("region-missing", drop_env(*REGIONS, roles=("executor",)), LOCATION,
     "global endpoint (us-east-1)"),
    ("global-endpoint", set_env(ENDPOINT, "https://s3.amazonaws.com"), LOCATION,
     "global endpoint"),
    ("endpoint-abroad", set_env(ENDPOINT, "https://s3.eu-west-1.amazonaws.com"), LOCATION,
     "eu-west-1"),
    ("plain-http", set_env(ENDPOINT, "http://s3.me-central-1.amazonaws.com"), LOCATION,
     "clear text"),
    ("s3a-without-settings", add_argument("s3a://uae-data/teams/a/raw/more/"), LOCATION,
     "global endpoint (us-east-1)"),
    ("s3a-abroad", both(add_argument("s3a://uae-data/teams/a/raw/more/"),
                        lambda p: spec(p).update(
                            {"hadoopConf": {"fs.s3a.endpoint.region": "us-east-1"}})),
     LOCATION, "us-east-1"),
    ("settings-in-configmap", set_spec("sparkConfigMap", "extra-spark-settings"), LOCATION,
     "cannot see"),
    ("region-from-configmap", value_from("AWS_REGION"), LOCATION,
     "sets AWS_REGION from configMapKeyRef s3-settings, which the review cannot see"),
    ("endpoint-from-secret", lambda p: containers(p, AWS_JOB, ("executor",))[0]["env"].append(
        {"name": ENDPOINT, "valueFrom": {"secretKeyRef": {"name": "x", "key": "url"}}}),
     LOCATION, f"sets {ENDPOINT} from secretKeyRef x"),
    ("env-from-configmap", env_from("executor", in_template=False), LOCATION,
     "executor.envFrom` takes environment variables from configMapRef s3-settings"),
    ("env-from-secret-in-template", env_from("driver", in_template=True), LOCATION,
     "containers[0].envFrom` takes environment variables from secretRef s3-settings"),
    ("executor-env-region-abroad", put_conf("spark.executorEnv.AWS_REGION", "eu-west-1"),
     LOCATION, "eu-west-1, outside the allowed regions"),
    ("driver-env-endpoint-abroad",
     put_conf(f"spark.kubernetes.driverEnv.{ENDPOINT}", "https://s3.eu-west-1.amazonaws.com"),
     LOCATION, "reaches S3 in eu-west-1, outside the allowed regions"),
    ("site-store-not-allowed", set_env(ENDPOINT, "https://objects.example.com", job=SITE_JOB),
     LOCATION, "neither a Service"),
    ("site-store-http", set_env(ENDPOINT, "http://rook-ceph-rgw-data.rook-ceph.svc",
                                job=SITE_JOB), LOCATION, "not HTTPS"),
    # `<name>.svc` is no Service name (`<service>.<namespace>.svc`): the resolver goes on
    # to public DNS with it (`policies.rules.checks`).
    ("site-store-not-a-service", set_env(ENDPOINT, "https://rook-ceph-rgw.svc", job=SITE_JOB),
     LOCATION, "neither a Service"),
    # -- event logs --
    ("event-log-off", put_conf("spark.eventLog.enabled", "false"), EVENTS, "no record"),
    ("event-log-switch-missing", drop_conf("spark.eventLog.enabled"), EVENTS, "no record"),
    ("event-log-dir-missing", drop_conf("spark.eventLog.dir"), EVENTS, "pod's /tmp"),
    ("event-log-not-uploaded", drop_argument(EVENT_LOG), EVENTS,
     "not an object store location"),
    ("event-log-uploaded-to-disk", set_argument(EVENT_LOG, "file:///tmp/kept"), EVENTS,
     "not an object store location"),
    ("event-log-upload-claimed-by-another-program",
     set_spec("mainApplicationFile", "local:///app/other.py"), EVENTS,
     "not the platform's data job (local:///app/workloads/data/prepare.py in its data image)"),
    ("event-log-upload-claimed-by-another-image",
     lambda p: spec(p)["driver"]["template"]["spec"]["containers"][0].update(
         {"image": f"{ECR}/gpu-test/tools:0.1.0"}),
     EVENTS, f"containers[0].image` is {ECR}/gpu-test/tools:0.1.0"),
    ("key-missing", drop_argument(KMS), EVENTS, "name no key"),
    ("key-empty", set_argument(KMS, ""), EVENTS, "is empty"),
    ("aws-managed-key", set_argument(KMS, "alias/aws/s3"), EVENTS, "AWS-managed"),
    ("key-of-another-account", set_argument(KMS, OTHER_KEY), EVENTS,
     "which this stack does not create"),
    ("site-event-log-keyless", drop_argument(KMS, job=SITE_JOB), EVENTS, "name no key"),
    ("site-event-log-kept-on-pod", drop_argument(EVENT_LOG, job=SITE_JOB), EVENTS,
     "not an object store location"),
    # -- event logs written by S3A --
    ("s3a-sse-s3", s3a_event_logs(**{H + "encryption.algorithm": "SSE-S3"}), EVENTS,
     "not SSE-KMS"),
    ("s3a-algorithm-missing", s3a_event_logs(**{H + "encryption.algorithm": None}), EVENTS,
     "no S3A encryption"),
    ("s3a-key-missing", s3a_event_logs(**{H + "encryption.key": None}), EVENTS, "name no key"),
    ("s3a-aws-managed-key", s3a_event_logs(**{H + "encryption.key": "alias/aws/s3"}), EVENTS,
     "AWS-managed"),
]  # fmt: skip


test_the_plan_with_both_jobs_passes_every_rule, test_the_broken_job_fails_exactly_the_rule = (
    twin_tests(plan_with_jobs, CASES)
)


@pytest.mark.parametrize(
    "mutate",
    [
        # Event logs written by S3A, with its current or older names, or DSSE-KMS.
        s3a_event_logs(),
        s3a_event_logs(**{H + "encryption.algorithm": None, H + "encryption.key": None,
                          H + "server-side-encryption-algorithm": "SSE-KMS",
                          H + "server-side-encryption.key": key_arn("1")}),
        s3a_event_logs(**{H + "encryption.algorithm": "DSSE-KMS"}),
        # The key by the stack's alias.
        set_argument(KMS, "alias/storage"),
        # The region in the SDK's other variable, or in envVars instead of the template.
        drop_env("AWS_REGION"),
        both(drop_env(*REGIONS, roles=("executor",)),
             lambda p: spec(p)["executor"].update({"envVars": {"AWS_REGION": REGION}})),
        # The region's own endpoint, and its PrivateLink endpoint (refused before as
        # "global": the region is not the host's last label but one).
        set_env(ENDPOINT, f"https://s3.{REGION}.amazonaws.com"),
        set_env(ENDPOINT, f"https://bucket.vpce-0a1b2c3d.s3.{REGION}.vpce.amazonaws.com"),
        # The executors' region only from sparkConf; a template's region abroad that
        # sparkConf overrides (Spark adds spark.kubernetes.driverEnv.* last: it wins).
        both(drop_env(*REGIONS, roles=("executor",)),
             put_conf("spark.executorEnv.AWS_REGION", REGION)),
        both(set_env("AWS_REGION", "eu-west-1", roles=("driver",)),
             set_env("AWS_DEFAULT_REGION", "eu-west-1", roles=("driver",)),
             put_conf("spark.kubernetes.driverEnv.AWS_REGION", REGION),
             put_conf("spark.kubernetes.driverEnv.AWS_DEFAULT_REGION", REGION)),
        # Files in the image and on the pod's disk are no store.
        set_spec("deps", {"pyFiles": ["local:///app/extra.zip"], "files": ["file:///etc/x"]}),
    ],
    ids=["s3a-event-logs", "s3a-legacy-names", "s3a-dsse-kms", "key-alias",
         "default-region-variable", "env-vars", "regional-endpoint", "privatelink-endpoint",
         "executor-env-region",
         "driver-env-overrides", "local-files"],
)  # fmt: skip
def test_equivalent_settings_pass(mutate: Callable[[Plan], None]) -> None:
    plan = plan_with_jobs()
    mutate(plan)
    assert failing_rules(plan) == set()


def test_an_allowed_site_store_outside_the_cluster_passes() -> None:
    plan = plan_with_jobs()
    set_env(ENDPOINT, "https://objects.dc1.example.ae", job=SITE_JOB)(plan)
    assert failing_rules(plan) == {LOCATION}
    config = {LOCATION: {"allowedObjectStores": ["Objects.dc1.example.ae"]}}
    assert failing_rules(plan, config) == set()


def test_a_scheduled_application_is_judged_by_its_template() -> None:
    plan = plan_with_jobs()
    k8s = find_step(plan, APP, AWS_JOB)["provider"]
    key = find_step(plan, "aws:kms/key:Key", "storage-key")["urn"]
    application = aws_application()
    scheduled = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "ScheduledSparkApplication",
        "metadata": {"name": "nightly", "namespace": "spark-nlp"},
        "spec": {"schedule": "@daily", "concurrencyPolicy": "Forbid",
                 "template": application["spec"]},
    }  # fmt: skip
    builder = PlanBuilder()
    builder.add(SCHEDULED, "nightly", scheduled, provider=k8s, deps={"spec": [key]})
    plan["steps"].extend(builder.steps)
    assert failing_rules(plan) == set()
    template = find_step(plan, SCHEDULED, "nightly")["inputs"]["spec"]["template"]
    template["arguments"].append("gs://abroad/corpus/")
    template["sparkConf"]["spark.eventLog.enabled"] = "false"
    assert failing_rules(plan) == {LOCATION, EVENTS}
    assert any("nightly" in m and "gs://" in m for m in messages(plan, LOCATION))


def test_other_kinds_are_not_spark_jobs() -> None:
    plan = plan_with_jobs()
    state = find_step(plan, APP, AWS_JOB)
    state["type"] = "kubernetes:example.com/v1:SomethingElse"
    spec_ = state["inputs"]["spec"]
    spec_["sparkConf"]["spark.eventLog.enabled"] = "false"
    assert {LOCATION, EVENTS}.isdisjoint(failing_rules(plan))


# -- broken twins of the shipped plans ----------------------------------------------------


@functools.cache
def _shipped(stack: str) -> Plan:
    return build_plan(stack)


def _shipped_app(plan: Plan) -> dict[str, Any]:
    (state,) = [s["newState"] for s in plan["steps"] if s["newState"]["type"] == APP]
    return state["inputs"]["spec"]  # type: ignore[no-any-return]


def _input_abroad(plan: Plan) -> None:
    _shipped_app(plan)["arguments"][0] = "s3://a-bucket-in-frankfurt/raw/"


def _output_abroad(plan: Plan) -> None:
    for container in _shipped_app(plan)["driver"]["template"]["spec"]["containers"]:
        for item in container["env"]:
            if item["name"] == "AWS_REGION":
                item["value"] = "eu-central-1"


def _logs_unencrypted(plan: Plan) -> None:
    arguments = _shipped_app(plan)["arguments"]
    index = arguments.index(KMS)
    del arguments[index : index + 2]


def _logs_off(plan: Plan) -> None:
    _shipped_app(plan)["sparkConf"]["spark.eventLog.enabled"] = "false"


@pytest.mark.parametrize(
    ("stack", "mutate", "rule_id"),
    [
        ("smb-cpu", _input_abroad, LOCATION),
        ("uae-prod", _output_abroad, LOCATION),
        ("smb-cpu", _logs_unencrypted, EVENTS),
        ("uae-prod", _logs_off, EVENTS),
    ],
    ids=["input-abroad", "region-abroad", "logs-unencrypted", "logs-off"],
)
def test_a_broken_twin_of_a_shipped_job_is_caught(
    stack: str, mutate: Callable[[Plan], None], rule_id: str
) -> None:
    breaking_caught(_shipped(stack), mutate, rule_id)


def test_an_onprem_stack_with_a_job_on_the_site_store_passes() -> None:
    """The job as an onprem stack writes it (tests/k8s/test_spark.py's site: an object
    store inside the cluster) passes both rules with the pack's defaults."""
    from tests.k8s.test_spark import onprem_config  # noqa: PLC0415

    plan = build_plan("onprem-ib", onprem_config())
    assert [s for s in plan["steps"] if s["newState"]["type"] == APP]
    result = review(plan)
    assert [(f.rule_id, f.message) for f in result.mandatory_violations] == []
    plan_abroad = copy.deepcopy(plan)
    (state,) = [s["newState"] for s in plan_abroad["steps"] if s["newState"]["type"] == APP]
    for item in state["inputs"]["spec"]["executor"]["template"]["spec"]["containers"][0]["env"]:
        if item["name"] == ss.ENV_ENDPOINT:
            item["value"] = "https://s3.eu-west-1.amazonaws.com"
    assert LOCATION in failing_rules(plan_abroad)
