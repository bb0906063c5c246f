"""The feature store on the cluster (`modules.k8s.features`): Helm values against the
pinned upstream charts (feast-feature-server 0.66.0, valkey 0.11.0; tests/k8s/vendor/
feast/), objects against the Kubernetes schemas and the vendored CRDs (cert-manager,
CloudNativePG), the fences, and the component under the recording mocks."""

from __future__ import annotations

import base64
import copy
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from modules.aws.database import ca_bundle
from modules.k8s.features import network
from modules.k8s.features import spec as fs
from modules.k8s.features import training as ft
from modules.k8s.features.component import FeatureStore, FeatureStoreArgs
from modules.k8s.names import LOCAL_QUEUE_NAME
from modules.k8s.netpol import DEFAULT_DENY, ClusterNetwork, is_default_deny
from modules.k8s.tracking.manifests import (
    DATABASE_CA_CONFIGMAP,
    TRACKING_NAMESPACE,
    TRACKING_URI,
    team_tracking_access,
)
from modules.k8s.trainer.runtimes import ANCESTOR_LABEL, FRAMEWORK_LABEL
from modules.k8s.trainer.tracking import tracking_wiring
from modules.k8s.versions import SUPPORTED_KUBERNETES_VERSIONS
from modules.pools import NodePoolProfile
from modules.validation import InvalidArgsError
from stacks import features_layer
from stacks.config import parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.fleet import stack_file_config
from tests.conftest import RunUnderMocks, shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.database_tls import ca_source_of, cloudnative_pg_server_names, verifying_ca_source
from tests.k8s.vendored_crds import vendored_errors
from tests.support.k8s_schema import schema_errors

VENDOR = Path(__file__).resolve().parent / "vendor" / "feast"
ROOT = Path(__file__).resolve().parents[2]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ECR = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-test"
SPEC = fs.FeaturesSpec(enabled=True, client_namespaces=("team-analytics", "team-risk"))
AWS = fs.Placement(
    True,
    ECR,
    "s3://gpu-test-data/features",
    {"gpuplatform.ae/role": "system"},
    "me-central-1",
    ca_bundle("me-central-1"),
)
ONPREM = fs.Placement(False, "registry.site.ae/gpu", "/data/features", {"role": "system"})
VPC = "10.40.0.0/16"
NETWORK = ClusterNetwork(("10.40.0.0/16",), ("10.40.0.0/16",))


def chart_defaults(name: str) -> Any:
    return yaml.safe_load((VENDOR / name).read_text(encoding="utf-8"))


#: Values that are whole Kubernetes objects (or user maps) the chart passes through.
FREE_FORM = {"podSecurityContext", "securityContext", "resources", "nodeSelector", "aclUsers"}


def unknown_keys(values: Any, defaults: Any, path: str = "") -> list[str]:
    """Keys we set that the chart's values.yaml does not have, or of another type (a
    misspelled key is silently ignored by Helm: this is the only place it shows)."""
    problems: list[str] = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if key not in defaults:
            problems.append(f"{where}: not a value of the chart")
            continue
        default = defaults[key]
        if key in FREE_FORM:
            continue
        if isinstance(default, dict) and default and isinstance(value, dict):
            problems += unknown_keys(value, default, where)
        elif (
            default is not None
            and type(default) is not type(value)
            and default != {}
            and not (isinstance(default, list) and isinstance(value, list))
        ):
            problems.append(f"{where}: {type(value).__name__}, chart has {type(default).__name__}")
    return problems


def merged(defaults: Any, values: Any) -> Any:
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {k: merged(defaults.get(k), values[k]) if k in values else defaults[k]
                for k in {**defaults, **values}}  # fmt: skip
    return values


# -- the upstream charts ---------------------------------------------------------------


@pytest.mark.parametrize("placement", [AWS, ONPREM], ids=["aws", "onprem"])
def test_feature_server_values_exist_in_the_pinned_chart(placement: fs.Placement) -> None:
    values = fs.feature_server_values(SPEC, placement)
    defaults = chart_defaults("feast-feature-server-0.66.0-values.yaml")
    assert unknown_keys(values, defaults) == []
    assert fs.FEATURE_SERVER_CHART.version == "0.66.0"


