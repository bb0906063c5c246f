"""Spark on the cluster as the shipped stacks build it: the pinned Spark Operator chart
and its values (every key exists in the vendored upstream values.yaml), the
SparkApplications valid against the vendored upstream CRD (v2.5.2) with pod templates
valid for Kubernetes, the data job they run (the data image, ``prepare.py`` with the
CLI's own arguments and ``s3://`` locations), a driver and executors on the CPU pool,
the restricted pods, the drivers' Role, the region and the SSE-KMS key, the network
fence; an on-premises stack's job on the site's object store; and the config problems a
stack file gets for the section."""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.spark import spec as ss
from modules.validation import InvalidArgsError
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import build_plan, load_stack_file
from stacks.offline_runtime import Registration
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.shipped import under_component
from tests.k8s.vendored_crds import vendored_crd_errors
from tests.support.k8s_schema import is_builtin, schema_errors

VENDOR = Path(__file__).resolve().parent / "vendor" / "spark-operator"
COMPONENT = "gpuplatform:k8s:SparkPlatform"
APP = "kubernetes:sparkoperator.k8s.io/v1beta2:SparkApplication"
HELM = "kubernetes:helm.sh/v3:Release"
#: The shipped stacks that enable Spark, with each job's team, pool and dataset.
SPARK_STACKS = {
    "smb-cpu": {"prepare-support-tickets": ("analytics", "preprocess", "support-tickets-v1")},
    "uae-prod": {"prepare-arabic-web": ("nlp", "preprocess", "arabic-web-v1")},
}
#: Each shipped job's source and executors.
SOURCES = {"prepare-support-tickets": ("support-tickets/2026-07", 2),
           "prepare-arabic-web": ("arabic-web/2026-07", 4)}  # fmt: skip
ONPREM_STORE = {
    "endpoint": "https://rook-ceph-rgw-data.rook-ceph.svc",
    "bucket": "platform-data",
    "region": "dc1",
    "kmsKeyId": "platform-data-key",
}


def under_spark(registrations: Mapping[str, Registration]) -> list[Registration]:
    """Custom resources whose parent chain leads to the SparkPlatform component."""
    return under_component(registrations, COMPONENT)


