"""The Kubeflow Pipelines rules: a compliant plan holding KFP's objects as
`modules.k8s.pipelines` builds them (the stack's bucket, the RDS instance in the region,
the drift route) passes every rule; each object broken one property at a time, or with
the property left out, fails exactly its rule (the failing, passing and missing twins);
the shipped plans pass them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.k8s.common import resource_name
from modules.k8s.objects import type_token
from modules.k8s.pipelines import loop
from modules.k8s.pipelines import manifests as kfp
from modules.k8s.pipelines import spec as ps
from tests.conftest import shipped_plan
from tests.policies.builder import ECR, PlanBuilder, compliant_plan, secure_pod
from tests.policies.conftest import failing_rules, messages, review
from tests.policies.twins import twin_tests

Plan = dict[str, Any]
BUCKET = "uae-data"  # the compliant plan's bucket
RDS = "gpu-test-mlflow.c0ffee.me-central-1.rds.amazonaws.com"
ARTIFACTS, DATABASE = "uae-pipelines-artifact-store", "uae-pipelines-database-in-region"
PUBLIC, WEBHOOKS = "k8s-pipelines-not-public", "k8s-alert-webhooks-in-cluster"
IR = (
    Path(__file__).resolve().parents[1]
    / "k8s/vendor/kubeflow-pipelines/ir-nested_pipeline_opt_inputs_parent_level_compiled.yaml"
)
PLACEMENT = ps.PipelinesPlacement(
    on_aws=True,
    registry=f"{ECR}/gpu-test",
    node_selector={"gpuplatform.ae/role": "system"},
    region="me-central-1",
    bucket=BUCKET,
    database_host=RDS,
    vpc_cidr="10.42.0.0/16",
)
SPEC = ps.PipelinesSpec(enabled=True)


def kfp_objects() -> list[dict[str, Any]]:
    ir = loop.read_pipeline(IR)
    assert ir is not None
    objects = kfp.install_objects(SPEC, PLACEMENT, "1.33", ps.pipeline_root(BUCKET))
    objects = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    return [
        *objects,
        kfp.proxy_config(kfp.proxy_ini(RDS)),
        *kfp.network_policies(SPEC, PLACEMENT),
        *loop.loop_objects(SPEC, PLACEMENT, ir, {}),
    ]


def plan_with_kfp(objects: list[dict[str, Any]] | None = None) -> Plan:
    plan = compliant_plan()
    steps = [s["newState"] for s in plan["steps"]]
    k8s = next(s["urn"] for s in steps if s["type"] == "pulumi:providers:kubernetes")
    builder = PlanBuilder()
    for manifest in kfp_objects() if objects is None else objects:
        token = type_token(manifest["apiVersion"], manifest["kind"])
        builder.add(token, resource_name(manifest), manifest, provider=f"{k8s}::id")
    plan["steps"].extend(builder.steps)
    return plan


def obj(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    for step in plan["steps"]:
        inputs = step["newState"]["inputs"]
        if inputs.get("kind") == kind and inputs.get("metadata", {}).get("name") == name:
            return inputs  # type: ignore[no-any-return]
    raise KeyError(f"{kind}/{name}")


def launcher(plan: Plan) -> dict[str, Any]:
    return obj(plan, "ConfigMap", "kfp-launcher")["data"]  # type: ignore[no-any-return]


def set_provider(**changes: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        providers = yaml.safe_load(launcher(plan)["providers"])
        providers["s3"]["default"].update(changes)
        launcher(plan)["providers"] = yaml.safe_dump(providers)

    return mutate


def add_provider(name: str, config: dict[str, Any]) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        providers = yaml.safe_load(launcher(plan)["providers"])
        providers[name] = config
        launcher(plan)["providers"] = yaml.safe_dump(providers)

    return mutate


def set_root(value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        if value is None:
            del launcher(plan)["defaultPipelineRoot"]
        else:
            launcher(plan)["defaultPipelineRoot"] = value

    return mutate


def api_env(plan: Plan) -> list[dict[str, Any]]:
    pod = obj(plan, "Deployment", "ml-pipeline")["spec"]["template"]["spec"]
    (server,) = [c for c in pod["containers"] if c["name"] == "ml-pipeline-api-server"]
    return server["env"]  # type: ignore[no-any-return]


def set_api_env(name: str, value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        env = api_env(plan)
        env[:] = [e for e in env if e["name"] != name]
        if value is not None:
            env.append({"name": name, "value": value})

    return mutate


def add_object(manifest: dict[str, Any]) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        plan["steps"] = plan_with_kfp([*kfp_objects(), manifest])["steps"]

    return mutate


def install(plan: Plan) -> dict[str, Any]:
    return obj(plan, "ConfigMap", "pipeline-install-config")["data"]  # type: ignore[no-any-return]


def set_install(key: str, value: str | None) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        if value is None:
            del install(plan)[key]
        else:
            install(plan)[key] = value

    return mutate


def edit_proxy(old: str, new: str) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        data = obj(plan, "ConfigMap", kfp.PROXY_CONFIG)["data"]
        assert old in data["pgbouncer.ini"]
        data["pgbouncer.ini"] = data["pgbouncer.ini"].replace(old, new)

    return mutate


def drop_proxy(plan: Plan) -> None:
    plan["steps"] = [
        s
        for s in plan["steps"]
        if s["newState"]["inputs"].get("metadata", {}).get("name") != kfp.PROXY_CONFIG
    ]


def set_service(name: str, **changes: Any) -> Callable[[Plan], None]:
    return lambda plan: obj(plan, "Service", name)["spec"].update(changes)


def route(kind: str, service: str) -> dict[str, Any]:
    if kind == "Ingress":
        backend = {"service": {"name": service, "port": {"number": 80}}}
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "kfp", "namespace": "kubeflow"},
            "spec": {
                "rules": [
                    {"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
                ]
            },
        }
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "kfp", "namespace": "kubeflow"},
        "spec": {"rules": [{"backendRefs": [{"name": service, "port": 8888}]}]},
    }


def webhook(plan: Plan) -> dict[str, Any]:
    receivers = obj(plan, "AlertmanagerConfig", loop.ALERTMANAGER_CONFIG)["spec"]["receivers"]
    return receivers[0]["webhookConfigs"][0]  # type: ignore[no-any-return]


def set_webhook(**changes: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        hook = webhook(plan)
        for key, value in changes.items():
            if value is None:
                hook.pop(key, None)
            else:
                hook[key] = value

    return mutate


SEAWEEDFS = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "seaweedfs", "namespace": "kubeflow"},
    "spec": {
        "selector": {"matchLabels": {"app": "seaweedfs"}},
        "template": {
            "metadata": {"labels": {"app": "seaweedfs"}},
            "spec": secure_pod(f"{ECR}/mirror/seaweedfs:4.34"),
        },
    },
}

CASES: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("root-missing", set_root(None), ARTIFACTS, "falls back to minio"),
    ("root-minio", set_root("minio://mlpipeline/v2/artifacts"), ARTIFACTS, "is not s3://"),
    ("root-other-bucket", set_root("s3://someone-else/x"), ARTIFACTS, "not one this stack creates"),
    ("provider-clear-text", set_provider(disableSSL=True), ARTIFACTS, "clear text"),
    ("provider-abroad", set_provider(endpoint="s3.eu-west-1.amazonaws.com"), ARTIFACTS,
     "eu-west-1"),
    ("provider-global", set_provider(endpoint="s3.amazonaws.com"), ARTIFACTS, "global endpoint"),
    ("provider-minio", add_provider("minio", {"default": {"endpoint": "minio:9000"}}), ARTIFACTS,
     "MinIO"),
    ("api-clear-text", set_api_env("OBJECTSTORECONFIG_SECURE", "false"), ARTIFACTS, "SECURE"),
    ("api-secure-missing", set_api_env("OBJECTSTORECONFIG_SECURE", None), ARTIFACTS, "SECURE"),
    ("api-other-bucket", set_api_env("OBJECTSTORECONFIG_BUCKETNAME", "someone-else"), ARTIFACTS,
     "not a bucket this stack creates"),
    ("api-abroad", set_api_env("OBJECTSTORECONFIG_HOST", "s3.eu-west-1.amazonaws.com"), ARTIFACTS,
     "eu-west-1"),
    ("bundled-store", add_object(SEAWEEDFS), ARTIFACTS, "the bundled object store"),
    ("db-external", set_install("postgresHost", "db.example.com"), DATABASE,
     "neither in the cluster"),
    # A bare name is a Service only if one of that name exists; else the pod's resolver
    # asks the node's search domains and public DNS (`policies.rules.checks`).
    ("db-bare-name", set_install("postgresHost", "mysql"), DATABASE, "neither in the cluster"),
    ("provider-china", set_provider(endpoint="s3.cn-north-1.amazonaws.com.cn"), ARTIFACTS,
     "cn-north-1"),
    ("db-abroad", set_install("postgresHost", RDS.replace("me-central-1", "eu-west-1")), DATABASE,
     "eu-west-1"),
    ("db-host-missing", set_install("postgresHost", None), DATABASE, "no database host"),
    ("proxy-abroad", edit_proxy(RDS, RDS.replace("me-central-1", "us-east-1")), DATABASE,
     "us-east-1"),
    ("proxy-clear-text",
     edit_proxy("server_tls_sslmode = verify-full", "server_tls_sslmode = disable"),
     DATABASE, "not verified"),
    ("proxy-tls-unverified",
     edit_proxy("server_tls_sslmode = verify-full", "server_tls_sslmode = require"),
     DATABASE, "sslmode = require"),
    ("proxy-tls-no-ca", edit_proxy("server_tls_ca_file", "#server_tls_ca_file"), DATABASE,
     "without `server_tls_ca_file`"),
    ("proxy-tls-missing", edit_proxy("server_tls_sslmode = verify-full\n", ""), DATABASE,
     "prefer"),
    ("proxy-missing", drop_proxy, DATABASE, "no kfp-database-proxy"),
    ("ui-load-balancer", set_service("ml-pipeline-ui", type="LoadBalancer"), PUBLIC,
     "LoadBalancer"),
    ("api-node-port", set_service("ml-pipeline", type="NodePort"), PUBLIC, "NodePort"),
    ("envoy-external-ip", set_service("metadata-envoy-service", externalIPs=["203.0.113.9"]),
     PUBLIC, "externalIPs"),
    ("ingress-to-ui", add_object(route("Ingress", "ml-pipeline-ui")), PUBLIC,
     "routes to ml-pipeline-ui"),
    ("httproute-to-api", add_object(route("HTTPRoute", "ml-pipeline")), PUBLIC,
     "routes to ml-pipeline"),
    ("webhook-abroad", set_webhook(url="https://hooks.example.com/kfp"), WEBHOOKS,
     "not a Service in the cluster"),
    ("webhook-url-missing", set_webhook(url=None), WEBHOOKS, "not a Service in the cluster"),
    ("webhook-from-secret", set_webhook(url=None, urlSecret={"name": "s", "key": "url"}), WEBHOOKS,
     "from a Secret"),
    ("webhook-clear-text",
     set_webhook(url="http://retrain-trigger.kubeflow.svc.cluster.local:8080/alerts"), WEBHOOKS,
     "clear text"),
    ("webhook-unverified", set_webhook(httpConfig=None), WEBHOOKS, "not verified against"),
    ("webhook-skip-verify",
     set_webhook(httpConfig={"tlsConfig": {"ca": {"secret": {"name": "gpuplatform-ca",
                                                             "key": "ca.crt"}},
                                           "insecureSkipVerify": True}}), WEBHOOKS,
     "insecureSkipVerify"),
]  # fmt: skip


test_the_plan_with_kfp_passes_every_rule, test_the_broken_object_fails_exactly_the_rule = (
    twin_tests(plan_with_kfp, CASES)
)


def test_routes_and_services_of_other_workloads_are_not_kfps() -> None:
    plan = plan_with_kfp()
    add_object(route("Ingress", "my-app"))(plan)
    assert failing_rules(plan) == set()


def without_buckets_on_site(plan: Plan) -> None:
    """The on-premises layout: no bucket of the stack; the launcher's provider and the
    API server on the site's store, with its bucket."""
    plan["steps"] = [s for s in plan["steps"] if s["newState"]["type"] != "aws:s3/bucket:Bucket"]
    set_root("s3://ml-pipelines/pipelines/runs")(plan)
    set_provider(endpoint="objects.dc1.internal:443")(plan)
    set_api_env("OBJECTSTORECONFIG_HOST", "objects.dc1.internal")(plan)
    set_api_env("OBJECTSTORECONFIG_BUCKETNAME", "ml-pipelines")(plan)