def test_a_misspelled_chart_value_is_caught() -> None:
    values = fs.feature_server_values(SPEC, AWS)
    values["replicas"] = 3  # the chart's key is replicaCount
    values["image"]["tagg"] = "x"
    defaults = chart_defaults("feast-feature-server-0.66.0-values.yaml")
    assert sorted(unknown_keys(values, defaults)) == [
        "image.tagg: not a value of the chart",
        "replicas: not a value of the chart",
    ]


def test_the_feature_store_yaml_holds_no_secret_and_points_at_the_stores() -> None:
    values = fs.feature_server_values(SPEC, AWS)
    config = yaml.safe_load(base64.b64decode(values["feature_store_yaml_base64"]))
    assert config["registry"]["registry_type"] == "sql"
    assert config["registry"]["path"] == (
        "postgresql+psycopg://feast:${FEAST_REGISTRY_PASSWORD}@${FEAST_REGISTRY_HOST}:5432/"
        "feast?sslmode=verify-full&sslrootcert=/etc/feast/registry-ca/ca.crt"
    )
    assert config["online_store"] == {
        "type": "redis",
        "connection_string": "${FEAST_REDIS_HOST}:6379,ssl=true,password=${FEAST_REDIS_PASSWORD}",
    }
    assert config["offline_store"] == {"type": "file"}
    env = {e["name"]: e for e in values["extraEnvs"]}
    for name in ("FEAST_REGISTRY_PASSWORD", "FEAST_REDIS_PASSWORD"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == fs.CREDENTIALS_SECRET


def test_the_feature_server_runs_the_in_region_image_non_root_and_bounded() -> None:
    values = fs.feature_server_values(SPEC, AWS)
    assert values["image"]["repository"] == f"{ECR}/features"
    assert values["securityContext"]["readOnlyRootFilesystem"] is True
    assert values["securityContext"]["runAsNonRoot"] is True
    assert values["resources"]["requests"] == values["resources"]["limits"]
    assert values["service"]["type"] == "ClusterIP"


@pytest.mark.parametrize("placement", [AWS, ONPREM], ids=["aws", "onprem"])
def test_valkey_values_pass_the_pinned_charts_schema(placement: fs.Placement) -> None:
    values = fs.valkey_values(SPEC, placement, "ceph-rbd-encrypted")
    defaults = chart_defaults("valkey-0.11.0-values.yaml")
    assert unknown_keys(values, defaults) == []
    schema = json.loads((VENDOR / "valkey-0.11.0-values.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert [e.message for e in validator.iter_errors(merged(defaults, values))] == []
    assert values["auth"]["enabled"] and values["tls"]["enabled"]
    assert values["dataStorage"]["enabled"] and values["dataStorage"]["keepPvc"]
    assert values["image"]["registry"] == placement.registry


def test_the_valkey_schema_refuses_a_mistyped_value() -> None:
    values = fs.valkey_values(SPEC, ONPREM, "ceph")
    values["auth"]["enabled"] = "yes"
    defaults = chart_defaults("valkey-0.11.0-values.yaml")
    schema = json.loads((VENDOR / "valkey-0.11.0-values.schema.json").read_text())
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(merged(defaults, values)))
    assert errors


# -- objects against the schemas and CRDs ----------------------------------------------


def all_objects(placement: fs.Placement) -> list[dict[str, Any]]:
    objects = [
        *fs.rbac_objects(SPEC),
        *network.network_policies(SPEC, NETWORK, VPC if placement.on_aws else None),
        *fs.proxy_objects(SPEC, placement, "gpuplatform-serving-ca"),
        fs.repo_configmap(placement),
        fs.materialize_cronjob(SPEC, placement),
        fs.apply_job(SPEC, placement),
        *(fs.client_egress_policy(n) for n in SPEC.client_namespaces),
    ]
    if placement.on_aws:
        objects.append(fs.registry_init_job(placement, "mlflow-db", "db.example.rds.amazonaws.com"))
        objects.append(network.registry_init_policy(VPC))
    else:
        objects += [
            fs.onprem_registry_cluster(placement, "ceph"),
            fs.online_store_certificate("ca"),
        ]
        objects.append(network.operator_egress_policy())
    return objects


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES_VERSIONS)
@pytest.mark.parametrize("placement", [AWS, ONPREM], ids=["aws", "onprem"])
def test_objects_pass_the_strict_schemas(placement: fs.Placement, version: str) -> None:
    objects = all_objects(placement)
    assert schema_errors(objects, version) == []
    assert vendored_errors(objects) == []


def test_a_misspelled_field_fails_the_schema() -> None:
    job = fs.materialize_cronjob(SPEC, AWS)
    job["spec"]["schedul"] = job["spec"].pop("schedule")
    assert schema_errors([job], "1.33")


# -- auth and fences ---------------------------------------------------------------------


def test_the_feature_server_is_reachable_only_through_the_authenticating_proxy() -> None:
    policies = {p["metadata"]["name"]: p for p in network.network_policies(SPEC, NETWORK, VPC)}
    assert is_default_deny(policies[DEFAULT_DENY])
    (server_rule,) = policies["feast-feature-server"]["spec"]["ingress"]
    assert server_rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": fs.PROXY_NAME}}}
    ]
    (proxy_rule,) = policies["feast-endpoint"]["spec"]["ingress"]
    namespaces = [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                  for p in proxy_rule["from"]]  # fmt: skip
    assert namespaces == ["team-analytics", "team-risk"]
    assert proxy_rule["ports"] == [{"protocol": "TCP", "port": fs.PROXY_PORT}]