def objects(stack: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [r.inputs for r in under_spark(registrations) if r.type != HELM]


def applications(stack: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects(stack) if o["kind"] == "SparkApplication"}


def release(stack: str) -> dict[str, Any]:
    registrations, _ = shipped_plan(stack)
    (found,) = [r.inputs for r in under_spark(registrations) if r.type == HELM]
    return found


def teams(stack: str) -> list[str]:
    """The teams with a job in a shipped stack, in order of first appearance."""
    return list(dict.fromkeys(team for team, _, _ in SPARK_STACKS[stack].values()))


def driver(application: Mapping[str, Any]) -> dict[str, Any]:
    (container,) = application["spec"]["driver"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def env(container: Mapping[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def unknown_keys(values: Any, defaults: Any, path: str = "") -> list[str]:
    """Key paths of ``values`` the chart's values.yaml does not have."""
    if not isinstance(values, Mapping) or not isinstance(defaults, Mapping):
        return []
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            found.append(where)
        elif defaults[key]:  # an empty default ({}) takes any map
            found += unknown_keys(value, defaults[key], where)
    return found


def chart_defaults() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((VENDOR / "values.yaml").read_text(encoding="utf-8"))
    return loaded


def storage_key_arn(stack: str) -> str:
    """The storage key's ARN as the plan's consumers of it see it (the bucket's SSE)."""
    registrations, _ = shipped_plan(stack)
    (sse,) = [
        r.inputs
        for r in registrations.values()
        if r.type.endswith(":BucketServerSideEncryptionConfiguration") and r.name == "data"
    ]
    return str(sse["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"])


def data_bucket(stack: str) -> str:
    registrations, _ = shipped_plan(stack)
    (bucket,) = [
        r.inputs["bucket"]
        for r in registrations.values()
        if r.type == "aws:s3/bucket:Bucket" and r.name == "data"
    ]
    return str(bucket)


# -- the chart ------------------------------------------------------------------------


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_the_operator_chart_is_pinned_with_known_values(stack: str) -> None:
    found = release(stack)
    assert (found["chart"], found["version"]) == ("spark-operator", "2.5.2")
    assert found["repositoryOpts"] == {"repo": "https://kubeflow.github.io/spark-operator"}
    assert found["namespace"] == ss.OPERATOR_NAMESPACE
    values = found["values"]
    assert unknown_keys(values, chart_defaults()) == []
    assert values["spark"] == {
        "jobNamespaces": [ss.jobs_namespace(t) for t in teams(stack)],
        "serviceAccount": {"create": False},
        "rbac": {"create": False},
    }
    # From the stack's own ECR (a mirror of ghcr.io's), pulled at each start.
    assert values["image"] == {
        "registry": f"123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}",
        "repository": "kubeflow/spark-operator/controller",
        "tag": "2.5.2",
        "pullPolicy": "Always",
    }
    for part in ("controller", "webhook"):
        assert values[part]["nodeSelector"] == {"gpuplatform.ae/role": "system"}
        assert values[part]["resources"]["limits"]
    assert values["controller"]["uiService"] == {"enable": False}
    # The webhook's NetworkPolicy opens the chart's default port (not set here).
    assert "port" not in values["webhook"] and chart_defaults()["webhook"]["port"] == 9443
    assert ss.WEBHOOK_PORT == 9443


def test_the_value_check_notices_a_misspelt_key() -> None:
    job = ss.SparkJobSpec(name="j", team="nlp", source="s", dataset="d")
    values = copy.deepcopy(ss.operator_values(ss.SparkSpec(enabled=True, jobs=(job,)), {}))
    values["spark"]["jobNamespace"] = ["spark-nlp"]
    values["controller"]["uiServices"] = {"enable": False}
    assert unknown_keys(values, chart_defaults()) == ["controller.uiServices", "spark.jobNamespace"]


def test_a_mirror_registry_replaces_the_operator_image_registry() -> None:
    job = ss.SparkJobSpec(name="j", team="nlp", source="s", dataset="d")
    spec = ss.SparkSpec(
        enabled=True, operator_registry="registry.dc1.example.ae/mirror", jobs=(job,)
    )
    image = ss.operator_values(spec, {})["image"]
    assert image["registry"] == "registry.dc1.example.ae/mirror"
    assert image["repository"] == "kubeflow/spark-operator/controller"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_spark_is_installed_only_where_the_stack_enables_it(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    components = [r for r in registrations.values() if r.type == COMPONENT]
    apps = [r for r in registrations.values() if r.type == APP]
    if stack in SPARK_STACKS:
        assert len(components) == 1
        assert {a.inputs["metadata"]["name"] for a in apps} == set(SPARK_STACKS[stack])
    else:
        assert components == [] and apps == []


# -- the objects against the upstream schemas ----------------------------------------------


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_the_objects_pass_the_vendored_crd_and_the_kubernetes_schema(stack: str) -> None:
    found = objects(stack)
    kinds = sorted({o["kind"] for o in found})
    assert kinds == [
        "Namespace", "NetworkPolicy", "Role", "RoleBinding", "ServiceAccount", "SparkApplication",
    ]  # fmt: skip
    _, plan = shipped_plan(stack)
    version = str(plan["config"]["uae-gpu-platform:kubernetesVersion"])
    assert schema_errors([o for o in found if is_builtin(o)], version) == []
    assert crd_errors([o for o in found if not is_builtin(o)]) == []
    for application in applications(stack).values():
        assert vendored_crd_errors(application) == []


def test_a_broken_application_is_refused() -> None:
    """The checks above can fail: the CRD refuses unknown and mistyped fields, and the
    pod templates (which the CRD leaves open) are held to the PodTemplateSpec schema."""
    (application,) = applications("smb-cpu").values()
    misspelt = copy.deepcopy(application)
    misspelt["spec"]["driver"]["coreLimits"] = "6"
    assert any("coreLimits" in e for e in vendored_crd_errors(misspelt))
    mistyped = copy.deepcopy(application)
    mistyped["spec"]["driver"]["cores"] = "six"
    assert vendored_crd_errors(mistyped)
    wrong_mode = copy.deepcopy(application)
    wrong_mode["spec"]["mode"] = "local"
    assert any("mode" in e for e in vendored_crd_errors(wrong_mode))
    template = copy.deepcopy(application)
    driver(template)["commands"] = ["python"]
    assert vendored_crd_errors(template) == []  # the CRD does not look inside
    assert any("commands" in e for e in crd_errors([template]))
    renamed = copy.deepcopy(application)
    driver(renamed)["name"] = "driver"
    assert any("spark-kubernetes-driver" in e for e in crd_errors([renamed]))


# -- what runs -----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_each_job_runs_the_data_job_in_the_data_image(stack: str) -> None:
    account = data_bucket(stack).rsplit("-", 1)[-1]
    bucket = data_bucket(stack)
    for name, (team, _, dataset) in SPARK_STACKS[stack].items():
        source, executors = SOURCES[name]
        spec = applications(stack)[name]["spec"]
        assert (spec["type"], spec["mode"], spec["sparkVersion"]) == ("Python", "cluster", "4.3.0")
        # prepare.py itself, from the image (no module beside it shadows the stdlib's).
        assert spec["mainApplicationFile"] == "local:///app/workloads/data/prepare.py"
        # The stack's own ECR repository <name>/data (tests/aws/test_spark_access.py).
        assert (
            spec["image"] == f"{account}.dkr.ecr.me-central-1.amazonaws.com/gpu-{stack}/data:0.1.0"
        )
        assert spec["arguments"][:11] == [
            f"s3://{bucket}/teams/{team}/raw/{source}/",
            "--out", f"s3://{bucket}/teams/{team}/datasets/{dataset}/",
            "--name", dataset,
            "--kms-key", storage_key_arn(stack),
            "--event-log-uri", f"s3://{bucket}/spark-events/{team}/",
            "--scratch", ss.WORK_DIR,
        ]  # fmt: skip
        assert spec["driver"]["serviceAccount"] == spec["executor"]["serviceAccount"]
        assert spec["driver"]["serviceAccount"] == f"spark-{team}"
        assert spec["executor"]["instances"] == executors
        # Shipped suspended: the first `pulumi up` makes the bucket, so no raw file is
        # there yet; the user sets suspend: false once they are (docs/data.md).
        assert spec["suspend"] is True
        assert spec["restartPolicy"] == {"type": "Never"}
        assert "local" not in json.dumps(spec["sparkConf"]).replace("file://", "")


def test_the_job_arguments_follow_the_settings() -> None:
    job = ss.SparkJobSpec(
        name="j", team="a", source="s", dataset="d", anonymise=False, near_dup=0.8
    )
    where = ss.locations(job, "b")
    assert ss.job_arguments(job, where, "k") == [
        "s3://b/teams/a/raw/s/", "--out", "s3://b/teams/a/datasets/d/", "--name", "d",
        "--kms-key", "k", "--event-log-uri", "s3://b/spark-events/a/", "--scratch", "/work",
        "--no-anonymise", "--near-dup", "0.8",
    ]  # fmt: skip


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_the_driver_and_executor_pods_are_on_the_cpu_pool_and_restricted(stack: str) -> None:
    for name, (team, pool, _) in SPARK_STACKS[stack].items():
        spec = applications(stack)[name]["spec"]
        for role in ("driver", "executor"):
            pod = spec[role]["template"]["spec"]
            assert pod["nodeSelector"] == {"gpuplatform.ae/pool": pool}
            assert pod["tolerations"] == []  # CPU pools carry no taint
            assert pod["serviceAccountName"] == f"spark-{team}"
            # Only the driver calls the API server (it creates the executors).
            assert pod["automountServiceAccountToken"] is (role == "driver")
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            (container,) = pod["containers"]
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert security["runAsUser"] == ss.RUN_AS != 0
            assert container["image"] == spec["image"]
            assert container["command"] == ["/bin/bash", "-c", ss.POD_SCRIPT, "spark-pod"]
            resources = container["resources"]["limits"]
            assert container["resources"]["requests"] == resources
            memory_gib = int(spec[role]["memory"].rstrip("g"))
            overhead_gib = int(spec[role]["memoryOverhead"].rstrip("g"))
            # What Spark will set from cores, memory and memoryOverhead, written the same.
            assert resources["cpu"] == spec[role]["coreLimit"] == str(spec[role]["cores"])
            assert resources["memory"] == f"{(memory_gib + overhead_gib) * 1024}Mi"
        mounts = {m["mountPath"] for m in driver(applications(stack)[name])["volumeMounts"]}
        assert mounts == {ss.WORK_DIR, "/tmp", ss.EVENT_LOG_DIR}


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_the_pods_name_the_region_and_logs_are_uploaded_under_the_stack_key(stack: str) -> None:
    for name in SPARK_STACKS[stack]:
        application = applications(stack)[name]
        spec = application["spec"]
        for role in ("driver", "executor"):
            (container,) = spec[role]["template"]["spec"]["containers"]
            variables = env(container)
            assert variables["AWS_REGION"] == variables["AWS_DEFAULT_REGION"] == "me-central-1"
            # Pod Identity brings the credentials; the region's endpoint is boto3's own.
            assert not {"AWS_ACCESS_KEY_ID", ss.ENV_ENDPOINT} & set(variables)
        conf = spec["sparkConf"]
        # Spark SQL's warehouse folder on a writable volume: the root file system is not.
        assert conf["spark.sql.warehouse.dir"] == "file:///tmp/spark-warehouse"
        assert conf["spark.eventLog.enabled"] == "true"
        assert conf["spark.eventLog.dir"] == f"file://{ss.EVENT_LOG_DIR}"
        arguments = spec["arguments"]
        assert arguments[arguments.index("--kms-key") + 1] == storage_key_arn(stack)
        # No Hadoop S3A: nothing of it is configured.
        assert not [key for key in conf if key.startswith("spark.hadoop.")]
        assert (conf["spark.driver.port"], conf["spark.blockManager.port"]) == ("7078", "7079")


@pytest.mark.parametrize("stack", SPARK_STACKS)
def test_the_jobs_namespace_is_fenced(stack: str) -> None:
    found = objects(stack)
    namespaces = {o["metadata"]["name"]: o for o in found if o["kind"] == "Namespace"}
    (team,) = teams(stack)
    jobs_ns = ss.jobs_namespace(team)
    assert set(namespaces) == {jobs_ns, ss.OPERATOR_NAMESPACE}
    for name in (jobs_ns, ss.OPERATOR_NAMESPACE):
        labels = namespaces[name]["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    policies = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]
        for o in found
        if o["kind"] == "NetworkPolicy"
    }
    jobs = {name: spec for (ns, name), spec in policies.items() if ns == jobs_ns}
    within = {f"allow-within-{name}" for name in SPARK_STACKS[stack]}
    assert set(jobs) == {
        "default-deny-all", "allow-dns", "allow-object-store", "allow-drivers-api-server", *within,
    }  # fmt: skip
    assert jobs["default-deny-all"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    allowed = jobs["allow-object-store"]
    assert allowed["policyTypes"] == ["Egress"]
    destinations = [(t.get("ipBlock", {}).get("cidr"), tuple(p["port"] for p in rule["ports"]))
                    for rule in allowed["egress"] for t in rule["to"]]  # fmt: skip
    vpc = shipped_plan(stack)[1]["config"].get("uae-gpu-platform:network")
    vpc_cidr = json.loads(vpc)["vpcCidr"] if vpc else "10.42.0.0/16"
    assert destinations == [(ss.POD_IDENTITY_AGENT_CIDR, (80,)), (vpc_cidr, (443,))]
    # The drivers (Spark's own role label) reach the API server; nothing else does.
    api = jobs["allow-drivers-api-server"]
    assert api["podSelector"] == {"matchLabels": {"spark-role": "driver"}}
    assert api["policyTypes"] == ["Egress"]
    # A job's pods reach each other on the driver and block manager ports, and only
    # its own pods reach it.
    for name in SPARK_STACKS[stack]:
        fence = jobs[f"allow-within-{name}"]
        own = {"matchLabels": {ss.APP_LABEL: name}}
        assert fence["podSelector"] == own
        ports = [{"protocol": "TCP", "port": 7078}, {"protocol": "TCP", "port": 7079}]
        assert fence["ingress"] == [{"from": [{"podSelector": own}], "ports": ports}]
        assert fence["egress"] == [{"to": [{"podSelector": own}], "ports": ports}]
    # The operator: its controller reaches the API server, the API server its webhook.
    operator = {n: spec for (ns, n), spec in policies.items() if ns == ss.OPERATOR_NAMESPACE}
    assert set(operator) == {"default-deny-all", "allow-dns", "allow-api-server", "allow-webhooks"}
    webhook = operator["allow-webhooks"]
    assert webhook["podSelector"] == {"matchLabels": ss.WEBHOOK_LABELS}
    assert webhook["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9443}]
    assert webhook["ingress"][0]["from"] == [{"ipBlock": {"cidr": vpc_cidr}}]
    accounts = {o["metadata"]["name"]: o for o in found if o["kind"] == "ServiceAccount"}
    assert set(accounts) == {f"spark-{team}"}
    assert {a["metadata"]["namespace"] for a in accounts.values()} == {jobs_ns}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    # The drivers' rights: their executor pods and those pods' ConfigMap, in the team's
    # namespace (tests/k8s/test_spark_tenancy.py: no team's reach another's).
    (role,) = [o for o in found if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == jobs_ns
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods", "configmaps"],
         "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"]},
    ]  # fmt: skip
    bindings = [o for o in found if o["kind"] == "RoleBinding"]
    assert sorted(s["name"] for b in bindings for s in b["subjects"]) == sorted(accounts)
    assert {b["roleRef"]["name"] for b in bindings} == {role["metadata"]["name"]}


# -- on premises: the site's object store ---------------------------------------------------


def onprem_config(**spark: Any) -> dict[str, str]:
    """onprem-ib's stack file with a preprocess pool and the Spark section."""
    config, _ = load_stack_file("onprem-ib")
    config = dict(config)
    pools = json.loads(config["uae-gpu-platform:onpremNodePools"])
    pools.append(
        {"name": "cpu", "role": "preprocess", "instanceType": None, "vcpus": 32,
         "memoryGib": 256, "minSize": 3, "maxSize": 3}
    )  # fmt: skip
    config["uae-gpu-platform:onpremNodePools"] = json.dumps(pools)
    onprem = json.loads(config["uae-gpu-platform:onprem"])
    config["uae-gpu-platform:onprem"] = json.dumps({**onprem, "egressCidrs": ["10.20.30.0/24"]})
    section = {
        "enabled": True,
        "registry": "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-onprem",
        "objectStore": ONPREM_STORE,
        "jobs": [{"name": "prepare-contracts", "team": "nlp", "source": "contracts",
                  "dataset": "contracts-v1", "cores": 16, "memoryGib": 16,
                  "pythonMemoryGib": 32}],
        **spark,
    }  # fmt: skip
    config["uae-gpu-platform:spark"] = json.dumps(section)
    return config


def test_an_onprem_job_uses_the_site_store_with_the_teams_secret() -> None:
    plan = build_plan("onprem-ib", onprem_config())
    states = [s["newState"] for s in plan["steps"]]
    (application,) = [s["inputs"] for s in states if s["type"] == APP]
    assert crd_errors([application]) == []
    arguments = application["spec"]["arguments"]
    assert arguments[0] == "s3://platform-data/teams/nlp/raw/contracts/"
    assert arguments[arguments.index("--kms-key") + 1] == "platform-data-key"
    assert arguments[arguments.index("--event-log-uri") + 1] == (
        "s3://platform-data/spark-events/nlp/"
    )
    for role in ("driver", "executor"):
        (container,) = application["spec"][role]["template"]["spec"]["containers"]
        variables = env(container)
        assert variables[ss.ENV_ENDPOINT] == ONPREM_STORE["endpoint"]
        assert variables["AWS_REGION"] == "dc1"
        assert variables["AWS_SECRET_ACCESS_KEY"] == {
            "secretKeyRef": {"name": "spark-object-store-nlp", "key": "AWS_SECRET_ACCESS_KEY"}
        }
    assert application["spec"]["image"] == (
        "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-onprem/data:0.1.0"
    )
    (executor,) = application["spec"]["executor"]["template"]["spec"]["containers"]
    assert executor["resources"]["limits"]["cpu"] == "16"
    (policy,) = [
        s["inputs"]["spec"]
        for s in states
        if s["type"].endswith(":NetworkPolicy")
        and s["inputs"]["metadata"]["name"] == "allow-object-store"
        and s["inputs"]["metadata"]["namespace"] == "spark-nlp"
    ]
    rules = policy["egress"]
    assert rules[0] == {
        "to": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "rook-ceph"}}}
        ],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert rules[1]["to"] == [{"ipBlock": {"cidr": "10.20.30.0/24"}}]
    assert not [s for s in states if s["type"].startswith("aws:")]


@pytest.mark.parametrize(
    ("changes", "keys"),
    [
        ({"objectStore": None}, ["spark.objectStore"]),
        ({"registry": None}, ["spark.registry"]),
        ({"jobs": [{"name": "j", "team": "nobody", "source": "s", "dataset": "d"}]},
         ["spark.jobs[0].team"]),
        ({"jobs": [{"name": "j", "team": "nlp", "source": "s", "dataset": "d", "pool": "h100-ib"}]},
         ["spark.jobs[0].pool"]),
        ({"jobs": [{"name": "j", "team": "nlp", "source": "s", "dataset": "d", "cores": 40,
                    "memoryGib": 200, "pythonMemoryGib": 100}]},
         ["spark.jobs[0].cores", "spark.jobs[0].memoryGib"]),
        ({"jobs": [{"name": "j", "team": "nlp", "source": "s", "dataset": "d", "driverCores": 40,
                    "driverMemoryGib": 200, "driverPythonMemoryGib": 100}]},
         ["spark.jobs[0].driverCores", "spark.jobs[0].driverMemoryGib"]),
        ({"jobs": [{"name": "j", "team": "nlp", "source": "s", "dataset": "d"},
                   {"name": "j", "team": "nlp", "source": "t", "dataset": "d"}]},
         ["spark.jobs[0].name", "spark.jobs[1].name", "spark.jobs[0].dataset",
          "spark.jobs[1].dataset"]),
        ({"jobs": [{"name": "j", "team": "nlp", "source": "../other-team", "dataset": "d"}]},
         ["spark.jobs[0].source"]),
        ({"objectStore": {**ONPREM_STORE, "endpoint": "http://rgw.rook-ceph.svc"}},
         ["spark.objectStore.endpoint"]),
        ({"imageTag": "latest"}, ["spark.imageTag"]),
        ({"jobs": []}, ["spark.jobs"]),
    ],
    ids=["no-store", "no-registry", "unknown-team", "gpu-pool", "too-big", "driver-too-big",
         "twice",
         "escaping-source", "plain-http-store", "latest", "no-job"],
)  # fmt: skip
def test_a_bad_spark_section_is_refused_naming_each_key(
    changes: dict[str, Any], keys: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(onprem_config(**changes))
    named = [p.split(": got", 1)[0].removeprefix("uae-gpu-platform:") for p in err.value.problems]
    assert sorted(named) == sorted(keys), err.value.problems


def test_an_aws_stack_names_no_site_store() -> None:
    config, _ = load_stack_file("smb-cpu")
    section = json.loads(config["uae-gpu-platform:spark"])
    config = {
        **config,
        "uae-gpu-platform:spark": json.dumps({**section, "objectStore": ONPREM_STORE}),
    }
    with pytest.raises(
        ConfigError, match=r"spark.objectStore: got '\(given\)'; leave unset on AWS"
    ):
        parse_stack_config(config)


def test_a_job_larger_than_a_node_of_an_aws_pool_is_refused_with_the_catalog() -> None:
    from modules.aws.instance_types import InstanceTypeInfo  # noqa: PLC0415
    from stacks.catalog import catalog_problems  # noqa: PLC0415

    config, _ = load_stack_file("smb-cpu")
    section = json.loads(config["uae-gpu-platform:spark"])
    section["jobs"][0]["cores"] = 8  # an m7i.2xlarge has 8 vCPUs, 7 of them allocatable
    parsed = parse_stack_config({**config, "uae-gpu-platform:spark": json.dumps(section)})
    zones = ("me-central-1a", "me-central-1b", "me-central-1c")
    shapes = {"m7i.xlarge": (4, 16), "c7i.8xlarge": (32, 64), "m7i.2xlarge": (8, 32)}
    catalog = {
        name: InstanceTypeInfo(
            name=name, vcpus=cpus, memory_mib=mem * 1024, gpu_count=0, gpu_name=None,
            gpu_memory_mib=0, efa_supported=False, efa_max_interfaces=0, network_cards=1,
            architectures=("x86_64",), offered_zones=zones,
        )
        for name, (cpus, mem) in shapes.items()
    }  # fmt: skip
    problems = catalog_problems(parsed, zones, catalog)
    assert problems == [
        "uae-gpu-platform:spark.jobs[0].cores: got 8; at most 7, what one node of pool "
        "preprocess offers"
    ]


def test_the_job_spec_names_every_bad_field() -> None:
    with pytest.raises(InvalidArgsError) as err:
        ss.SparkJobSpec(
            name="Bad_Name", team="a", source="/abs", dataset="..", cores=0, near_dup=1.5
        )
    assert {p.field for p in err.value.problems} == {
        "name", "source", "dataset", "cores", "near_dup",
    }  # fmt: skip


def test_the_data_image_has_what_the_pods_run() -> None:
    """The pods run as the data image's user; the pod script calls bash, spark-submit
    (PySpark's, on the image's PATH), Java and PySpark's jars (SPARK_HOME); the main
    file is the package's, on the image's PYTHONPATH."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "workloads" / "data" / "Dockerfile").read_text(encoding="utf-8")
    (user,) = re.findall(r"^USER (\d+):(\d+)$", text, re.MULTILINE)
    assert user == (str(ss.RUN_AS), str(ss.RUN_AS))
    assert "python:3.11-slim-bookworm" in text  # Debian: bash
    assert re.search(r"^ENV PATH=/opt/venv/bin:", text, re.MULTILINE)  # spark-submit
    assert "openjdk-17-jre-headless" in text and "ENV JAVA_HOME=" in text
    assert "SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark" in text
    assert re.search(r"^ENV PYTHONPATH=/app\b", text, re.MULTILINE)
    assert "COPY workloads/data/ /app/workloads/data/" in text
    main = ss.MAIN_FILE.removeprefix("local:///app/")
    assert (root / main).is_file()
    # Nothing beside the main file shadows a standard-library module (Spark runs it as a
    # file: its directory comes first on sys.path).
    beside = {p.stem for p in (root / main).parent.glob("*.py")}
    assert not beside & set(sys.stdlib_module_names)