def test_a_stack_without_buckets_may_use_the_sites_store() -> None:
    # On premises the stack creates no bucket: the site's store is its to name.
    plan = plan_with_kfp()
    without_buckets_on_site(plan)
    assert ARTIFACTS not in failing_rules(plan)


def drop_provider_endpoint(plan: Plan) -> None:
    """No endpoint in the launcher's provider: KFP's S3 client goes to AWS."""
    providers = yaml.safe_load(launcher(plan)["providers"])
    del providers["s3"]["default"]["endpoint"]
    launcher(plan)["providers"] = yaml.safe_dump(providers)


@pytest.mark.parametrize(
    "mutate",
    [
        set_provider(endpoint="s3.me-central-1.amazonaws.com"),
        drop_provider_endpoint,
        set_api_env("OBJECTSTORECONFIG_HOST", "s3.me-central-1.amazonaws.com"),
    ],
    ids=["provider-on-aws", "provider-without-endpoint", "api-server-on-aws"],
)
def test_a_stack_without_buckets_may_not_name_any_bucket_on_aws(
    mutate: Callable[[Plan], None],
) -> None:
    """The rules disagreed here: Spark's and serving's refused a bucket the stack does
    not create on AWS S3, this rule took any bucket once the stack had none. Only the
    site's store is the stack's to name; on AWS S3 a bucket of another account (or one
    this stack does not encrypt) would hold the artifacts."""
    plan = plan_with_kfp()
    without_buckets_on_site(plan)
    mutate(plan)
    assert failing_rules(plan) == {ARTIFACTS}
    assert any("not" in m and "this stack creates" in m for m in messages(plan, ARTIFACTS))


def test_an_in_cluster_database_passes() -> None:
    plan = plan_with_kfp()
    edit_proxy(RDS, "kfp-db-rw.kubeflow.svc.cluster.local")(plan)
    assert DATABASE not in failing_rules(plan)


def test_an_unknown_pipeline_root_is_not_judged_during_preview() -> None:
    plan = plan_with_kfp()
    set_root("04da6b54-80e4-46f7-96ec-b56ff0331ba9")(plan)
    result = review(plan)
    assert ARTIFACTS not in {f.rule_id for f in result.violations}
    assert any(f.unknown and f.rule_id == ARTIFACTS for f in result.findings)


@pytest.mark.parametrize("stack", ["uae-prod", "onprem-ib"])
def test_the_shipped_plans_pass_the_pipelines_rules(stack: str) -> None:
    _, plan = shipped_plan(stack)
    found = failing_rules(copy.deepcopy(plan)) & {ARTIFACTS, DATABASE, PUBLIC, WEBHOOKS}
    assert found == set()