def test_without_clients_nobody_may_reach_the_endpoint() -> None:
    alone = fs.FeaturesSpec(enabled=True)
    policies = {p["metadata"]["name"]: p for p in network.network_policies(alone, NETWORK, VPC)}
    assert policies["feast-endpoint"]["spec"]["ingress"] == []
    assert "RoleBinding" not in {o["kind"] for o in fs.rbac_objects(alone)}


def test_the_proxy_checks_tokens_and_rbac_over_tls() -> None:
    config_map, certificate, deployment, service = fs.proxy_objects(SPEC, AWS, "ca")
    assert yaml.safe_load(config_map["data"]["config.yaml"])["authorization"] == {
        "resourceAttributes": {
            "namespace": "feast", "apiGroup": "gpuplatform.ae", "apiVersion": "v1",
            "resource": "featureservers", "name": "online",
        }
    }  # fmt: skip
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{ECR}/kube-rbac-proxy:v0.18.0"
    assert "--tls-min-version=VersionTLS13" in container["args"]
    assert f"--upstream=http://{fs.SERVER_RELEASE}.feast.svc.cluster.local:80/" in container["args"]
    assert certificate["spec"]["secretName"] == fs.TLS_SECRET
    assert service["spec"]["type"] == "ClusterIP"
    role = next(o for o in fs.rbac_objects(SPEC) if o["kind"] == "Role")
    assert role["rules"][0]["verbs"] == ["create", "get"]
    binding = next(o for o in fs.rbac_objects(SPEC) if o["kind"] == "RoleBinding")
    assert [s["name"] for s in binding["subjects"]] == [
        "system:serviceaccounts:team-analytics", "system:serviceaccounts:team-risk"]  # fmt: skip


def test_materialisation_runs_one_at_a_time_in_the_features_image() -> None:
    job = fs.materialize_cronjob(SPEC, AWS)
    assert job["spec"]["schedule"] == "17 * * * *"
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"{ECR}/features:0.1.0"
    assert "materialize-incremental" in container["args"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_registry_init_is_idempotent_and_keeps_passwords_out_of_the_script() -> None:
    job = fs.registry_init_job(AWS, "mlflow-db", "db.example")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    script = container["command"][2]
    assert "WHERE NOT EXISTS" in script and "\\gexec" in script
    assert ":'pw'" in script  # the password is a psql variable, never interpolated text
    env = {e["name"]: e for e in container["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "mlflow-db",
        "key": "password",
    }
    assert job["metadata"]["namespace"] == "mlflow"


CA_ITEMS = [{"key": "ca.crt", "path": "ca.crt"}]
REGISTRY_CA = {
    "aws": {"configMap": {"name": "feast-database-ca", "items": CA_ITEMS}},
    # Only the certificate of CloudNativePG's CA Secret: it also holds the CA's key.
    "onprem": {"secret": {"secretName": "feast-registry-ca", "items": CA_ITEMS}},
}


def _registry_ca_file(feature_store_yaml: str) -> str:
    """The CA file the registry's URL has libpq verify the server with (verify-full)."""
    url = urlsplit(yaml.safe_load(feature_store_yaml)["registry"]["path"])
    query = parse_qs(url.query)
    assert query["sslmode"] == ["verify-full"], query
    (path,) = query["sslrootcert"]
    return path


def _pods(placement: fs.Placement) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each client of the registry: the feature_store.yaml it reads and its pod spec."""
    values = fs.feature_server_values(SPEC, placement)
    server_yaml = base64.b64decode(values["feature_store_yaml_base64"]).decode()
    repo_yaml = fs.repo_configmap(placement)["data"]["feature_store.yaml"]
    cronjob = fs.materialize_cronjob(SPEC, placement)["spec"]["jobTemplate"]["spec"]
    server = {
        "volumes": values["volumes"],
        "containers": [{"volumeMounts": values["volumeMounts"]}],
    }
    return {
        "server": (server_yaml, server),
        "materialize": (repo_yaml, cronjob["template"]["spec"]),
        "apply": (repo_yaml, fs.apply_job(SPEC, placement)["spec"]["template"]["spec"]),
    }


@pytest.mark.parametrize("placement", [AWS, ONPREM], ids=["aws", "onprem"])
def test_every_registry_client_verifies_the_database_with_its_ca(placement: fs.Placement) -> None:
    expected = REGISTRY_CA["aws" if placement.on_aws else "onprem"]
    for name, (config, pod) in _pods(placement).items():
        (container,) = pod["containers"]
        found = ca_source_of(_registry_ca_file(config), container["volumeMounts"], pod["volumes"])
        assert found == (expected, "ca.crt"), name


def test_the_registry_init_job_verifies_the_instance_with_the_tracking_servers_ca() -> None:
    pod = fs.registry_init_job(AWS, "mlflow-db", "db.example")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    source = verifying_ca_source(env, container["volumeMounts"], pod["volumes"])
    # The tracking server's copy of the RDS authorities, in the Job's namespace.
    assert source == ({"configMap": {"name": DATABASE_CA_CONFIGMAP, "items": CA_ITEMS}}, "ca.crt")
    assert fs.TRACKING_DATABASE_CA_CONFIGMAP == DATABASE_CA_CONFIGMAP


def test_on_premises_the_clients_connect_to_a_name_of_the_registrys_certificate() -> None:
    meta = fs.onprem_registry_cluster(ONPREM, "ceph-rbd-encrypted")["metadata"]
    assert fs.registry_host(False) in cloudnative_pg_server_names(meta["name"], meta["namespace"])
    assert f"{meta['name']}-ca" == fs.REGISTRY_CA_SECRET


def test_on_aws_the_registrys_ca_is_the_regions_rds_bundle() -> None:
    configmap = fs.registry_ca_configmap(AWS)
    meta = configmap["metadata"]
    assert (meta["name"], meta["namespace"]) == ("feast-database-ca", "feast")
    assert configmap["data"] == {"ca.crt": ca_bundle("me-central-1")}
    with pytest.raises(ValueError, match="RDS CA bundle"):
        fs.registry_ca_configmap(replace(AWS, database_ca=""))


def test_the_spec_reports_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as caught:
        fs.FeaturesSpec(
            image_tag="bad tag", materialize_schedule="hourly", server_replicas=0,
            client_namespaces=("Team_A", "feast"),
        )  # fmt: skip
    assert {p.field for p in caught.value.problems} == {
        "image_tag", "materialize_schedule", "server_replicas",
        "client_namespaces[0]", "client_namespaces[1]",
    }  # fmt: skip


# -- the component under the recording mocks --------------------------------------------


def program(placement: fs.Placement) -> None:
    provider = k8s.Provider("cluster", kubeconfig="{}")
    FeatureStore(
        "features",
        FeatureStoreArgs(
            provider=provider,
            spec=SPEC,
            placement=placement,
            kubernetes_version="1.33",
            ca_issuer="gpuplatform-serving-ca",
            registry_password=pulumi.Output.secret("registry-pass"),
            redis_password=pulumi.Output.secret("redis-pass-sixteen"),
            registry_host="db.example.rds.amazonaws.com" if placement.on_aws else "",
            redis_host="master.features.cache.amazonaws.com" if placement.on_aws else "",
            storage_class="" if placement.on_aws else "ceph-rbd-encrypted",
            network=NETWORK,
            vpc_cidr=VPC if placement.on_aws else None,
        ),
    )


def by_kind(registrations: dict[str, Any]) -> dict[str, list[Any]]:
    kinds: dict[str, list[Any]] = {}
    for r in registrations.values():
        kinds.setdefault(r.type, []).append(r)
    return kinds


def test_on_aws_the_component_registers_the_server_proxy_and_registry_init(
    run_under_mocks: RunUnderMocks,
) -> None:
    kinds = by_kind(run_under_mocks(lambda: program(AWS)))
    (release,) = kinds["kubernetes:helm.sh/v3:Release"]
    assert (release.inputs["chart"], release.inputs["version"]) == (
        "feast-feature-server",
        "0.66.0",
    )
    assert release.inputs["repositoryOpts"] == {"repo": fs.FEATURE_SERVER_CHART.repo}
    secrets = {s.inputs["metadata"]["name"]: s for s in kinds["kubernetes:core/v1:Secret"]}
    assert secrets[fs.CREDENTIALS_SECRET].inputs["stringData"]["FEAST_REDIS_PASSWORD"] == "[secret]"
    assert secrets[fs.CREDENTIALS_SECRET].inputs["stringData"]["FEAST_REDIS_HOST"] == (
        "master.features.cache.amazonaws.com"
    )
    assert secrets[fs.REGISTRY_INIT_SECRET].inputs["metadata"]["namespace"] == "mlflow"
    jobs = {j.inputs["metadata"]["name"]: j for j in kinds["kubernetes:batch/v1:Job"]}
    assert set(jobs) == {"feast-registry-init", "feast-apply"}
    configmaps = {c.inputs["metadata"]["name"]: c for c in kinds["kubernetes:core/v1:ConfigMap"]}
    assert configmaps[fs.REGISTRY_CA_CONFIGMAP].inputs["data"]["ca.crt"] == AWS.database_ca
    assert "kubernetes:postgresql.cnpg.io/v1:Cluster" not in kinds
    (namespace,) = kinds["kubernetes:core/v1:Namespace"]
    assert (
        namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    )


def test_on_premises_it_adds_valkey_and_a_registry_cluster(run_under_mocks: RunUnderMocks) -> None:
    kinds = by_kind(run_under_mocks(lambda: program(ONPREM)))
    charts = {r.inputs["chart"]: r for r in kinds["kubernetes:helm.sh/v3:Release"]}
    assert set(charts) == {"feast-feature-server", "valkey"}
    assert charts["valkey"].inputs["version"] == "0.11.0"
    (cluster,) = kinds["kubernetes:postgresql.cnpg.io/v1:Cluster"]
    assert cluster.protect
    secrets = {s.inputs["metadata"]["name"]: s for s in kinds["kubernetes:core/v1:Secret"]}
    assert secrets[fs.ONLINE_USERS_SECRET].inputs["stringData"] == {"default": "[secret]"}
    # No registry init Job (the registry is its own cluster): only the repository's apply.
    assert [j.inputs["metadata"]["name"] for j in kinds["kubernetes:batch/v1:Job"]] == [
        "feast-apply"
    ]


# -- the shipped plans ------------------------------------------------------------------

FEATURE_STACKS = ("smb-cpu", "onprem-ib")


def shipped_objects(stack: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The feature store's plain objects and its Helm releases' inputs in a shipped plan."""
    registrations, _ = shipped_plan(stack)
    parent = next(r.urn for r in registrations.values() if r.type == "gpuplatform:k8s:FeatureStore")
    children = [r for r in registrations.values() if r.parent == parent]
    objects = [r.inputs for r in children if "apiVersion" in r.inputs]
    releases = {r.inputs["chart"]: r.inputs for r in children if r.type.endswith(":Release")}
    return objects, releases


@pytest.mark.parametrize("stack", FEATURE_STACKS)
def test_shipped_feature_store_values_match_the_pinned_charts(stack: str) -> None:
    objects, releases = shipped_objects(stack)
    server = releases["feast-feature-server"]
    assert server["version"] == fs.FEATURE_SERVER_CHART.version
    defaults = chart_defaults("feast-feature-server-0.66.0-values.yaml")
    assert unknown_keys(server["values"], defaults) == []
    if stack == "onprem-ib":
        valkey = releases["valkey"]["values"]
        defaults = chart_defaults("valkey-0.11.0-values.yaml")
        schema = json.loads((VENDOR / "valkey-0.11.0-values.schema.json").read_text())
        errors = jsonschema.Draft202012Validator(schema).iter_errors(merged(defaults, valkey))
        assert [e.message for e in errors] == []
    else:
        assert "valkey" not in releases
    assert schema_errors(objects, "1.33") == []
    assert vendored_errors(objects) == []
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "CronJob", "NetworkPolicy", "Certificate", "Secret"} <= kinds


@pytest.mark.parametrize("stack", FEATURE_STACKS)
def test_shipped_registry_clients_verify_the_database_with_a_ca_of_the_plan(stack: str) -> None:
    """The CA the feature server mounts is in the same plan: the RDS authorities of the
    stack's region, or the CA Secret of the registry's CloudNativePG cluster."""
    objects, releases = shipped_objects(stack)
    values = releases["feast-feature-server"]["values"]
    config = base64.b64decode(values["feature_store_yaml_base64"]).decode()
    source, key = ca_source_of(_registry_ca_file(config), values["volumeMounts"], values["volumes"])
    if "configMap" in source:
        (configmap,) = [
            o for o in objects
            if o["kind"] == "ConfigMap" and o["metadata"]["name"] == source["configMap"]["name"]
        ]  # fmt: skip
        region = parse_stack_config(
            stack_file_config(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
        ).region
        assert configmap["data"][key] == ca_bundle(region)
    else:
        (cluster,) = [o["metadata"] for o in objects if o["kind"] == "Cluster"]
        assert f"{cluster['name']}-ca" == source["secret"]["secretName"]


def test_the_aws_stack_puts_the_online_store_on_elasticache() -> None:
    registrations, _ = shipped_plan("smb-cpu")
    (group,) = [
        r for r in registrations.values() if r.type.endswith("replicationGroup:ReplicationGroup")
    ]
    (key,) = [
        r
        for r in registrations.values()
        if r.type == "aws:kms/key:Key" and r.name == "keys-storage"
    ]
    assert group.property_dependencies["kmsKeyId"] == [key.urn]
    assert group.inputs["authToken"] == "[secret]"
    (eks,) = [r for r in registrations.values() if r.type == "aws:eks/cluster:Cluster"]
    (rule,) = [
        r
        for r in registrations.values()
        if r.type.endswith("SecurityGroupIngressRule") and r.name.startswith("features-online")
    ]
    assert rule.property_dependencies["referencedSecurityGroupId"] == [eks.urn]


def test_a_stack_with_features_and_no_secret_stops_with_the_key_to_set() -> None:
    from stacks.features_layer import REDIS_TOKEN_KEY, _secret  # noqa: PLC0415

    def program() -> None:
        _secret(REDIS_TOKEN_KEY, "the feature store's Redis password")

    with pytest.raises(Exception, match="featuresRedisAuthToken: missing"):
        RunUnderMocksOnce()(program)


def RunUnderMocksOnce() -> Any:  # noqa: N802 - a factory named like the fixture it stands for
    from stacks.config import PROJECT  # noqa: PLC0415
    from stacks.offline_runtime import run_program  # noqa: PLC0415

    def run(program: Any) -> Any:
        return run_program(program, project=PROJECT, stack="t", config={}, secret_keys=[])

    return run


def test_on_premises_feast_verifies_valkey_with_the_platform_ca() -> None:
    values = fs.feature_server_values(SPEC, ONPREM)
    config = yaml.safe_load(base64.b64decode(values["feature_store_yaml_base64"]))
    assert config["online_store"]["connection_string"].endswith(
        f",ssl_ca_certs={fs.ONLINE_CA_DIR}/ca.crt"
    )
    (volume,) = [v for v in values["volumes"] if v["name"] == "online-store-ca"]
    assert volume["secret"] == {
        "secretName": fs.ONLINE_TLS_SECRET,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],  # never the server's private key
    }
    assert {"name": "online-store-ca", "mountPath": fs.ONLINE_CA_DIR, "readOnly": True} in values[
        "volumeMounts"
    ]
    pod = fs.materialize_cronjob(SPEC, ONPREM)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "online-store-ca" in {v["name"] for v in pod["volumes"]}
    repo = yaml.safe_load(fs.repo_configmap(ONPREM)["data"]["feature_store.yaml"])
    assert "ssl_ca_certs" in repo["online_store"]["connection_string"]
    # ElastiCache's certificate is publicly trusted: the system store verifies it.
    aws = yaml.safe_load(
        base64.b64decode(fs.feature_server_values(SPEC, AWS)["feature_store_yaml_base64"])
    )
    assert "ssl_ca_certs" not in aws["online_store"]["connection_string"]


# -- the offline store on S3, and the tabular model's TrainJob (smb-cpu) ---------------

SMB_BUCKET = "gpu-smb-cpu-data-123456789012"
SMB_OFFLINE = f"s3://{SMB_BUCKET}/features"
SMB_ENDPOINT = "https://s3.me-central-1.amazonaws.com"


def plan_inputs(stack: str, type_: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [r.inputs for r in registrations.values() if r.type == type_]


def features_training(stack: str) -> tuple[dict[str, Any], dict[str, Any]]:
    (runtime,) = [
        r
        for r in plan_inputs(
            stack, "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"
        )
        if r["metadata"]["labels"][FRAMEWORK_LABEL] == ft.FRAMEWORK
    ]
    (job,) = [
        j
        for j in plan_inputs(stack, "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
        if j["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    ]
    return runtime, job


def test_on_aws_the_sources_are_registered_in_the_buckets_prefix_through_the_region() -> None:
    objects, _ = shipped_objects("smb-cpu")
    (apply,) = [o for o in objects if o["metadata"]["name"] == "feast-apply"]
    container = apply["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "workloads.features", "apply"]
    assert container["args"] == [
        "--repo", "/feature_repo", "--offline-uri", SMB_OFFLINE, "--s3-endpoint", SMB_ENDPOINT,
    ]  # fmt: skip
    (cron,) = [o for o in objects if o["kind"] == "CronJob"]
    for pod in (apply["spec"]["template"], cron["spec"]["jobTemplate"]["spec"]["template"]):
        (container,) = pod["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "me-central-1"
        assert env["FEATURES_S3_ENDPOINT"] == SMB_ENDPOINT
        assert pod["spec"]["serviceAccountName"] == fs.SERVICE_ACCOUNT  # Pod Identity
    # On premises: the volume's path, no S3 endpoint or region.
    objects, _ = shipped_objects("onprem-ib")
    (apply,) = [o for o in objects if o["metadata"]["name"] == "feast-apply"]
    container = apply["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--repo", "/feature_repo", "--offline-uri", "/data/features"]
    assert "AWS_REGION" not in {e["name"] for e in container["env"]}


def test_the_training_trainjob_and_its_runtime_pass_the_vendored_trainer_crds() -> None:
    runtime, job = features_training("smb-cpu")
    assert crd_errors([runtime, job]) == []
    # Kueue admits it by the team's queue label once it is released (held by default).
    released = ft.train_job(
        team="analytics", pool="cpu-train", image=f"{ECR}/features:0.1.0",
        offline_uri=SMB_OFFLINE, s3_endpoint=SMB_ENDPOINT, region="me-central-1",
        tracking_uri=TRACKING_URI, held=False,
    )  # fmt: skip
    assert released["metadata"]["labels"][QUEUE_LABEL] == LOCAL_QUEUE_NAME
    assert crd_errors([released]) == []
    assert QUEUE_LABEL not in job["metadata"]["labels"]
    assert job["spec"]["suspend"] is True
    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["numNode"] = 1
    assert any("numNode" in e for e in crd_errors([broken]))


def test_the_training_job_reads_the_offline_store_and_tracks_to_mlflow() -> None:
    runtime, job = features_training("smb-cpu")
    assert job["metadata"]["namespace"] == "team-analytics"
    assert job["spec"]["runtimeRef"]["name"] == "features-cpu-train"
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == (
        "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-smb-cpu/features:0.1.0"
    )
    args = trainer["args"]
    assert args[args.index("--offline-uri") + 1] == SMB_OFFLINE
    assert args[args.index("--s3-endpoint") + 1] == SMB_ENDPOINT
    assert args[args.index("--tracking-uri") + 1] == TRACKING_URI
    env = {e["name"]: e for e in trainer["env"]}
    assert env["AWS_REGION"]["value"] == "me-central-1"
    # The login is no TrainJob setting: the runtime mounts the team's, as the training
    # runtimes do (tests/workloads/test_job_tracking.py: the same wiring).
    assert not [e for e in trainer["env"] if e["name"].startswith("MLFLOW_")]
    # No ML policy: not upstream's xgboost one (its DMLC_* tracker is not LightGBM's).
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 1}
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["template"]["metadata"]["labels"][ANCESTOR_LABEL] == "trainer"
    pod = rjob["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == ft.SERVICE_ACCOUNT
    assert pod["priorityClassName"] == "preemptible"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    selected = {e["key"]: e["values"] for e in terms["nodeSelectorTerms"][0]["matchExpressions"]}
    assert selected["gpuplatform.ae/pool"] == ["cpu-train"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "workloads.features", "train"]
    wired_env, wired_volumes, wired_mounts = tracking_wiring(team_tracking_access())
    assert [e for e in container["env"] if e["name"].startswith("MLFLOW_")] == wired_env
    assert wired_env[0] == {"name": "MLFLOW_TRACKING_URI", "value": TRACKING_URI}
    assert {"name": "HOME", "value": "/tmp"} in container["env"]  # the credentials' HOME
    assert all(m in container["volumeMounts"] for m in wired_mounts)
    assert all(v in pod["volumes"] for v in wired_volumes)
    assert container["resources"]["requests"] == container["resources"]["limits"]
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    (account,) = [
        a
        for a in plan_inputs("smb-cpu", "kubernetes:core/v1:ServiceAccount")
        if a["metadata"]["name"] == ft.SERVICE_ACCOUNT
    ]
    assert account["metadata"]["namespace"] == "team-analytics"


def test_the_training_jobs_identity_reads_only_the_offline_stores_prefix() -> None:
    registrations, _ = shipped_plan("smb-cpu")
    associations = [
        r.inputs
        for r in registrations.values()
        if r.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
        and r.inputs["serviceAccount"] == ft.SERVICE_ACCOUNT
    ]
    (association,) = associations
    assert association["namespace"] == "team-analytics"
    policies = [
        json.loads(r.inputs["policy"])
        for r in registrations.values()
        if r.type == "aws:iam/rolePolicy:RolePolicy" and "features-training" in r.urn
    ]
    (policy,) = policies
    actions = {a for st in policy["Statement"] for a in [st["Action"]] if st["Effect"] == "Allow"}
    assert actions == {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}
    (read,) = [st for st in policy["Statement"] if st["Action"] == "s3:GetObject"]
    assert read["Resource"].endswith(f":::{SMB_BUCKET}/features/*")


def test_a_training_pool_that_is_not_a_cpu_training_pool_is_refused() -> None:
    flat = dict(stack_file_config(ROOT / "stacks" / "Pulumi.smb-cpu.yaml"))
    raw = flat["uae-gpu-platform:features"]
    section = yaml.safe_load(raw) if isinstance(raw, str) else dict(raw)
    section["trainingPool"] = "preprocess"
    flat["uae-gpu-platform:features"] = json.dumps(section)
    config = parse_stack_config(flat)
    pools = shipped_pools("smb-cpu")
    with pytest.raises(ConfigError, match="trainingPool: 'preprocess' is not a cpu-training pool"):
        features_layer._training(config, True, pools)
    with pytest.raises(ConfigError, match="S3 \\(AWS stacks only\\)"):
        section["trainingPool"] = "cpu-train"
        flat["uae-gpu-platform:features"] = json.dumps(section)
        features_layer._training(parse_stack_config(flat), False, pools)
    with pytest.raises(InvalidArgsError):
        fs.FeaturesSpec(training_team="analytics")


def shipped_pools(stack: str) -> tuple[NodePoolProfile, ...]:
    """smb-cpu's pools as the Kubernetes layer sees them (names and roles matter here)."""
    assert stack == "smb-cpu"
    return (
        NodePoolProfile("system", "system", "m7i.xlarge", 4, 16),
        NodePoolProfile("cpu-train", "cpu-training", "c7i.8xlarge", 32, 64),
        NodePoolProfile("preprocess", "preprocess", "m7i.2xlarge", 8, 32),
    )


def test_the_registry_init_runs_in_the_tracking_namespace() -> None:
    """`spec` names the tracking namespace without importing the tracking package (it
    stays free of Pulumi for the features environment): the two must agree."""
    assert fs.TRACKING_NAMESPACE == TRACKING_NAMESPACE
    job = fs.registry_init_job(AWS, "mlflow-db", "db.example")
    assert job["metadata"]["namespace"] == TRACKING_NAMESPACE
    assert network.registry_init_policy(VPC)["metadata"]["namespace"] == TRACKING_NAMESPACE


def test_every_features_pod_runs_as_the_features_images_user() -> None:
    """The image's USER (workloads/features/Dockerfile) is the UID every features pod and
    the tabular TrainJob's runtime run as: another UID could not read its home or files."""
    dockerfile = (ROOT / "workloads" / "features" / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user is not None and int(user[1]) == int(user[2]) == fs.RUN_AS
    runtime, _ = features_training("smb-cpu")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    contexts = [pod["spec"]["securityContext"]]
    contexts += [c["securityContext"] for c in pod["spec"]["containers"]]
    for context in contexts:
        assert context["runAsUser"] == context["runAsGroup"] == fs.RUN_AS
