"""The MLflow tracking server: chart values against the pinned chart's schema, the
on-premises database against the vendored CloudNativePG CRD, its fences, and what every
shipped stack's plan holds for it."""

from __future__ import annotations

import configparser
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import jsonschema
import pulumi
import pytest
import yaml

from modules.aws.database import ca_bundle
from modules.k8s.netpol import DEFAULT_DENY, ClusterNetwork, is_default_deny
from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.tracking import manifests as tracking
from modules.k8s.tracking.spec import (
    TrackingInputs,
    TrackingSpec,
    TrackingStoreInputs,
)
from modules.k8s.tracking.users import (
    PIPELINES_USERNAME,
    service_password,
    team_password,
    team_username,
    users_json,
)
from modules.k8s.trainer.tracking import TRACKING_CREDENTIALS_DIR
from modules.k8s.versions import CLOUDNATIVE_PG, MLFLOW
from modules.validation import InvalidArgsError
from stacks.config import StackConfig, parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.kubernetes_layer import _tracking_inputs
from stacks.offline_plan import load_stack_file
from stacks.offline_runtime import Registration
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.crd_checks import crd_errors
from tests.k8s.database_tls import cloudnative_pg_server_names, verifying_ca_source
from tests.k8s.fixtures import NO_PROVIDER, eks_args, onprem_args
from tests.k8s.shipped import kubernetes_objects
from tests.k8s.vendored_crds import vendored_errors
from tests.support.k8s_schema import schema_errors

VENDOR = Path(__file__).resolve().parent / "vendor"
#: The mirror of the tracking images (on AWS the stack's ECR: the foundation sets it).
REGISTRY = "registry.site.ae/gpu"
SPEC = TrackingSpec(registry=REGISTRY)
KEY = "arn:aws:kms:me-central-1:123456789012:key/0b6c2b3e-1111-2222-3333-444455556666"
AWS_STORE = tracking.StoreSettings(
    database_host="db.example.me-central-1.rds.amazonaws.com",
    database_secret=tracking.DATABASE_SECRET,
    auth_database_secret=tracking.AUTH_DATABASE_SECRET,
    bucket="gpu-test-data-123456789012",
    artifact_prefix="mlflow",
    kms_key_arn=KEY,
    region="me-central-1",
    on_aws=True,
)
ONPREM_STORE = tracking.StoreSettings(
    database_host=tracking.database_host(on_aws=False),
    database_secret=tracking.database_secret_name(on_aws=False),
)


def schema(path: str) -> dict[str, Any]:
    return json.loads((VENDOR / path).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def merged(defaults: Any, values: Any) -> Any:
    """Helm's coalescing: our values over the chart's defaults (maps merge, lists replace)."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {k: merged(defaults.get(k), values[k]) if k in values else defaults[k]
                for k in {**defaults, **values}}  # fmt: skip
    return values


def chart_errors(values: dict[str, Any], chart: str) -> list[str]:
    """What ``helm install`` would refuse: the merged values against values.schema.json."""
    defaults = yaml.safe_load((VENDOR / chart / "values.yaml").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema(f"{chart}/values.schema.json"))
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(merged(defaults, values))]


# -- chart values ---------------------------------------------------------------------


@pytest.mark.parametrize("store", [AWS_STORE, ONPREM_STORE], ids=["aws", "onprem"])
def test_mlflow_values_pass_the_pinned_charts_schema(store: tracking.StoreSettings) -> None:
    values = tracking.mlflow_values(SPEC, store)
    assert chart_errors(values, "mlflow-chart") == []


def test_the_chart_schema_refuses_a_misspelled_value() -> None:
    values = tracking.mlflow_values(SPEC, AWS_STORE)
    values["auth"]["enabeld"] = True
    assert chart_errors(values, "mlflow-chart")


def test_cloudnative_pg_values_pass_the_pinned_charts_schema() -> None:
    assert chart_errors(tracking.cloudnative_pg_values(SPEC), "cloudnative-pg") == []


def test_the_server_is_non_root_read_only_and_bounded() -> None:
    values = tracking.mlflow_values(SPEC, AWS_STORE)
    container = values["securityContext"]
    assert container["runAsNonRoot"] is True and container["runAsUser"] != 0
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert container["seccompProfile"] == {"type": "RuntimeDefault"}
    assert values["resources"]["limits"] == {"cpu": "1000m", "memory": "2048Mi"}
    assert values["resources"]["requests"] == values["resources"]["limits"]
    assert values["serviceAccount"]["automount"] is False
    assert values["service"]["type"] == "ClusterIP" and values["ingress"]["enabled"] is False


def test_the_server_requires_login_and_exposes_metrics() -> None:
    values = tracking.mlflow_values(SPEC, AWS_STORE)
    auth = values["auth"]
    assert auth["enabled"] is True and auth["appName"] == "basic-auth"
    assert auth["existingAdminSecret"]["name"] == tracking.ADMIN_INI_SECRET
    assert "adminPassword" not in auth  # the password only reaches the pod as a Secret
    assert auth["postgres"]["existingSecret"]["name"] == tracking.AUTH_DATABASE_SECRET
    assert values["backendStore"]["existingDatabaseSecret"]["name"] == tracking.DATABASE_SECRET


def _through_the_charts_ini(placeholder_line: str, value: str) -> str:
    """What MLflow reads back: the chart's ``sed s/<placeholder>/${VALUE}/g`` (run with
    the system's sed, as the chart's busybox does) then configparser."""
    template = f"[mlflow]\n{placeholder_line}\n"
    rendered = subprocess.run(
        ["sed", "-e", "s/\\$(PLACEHOLDER)/" + value + "/g"],
        input=template,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    config = configparser.ConfigParser()
    config.read_string(rendered)
    return config["mlflow"]["value"]


@pytest.mark.parametrize("password", ["plain-Password1", "a&b/c\\d#e?f%g:h$x@y", "%(x)s&&//"])
def test_passwords_survive_the_charts_auth_ini(password: str) -> None:
    admin = _through_the_charts_ini("value = $(PLACEHOLDER)", tracking.ini_safe_admin(password))
    assert admin == password
    url = _through_the_charts_ini(
        "value = postgresql://mlflow:$(PLACEHOLDER)@db:5432/mlflow", tracking.url_safe(password)
    )
    assert unquote(urlsplit(url).password or "") == password


def test_artifacts_go_to_the_bucket_prefix_under_the_stack_key_without_static_keys() -> None:
    values = tracking.mlflow_values(SPEC, AWS_STORE)
    s3 = values["artifactRoot"]["s3"]
    assert values["artifactRoot"]["proxiedArtifactStorage"] is True
    assert (s3["bucket"], s3["path"]) == (AWS_STORE.bucket, "mlflow")
    assert "awsAccessKeyId" not in s3 and "existingSecret" not in s3
    upload = json.loads(values["extraEnvVars"]["MLFLOW_S3_UPLOAD_EXTRA_ARGS"])
    assert upload == {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KEY}


CA_ITEMS = [{"key": "ca.crt", "path": "ca.crt"}]


@pytest.mark.parametrize(
    ("store", "source"),
    [
        (AWS_STORE, {"configMap": {"name": "mlflow-database-ca", "items": CA_ITEMS}}),
        # Only the certificate of CloudNativePG's CA Secret: it also holds the CA's key.
        (ONPREM_STORE, {"secret": {"secretName": "mlflow-db-ca", "items": CA_ITEMS}}),
    ],
    ids=["aws", "onprem"],
)
def test_the_server_and_its_migration_verify_the_database(
    store: tracking.StoreSettings, source: dict[str, Any]
) -> None:
    """verify-full with the database's CA, in the server container (MLflow's store and
    its auth app both connect through libpq there) and in the schema migration (the
    platform's: the chart's own gets no extra environment or mounts)."""
    values = tracking.mlflow_values(SPEC, store)
    volumes = values["extraVolumes"]
    env, mounts = values["extraEnvVars"], values["extraVolumeMounts"]
    assert verifying_ca_source(env, mounts, volumes) == (source, "ca.crt")
    assert values["backendStore"]["databaseMigration"] is False
    (migration,) = values["initContainers"]
    migration_env = {e["name"]: e.get("value") for e in migration["env"]}
    assert verifying_ca_source(migration_env, migration["volumeMounts"], volumes) == (
        source,
        "ca.crt",
    )
    # No connection the chart builds carries TLS settings that would override libpq's.
    for postgres in (values["backendStore"]["postgres"], values["auth"]["postgres"]):
        assert "ssl" not in json.dumps(postgres).lower()


def test_the_migration_is_the_charts_run_in_the_server_image_as_the_server() -> None:
    values = tracking.mlflow_values(SPEC, AWS_STORE)
    (migration,) = values["initContainers"]
    assert migration["image"] == f"{values['image']['repository']}:{values['image']['tag']}"
    assert migration["securityContext"] == values["securityContext"]
    assert migration["resources"] == values["resources"]
    command, flag, script = migration["command"]
    assert (command, flag) == ("python", "-c")
    compile(script, "migration", "exec")
    assert 'create_sqlalchemy_engine_with_retry("postgresql://")' in script
    assert "utils._initialize_tables(engine)" in script
    # Host, port and database from the chart's ConfigMap, the user from the store's Secret.
    assert migration["envFrom"] == [
        {"configMapRef": {"name": f"{values['fullnameOverride']}-env-configmap"}}
    ]
    secrets = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in migration["env"] if "valueFrom" in e
    }
    assert secrets == {
        "PGUSER": {"name": tracking.DATABASE_SECRET, "key": "username"},
        "PGPASSWORD": {"name": tracking.DATABASE_SECRET, "key": "password"},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "migration", "namespace": tracking.TRACKING_NAMESPACE},
        "spec": {"containers": [migration]},
    }
    assert schema_errors([pod], "1.33") == []


def test_on_premises_the_server_connects_to_a_name_of_the_databases_certificate() -> None:
    cluster = tracking.database_cluster(SPEC, "ceph-rbd-encrypted")
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    assert ONPREM_STORE.database_host in cloudnative_pg_server_names(name, namespace)
    assert f"{name}-ca" == tracking.DATABASE_CA_SECRET


def test_on_aws_the_database_ca_is_the_regions_rds_bundle() -> None:
    configmap = tracking.database_ca_configmap(ca_bundle("me-central-1"))
    meta = configmap["metadata"]
    assert (meta["name"], meta["namespace"]) == ("mlflow-database-ca", "mlflow")
    assert configmap["data"] == {"ca.crt": ca_bundle("me-central-1")}
    assert schema_errors([configmap], "1.33") == []
    with pytest.raises(ValueError, match="RDS CA bundle"):
        tracking.database_ca_configmap("")


def test_on_premises_artifacts_are_on_the_claimed_volume() -> None:
    values = tracking.mlflow_values(SPEC, ONPREM_STORE)
    assert "s3" not in values["artifactRoot"]
    assert values["artifactRoot"]["defaultArtifactsDestination"] == tracking.ARTIFACT_MOUNT
    volumes = {v["name"]: v for v in values["extraVolumes"]}
    assert volumes["artifacts"]["persistentVolumeClaim"]["claimName"] == tracking.ARTIFACT_CLAIM
    assert values["backendStore"]["postgres"]["host"] == "mlflow-db-rw.mlflow.svc"
    assert values["backendStore"]["existingDatabaseSecret"]["name"] == "mlflow-db-app"


# -- CloudNativePG cluster ----------------------------------------------------------


def test_the_database_cluster_passes_the_vendored_crd_strictly() -> None:
    cluster = tracking.database_cluster(SPEC, "ceph-rbd-encrypted")
    assert vendored_errors([cluster]) == []
    assert cluster["spec"]["storage"] == {"storageClass": "ceph-rbd-encrypted", "size": "20Gi"}
    assert cluster["spec"]["enableSuperuserAccess"] is False


def test_the_vendored_crd_refuses_a_misspelled_or_mistyped_field() -> None:
    cluster = tracking.database_cluster(SPEC, "ceph-rbd-encrypted")
    cluster["spec"]["storage"]["storageClas"] = "x"
    cluster["spec"]["instances"] = "two"
    errors = vendored_errors([cluster])
    assert any("storageClas" in e for e in errors), errors
    assert any("instances" in e for e in errors), errors


# -- fences -----------------------------------------------------------------------


NETWORK = ClusterNetwork(("10.20.0.10/32",), ("10.20.0.0/22",))


def _by_name(policies: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in policies}


def test_the_server_admits_only_team_namespaces_and_prometheus_on_tls() -> None:
    policies = _by_name(tracking.server_network_policies(NETWORK, "10.42.0.0/16"))
    assert is_default_deny(policies[DEFAULT_DENY])
    policy = policies["mlflow-server"]
    (rule,) = policy["spec"]["ingress"]
    team, monitoring = rule["from"]
    assert team == {
        "namespaceSelector": {
            "matchExpressions": [{"key": "gpuplatform.ae/team", "operator": "Exists"}]
        }
    }
    assert monitoring["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    # Only the TLS proxy's port: MLflow's own 5000 admits no one but the kubelet.
    assert rule["ports"] == [{"protocol": "TCP", "port": tracking.TLS_PORT}]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = {p["port"] for e in policy["spec"]["egress"] for p in e["ports"]}
    assert egress_ports == {5432, 443, 80}  # RDS, S3/STS endpoints, Pod Identity
    # DNS for every pod of the namespace, nothing else (no API server on AWS).
    assert set(policies) == {DEFAULT_DENY, "allow-dns", "mlflow-server"}


def test_on_premises_the_database_admits_only_the_server_its_peers_and_the_operator() -> None:
    policies = _by_name(tracking.server_network_policies(NETWORK, None))
    server, database = policies["mlflow-server"], policies["mlflow-database"]
    assert {p["port"] for e in server["spec"]["egress"] for p in e["ports"]} == {5432}
    peers = [peer for rule in database["spec"]["ingress"] for peer in rule["from"]]
    assert {"podSelector": {"matchLabels": tracking.SERVER_POD_LABELS}} in peers
    assert not any("ipBlock" in peer for peer in peers)
    # The instances replicate between themselves and their managers watch the API.
    (egress,) = database["spec"]["egress"]
    assert egress["to"] == [{"podSelector": {"matchLabels": {"cnpg.io/cluster": "mlflow-db"}}}]
    api = policies["mlflow-database-api-server"]
    assert api["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.20.0.10/32"}}]


def test_the_cloudnative_pg_operator_reaches_the_instances_and_serves_its_webhook() -> None:
    policies = _by_name(tracking.cnpg_network_policies(NETWORK))
    assert is_default_deny(policies[DEFAULT_DENY])
    webhook = policies["allow-webhooks"]["spec"]["ingress"][0]
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.20.0.10/32"}}]
    assert webhook["ports"] == [{"protocol": "TCP", "port": tracking.CNPG_WEBHOOK_PORT}]
    (rule,) = policies["allow-database-instances"]["spec"]["egress"]
    assert {p["port"] for p in rule["ports"]} == {tracking.CNPG_STATUS_PORT, 5432}


@pytest.mark.parametrize("on_aws", [True, False])
def test_the_fences_pass_the_strict_schema(on_aws: bool) -> None:
    objects = [
        *tracking.server_network_policies(NETWORK, "10.42.0.0/16" if on_aws else None),
        *tracking.cnpg_network_policies(NETWORK),
        tracking.team_egress_policy("nlp"),
        tracking.TRACKING_NS.manifest("1.33"),
        tracking.artifact_claim(SPEC, "cephfs-encrypted", "ReadWriteMany"),
        tracking.tls_service(),
        tracking.user_sync_configmap(),
    ]
    assert schema_errors(objects, "1.33") == []


def test_the_service_monitor_logs_in_over_tls_with_the_admin_secret() -> None:
    monitor = tracking.service_monitor(30)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "30s"
    assert endpoint["basicAuth"]["password"] == {"name": tracking.ADMIN_SECRET, "key": "password"}
    # It selects the platform's TLS Service (not the chart's plain one) by its port name,
    # and verifies the certificate with the CA its Secret carries, for the Service's name.
    service = tracking.tls_service()
    assert all(
        service["metadata"]["labels"][k] == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items()
    )
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": tracking.TLS_SECRET, "key": "ca.crt"}
    certificate = tracking.tls_certificate()
    assert endpoint["tlsConfig"]["serverName"] in certificate["spec"]["dnsNames"]
    assert crd_errors([monitor]) == []


def test_the_tls_proxy_serves_the_certificate_and_forwards_to_the_loopback_only() -> None:
    values = tracking.mlflow_values(SPEC, ONPREM_STORE)
    proxy, sync = values["extraContainers"]
    args = proxy["args"]
    assert args[0] == "server"
    assert f"--listen=0.0.0.0:{tracking.TLS_PORT}" in args
    assert f"--target=127.0.0.1:{tracking.SERVER_PORT}" in args
    assert "--disable-authentication" in args  # MLflow's basic auth authenticates
    volumes = {v["name"]: v for v in values["extraVolumes"]}
    (mount,) = proxy["volumeMounts"]
    assert volumes[mount["name"]]["secret"]["secretName"] == tracking.TLS_SECRET
    assert f"--cert={mount['mountPath']}/tls.crt" in args
    assert f"--key={mount['mountPath']}/tls.key" in args
    # The Service targets the proxy's port by name.
    service = tracking.tls_service()
    assert service["spec"]["ports"][0]["targetPort"] == proxy["ports"][0]["name"]
    assert service["spec"]["selector"] == tracking.SERVER_POD_LABELS
    assert (
        f"https://{service['metadata']['name']}.{tracking.TRACKING_NAMESPACE}.svc.cluster.local"
    ) == tracking.TRACKING_URI
    host = tracking.TRACKING_URI.split("//")[1]
    assert host in tracking.tls_certificate()["spec"]["dnsNames"]
    # The user-sync sidecar mounts the users Secret and the script, and logs in as admin.
    mounts = {m["name"]: m for m in sync["volumeMounts"]}
    assert volumes["team-users"]["secret"]["secretName"] == tracking.TEAM_USERS_SECRET
    assert volumes["user-sync-script"]["configMap"]["name"] == tracking.USER_SYNC_CONFIGMAP
    env = {e["name"]: e for e in sync["env"]}
    assert env["USERS_FILE"]["value"] == f"{mounts['team-users']['mountPath']}/users.json"
    assert env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": tracking.ADMIN_SECRET,
        "key": "password",
    }
    assert env["MLFLOW_TRACKING_URI"]["value"] == f"http://127.0.0.1:{tracking.SERVER_PORT}"


def test_team_passwords_are_distinct_stable_and_not_the_admins() -> None:
    first = team_password("correct horse battery staple", "nlp")
    assert first == team_password("correct horse battery staple", "nlp")
    assert first != team_password("correct horse battery staple", "vision")
    assert first != team_password("another admin password", "nlp")
    assert len(first) == 43 and "correct" not in first  # 256 bits, url-safe base64


def test_the_pipelines_password_is_its_own_even_for_a_team_of_that_name() -> None:
    admin = "correct horse battery staple"
    password = service_password(admin, PIPELINES_USERNAME)
    assert password == service_password(admin, PIPELINES_USERNAME)
    assert password != team_password(admin, PIPELINES_USERNAME)  # its own HMAC label
    assert password != service_password("another admin password", PIPELINES_USERNAME)
    assert len(password) == 43 and "correct" not in password


def test_the_users_file_holds_the_teams_and_the_service_users() -> None:
    users = json.loads(users_json({"nlp": "a"}, {PIPELINES_USERNAME: "b"}))
    assert users == {"team-nlp": "a", "pipelines": "b"}
    assert json.loads(users_json({"nlp": "a"})) == {"team-nlp": "a"}
    # A service user can never take a team's place in the file.
    with pytest.raises(ValueError, match="collides"):
        users_json({"nlp": "a"}, {"team-nlp": "b"})


# -- typed config and args ------------------------------------------------------------


def test_the_spec_reports_every_problem_at_once() -> None:
    with pytest.raises(InvalidArgsError) as caught:
        TrackingSpec(
            admin_username="Admin!",
            database_instance_class="db.t4g.micro",
            database_storage_gib=50,
            database_max_storage_gib=30,
            replicas=0,
        )
    fields = {p.field for p in caught.value.problems}
    assert fields == {
        "admin_username",
        "database_instance_class",
        "database_max_storage_gib",
        "replicas",
    }


def test_eks_needs_the_rds_store_and_onprem_refuses_it() -> None:
    store = TrackingStoreInputs("db", 5432, "mlflow", "mlflow", "pw", "bucket", "mlflow/", KEY)
    with pytest.raises(InvalidArgsError, match=r"tracking_inputs\.store"):
        replace(eks_args(provider=NO_PROVIDER), tracking=SPEC, tracking_inputs=TrackingInputs("pw"))
    with pytest.raises(InvalidArgsError, match="CloudNativePG"):
        replace(
            onprem_args(provider=NO_PROVIDER),
            tracking=SPEC,
            tracking_inputs=TrackingInputs("pw", store),
        )
    with pytest.raises(InvalidArgsError, match="tracking_inputs"):
        replace(eks_args(provider=NO_PROVIDER), tracking=SPEC)


def test_replicas_on_premises_need_a_shared_artifact_volume() -> None:
    base = onprem_args(provider=NO_PROVIDER)
    assert base.onprem is not None
    single = replace(
        base.onprem, checkpoint_storage_class="", checkpoint_access_mode="ReadWriteOnce"
    )
    with pytest.raises(InvalidArgsError, match="ReadWriteMany"):
        replace(
            base,
            onprem=single,
            tracking=TrackingSpec(replicas=2),
            tracking_inputs=TrackingInputs("pw"),
        )
    args = replace(
        base, onprem=single, tracking=TrackingSpec(replicas=1), tracking_inputs=TrackingInputs("pw")
    )
    assert isinstance(args, KubernetesPlatformArgs) and args.tracking_enabled


# -- the shipped stacks -----------------------------------------------------------------


def _by_type(stack: str, type_token: str) -> list[Registration]:
    registrations, _ = shipped_plan(stack)
    return [r for r in registrations.values() if r.type == type_token]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_runs_a_fenced_monitored_tracking_server(stack: str) -> None:
    releases = {r.inputs["name"]: r for r in _by_type(stack, "kubernetes:helm.sh/v3:Release")}
    release = releases["mlflow"]
    assert (release.inputs["chart"], release.inputs["version"]) == (MLFLOW.chart, MLFLOW.version)
    assert release.inputs["namespace"] == tracking.TRACKING_NAMESPACE
    assert release.inputs["values"]["auth"]["enabled"] is True
    policies = {
        (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in kubernetes_objects(stack, "NetworkPolicy")
    }
    assert ("mlflow", "mlflow-server") in policies
    teams = {p[0] for p in policies if p[0].startswith("team-")}
    assert teams and {(t, "allow-mlflow") for t in teams} <= policies
    (monitor,) = [
        m for m in kubernetes_objects(stack, "ServiceMonitor") if m["metadata"]["name"] == "mlflow"
    ]
    assert monitor["metadata"]["namespace"] == tracking.TRACKING_NAMESPACE
    (admin,) = [
        s for s in kubernetes_objects(stack, "Secret") if s["metadata"]["name"] == "mlflow-admin"
    ]
    assert admin["stringData"]["password"] == "[secret]"


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if s != "onprem-ib"])
def test_aws_stacks_keep_tracking_state_in_rds_and_the_bucket(stack: str) -> None:
    (database,) = _by_type(stack, "aws:rds/instance:Instance")
    assert database.protect
    assert database.inputs["publiclyAccessible"] is False
    assert database.inputs["storageEncrypted"] is True
    assert database.inputs["manageMasterUserPassword"] is True
    assert "password" not in database.inputs
    associations = [
        a.inputs
        for a in _by_type(stack, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if a.inputs["namespace"] == tracking.TRACKING_NAMESPACE
    ]
    assert [a["serviceAccount"] for a in associations] == [tracking.SERVICE_ACCOUNT]
    (access,) = [
        p
        for p in _by_type(stack, "aws:iam/rolePolicy:RolePolicy")
        if p.name == "tracking-artifacts-access"
    ]
    document = json.loads(access.inputs["policy"])
    objects = [s for s in document["Statement"] if s["Sid"] == "ReadWriteOwnPrefix"]
    assert objects[0]["Resource"].endswith("/mlflow/*")
    (secret,) = [
        s for s in kubernetes_objects(stack, "Secret") if s["metadata"]["name"] == "mlflow-db"
    ]
    assert secret["stringData"]["password"] == "[secret]"
    (release,) = [
        r for r in _by_type(stack, "kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "mlflow"
    ]
    assert release.inputs["values"]["backendStore"]["postgres"]["host"].endswith(
        ".me-central-1.rds.amazonaws.com"
    )


def test_the_onprem_stack_runs_postgres_by_cloudnative_pg_on_the_sites_class() -> None:
    releases = {
        r.inputs["name"]: r.inputs for r in _by_type("onprem-ib", "kubernetes:helm.sh/v3:Release")
    }
    assert releases["cloudnative-pg"]["version"] == CLOUDNATIVE_PG.version
    registrations, _ = shipped_plan("onprem-ib")
    # (The feature store's registry is a second CloudNativePG cluster, in `feast`.)
    (cluster,) = [
        r
        for r in registrations.values()
        if r.inputs.get("kind") == "Cluster"
        and r.inputs["metadata"]["name"] == tracking.DATABASE_CLUSTER
    ]
    assert cluster.protect
    assert cluster.inputs["spec"]["storage"]["storageClass"] == "ceph-rbd-encrypted"
    assert cluster.inputs["spec"]["instances"] == 3
    (claim,) = [
        r
        for r in registrations.values()
        if r.inputs.get("kind") == "PersistentVolumeClaim"
        and r.inputs["metadata"]["name"] == tracking.ARTIFACT_CLAIM
    ]
    assert claim.protect
    assert claim.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
    assert not [r for r in registrations.values() if r.type.startswith("aws:")]
    (monitor,) = [
        r.inputs
        for r in registrations.values()
        if r.inputs.get("kind") == "PodMonitor" and r.inputs["metadata"]["name"] == "mlflow-db"
    ]
    assert monitor["spec"]["selector"]["matchLabels"] == {"cnpg.io/cluster": "mlflow-db"}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_tracking_server_verifies_its_database_with_a_ca_of_the_plan(
    stack: str,
) -> None:
    """The CA the release's values mount is in the same plan: the RDS authorities of the
    stack's region, or the CA Secret of the CloudNativePG cluster the server connects to
    under one of its certificate's names."""
    values = _release_values(stack, tracking.RELEASE)
    source, key = verifying_ca_source(
        values["extraEnvVars"], values["extraVolumeMounts"], values["extraVolumes"]
    )
    if "configMap" in source:
        (configmap,) = [
            c
            for c in kubernetes_objects(stack, "ConfigMap")
            if (c["metadata"]["namespace"], c["metadata"]["name"])
            == (tracking.TRACKING_NAMESPACE, source["configMap"]["name"])
        ]
        region = parse_stack_config(load_stack_file(stack)[0]).region
        assert configmap["data"][key] == ca_bundle(region)
    else:
        (cluster,) = [
            c["metadata"]
            for c in kubernetes_objects(stack, "Cluster")
            if c["metadata"]["namespace"] == tracking.TRACKING_NAMESPACE
            and f"{c['metadata']['name']}-ca" == source["secret"]["secretName"]
        ]
        names = cloudnative_pg_server_names(cluster["name"], cluster["namespace"])
        assert values["backendStore"]["postgres"]["host"] in names


def test_a_stack_without_the_admin_password_stops_with_the_key_to_set() -> None:
    config = parse_stack_config(load_stack_file("uae-dev")[0])
    assert isinstance(config, StackConfig) and config.tracking.enabled
    with pytest.raises(ConfigError) as caught:
        _tracking_inputs(config, None, None)
    (problem,) = caught.value.problems
    assert "trackingAdminPassword" in problem and "pulumi config set --secret" in problem
    disabled = replace(config, tracking=TrackingSpec(enabled=False))
    assert _tracking_inputs(disabled, None, None) is None


# -- a cluster job reaches the tracking server: each reference followed in the plan ------


def _release_values(stack: str, name: str) -> dict[str, Any]:
    (release,) = [
        r for r in _by_type(stack, "kubernetes:helm.sh/v3:Release") if r.inputs["name"] == name
    ]
    values: dict[str, Any] = release.inputs["values"]
    return values


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _example_trainer(stack: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The example job's namespace, trainer pod and trainer container as they will run:
    a TrainJob's pods are its ClusterTrainingRuntime's ``node`` pods (the runtime the
    TrainJob names, in the same plan) with the TrainJob's environment merged over the
    runtime's; an Indexed Job's are its own."""
    jobs = [
        j
        for kind in ("TrainJob", "Job")
        for j in kubernetes_objects(stack, kind)
        if j["metadata"]["name"].startswith("example-")
    ]
    (job,) = jobs
    ns = job["metadata"]["namespace"]
    if job["kind"] == "Job":
        pod = job["spec"]["template"]["spec"]
        (trainer,) = [c for c in pod["containers"] if c["name"] == "trainer"]
        return ns, pod, trainer
    ref = job["spec"]["runtimeRef"]
    assert ref["kind"] == "ClusterTrainingRuntime"
    (runtime,) = [
        r
        for r in kubernetes_objects(stack, "ClusterTrainingRuntime")
        if r["metadata"]["name"] == ref["name"]
    ]
    (node,) = [
        j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node"
    ]
    pod = node["template"]["spec"]["template"]["spec"]
    (trainer,) = [c for c in pod["containers"] if c["name"] == "node"]
    overrides = {e["name"]: e for e in job["spec"]["trainer"].get("env", [])}
    assert not {n for n in overrides if n.startswith("MLFLOW_")}, "the runtime's, not the job's"
    env = {e["name"]: e for e in trainer["env"]} | overrides
    return ns, pod, {**trainer, "env": list(env.values())}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_example_job_reaches_the_tracking_server_it_is_given(stack: str) -> None:
    """Follow every reference of the trainer's tracking settings to the object it names
    in the same plan: a renamed Service, Secret, key, certificate or port breaks it."""
    ns, pod, trainer = _example_trainer(stack)
    env = {e["name"]: e for e in trainer["env"]}

    # The URI names the platform's TLS Service, on a port it serves.
    uri = urlsplit(env["MLFLOW_TRACKING_URI"]["value"])
    assert uri.scheme == "https"
    service_name, service_ns = uri.hostname.split(".")[:2]  # type: ignore[union-attr]
    (service,) = [
        s
        for s in kubernetes_objects(stack, "Service")
        if (s["metadata"]["name"], s["metadata"].get("namespace")) == (service_name, service_ns)
    ]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == (uri.port or 443)]
    # ...whose target is the TLS proxy's container port in the server's pods.
    values = _release_values(stack, tracking.RELEASE)
    proxy_ports = {
        p["name"]: p["containerPort"] for c in values["extraContainers"] for p in c.get("ports", [])
    }
    assert port["targetPort"] in proxy_ports
    assert _selects(service["spec"]["selector"], tracking.SERVER_POD_LABELS)
    # ...and whose certificate names the URI's host.
    (certificate,) = [
        c
        for c in kubernetes_objects(stack, "Certificate")
        if c["metadata"].get("namespace") == service_ns
        and c["spec"]["secretName"] == tracking.TLS_SECRET
    ]
    assert uri.hostname in certificate["spec"]["dnsNames"]

    # The login is MLflow's credentials file, from the team's Secret of the job's
    # namespace (its key in the Secret; its contents are tested with a real server in
    # tests/workloads/test_tracking_users.py).
    secrets = {
        s["metadata"]["name"]: s
        for s in kubernetes_objects(stack, "Secret")
        if s["metadata"]["namespace"] == ns
    }
    assert not {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} & set(env)
    (login,) = [m for m in trainer["volumeMounts"] if m["mountPath"] == TRACKING_CREDENTIALS_DIR]
    (login_volume,) = [v for v in pod["volumes"] if v["name"] == login["name"]]
    login_secret = secrets[login_volume["secret"]["secretName"]]
    for item in login_volume["secret"]["items"]:
        assert item["key"] in login_secret["stringData"], item
    team = ns.removeprefix("team-")
    assert login_secret["stringData"]["username"] == team_username(team)

    # The CA file is the ca.crt of a certificate issued in the job's namespace.
    ca_path = env["MLFLOW_TRACKING_SERVER_CERT_PATH"]["value"]
    mounts = {m["name"]: m for m in trainer["volumeMounts"]}
    (volume,) = [
        v
        for v in pod["volumes"]
        if v["name"] in mounts and ca_path.startswith(mounts[v["name"]]["mountPath"] + "/")
    ]
    bundles = [
        c
        for c in kubernetes_objects(stack, "Certificate")
        if c["metadata"].get("namespace") == ns
        and c["spec"]["secretName"] == volume["secret"]["secretName"]
    ]
    assert bundles and bundles[0]["spec"]["issuerRef"] == certificate["spec"]["issuerRef"]
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": ca_path.rsplit("/", 1)[1]}]

    # The job's namespace lets its pods reach exactly the server pods on the proxy port.
    reach = [
        rule
        for p in kubernetes_objects(stack, "NetworkPolicy")
        if p["metadata"]["namespace"] == ns
        for rule in p["spec"].get("egress", [])
        for peer in rule.get("to", [])
        if peer.get("namespaceSelector", {}).get("matchLabels")
        == {"kubernetes.io/metadata.name": service_ns}
    ]
    (rule,) = reach
    (peer,) = rule["to"]
    assert _selects(peer["podSelector"]["matchLabels"], service["spec"]["selector"])
    assert [p["port"] for p in rule["ports"]] == [proxy_ports[port["targetPort"]]]
    # ...and the server's own fence admits the team namespace on that port.
    (server,) = [
        p
        for p in kubernetes_objects(stack, "NetworkPolicy")
        if (p["metadata"]["namespace"], p["metadata"]["name"]) == (service_ns, "mlflow-server")
    ]
    (ingress,) = server["spec"]["ingress"]
    assert [p["port"] for p in ingress["ports"]] == [proxy_ports[port["targetPort"]]]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_team_user_is_one_the_server_syncs(stack: str) -> None:
    """The users Secret the server's sidecar reads holds each team's user; each team
    namespace holds that user's credentials."""
    (users,) = [
        s
        for s in kubernetes_objects(stack, "Secret")
        if s["metadata"]["name"] == tracking.TEAM_USERS_SECRET
    ]
    assert users["metadata"]["namespace"] == tracking.TRACKING_NAMESPACE
    assert users["stringData"][tracking.USERS_FILE] == "[secret]"
    config = parse_stack_config(load_stack_file(stack)[0])
    credentials = {
        s["metadata"]["namespace"]: s["stringData"]
        for s in kubernetes_objects(stack, "Secret")
        if s["metadata"]["name"] == tracking.TEAM_CREDENTIALS_SECRET
    }
    # Each team namespace, and where KFP runs its namespace (the runs' own user).
    kubeflow = {"kubeflow": PIPELINES_USERNAME} if config.pipelines.enabled else {}
    assert set(credentials) == {f"team-{t.name}" for t in config.teams} | set(kubeflow)
    for team in config.teams:
        data = credentials[f"team-{team.name}"]
        # The login twice: as keys, and as MLflow's credentials file (the training pods').
        assert data == {
            "username": team_username(team.name),
            "password": "[secret]",
            "credentials": "[secret]",
        }
    for ns, user in kubeflow.items():
        assert credentials[ns] == {"username": user, "password": "[secret]"}
    values = _release_values(stack, tracking.RELEASE)
    volumes = {v["name"]: v for v in values["extraVolumes"]}
    assert volumes["team-users"]["secret"]["secretName"] == tracking.TEAM_USERS_SECRET
    (script,) = [
        c
        for c in kubernetes_objects(stack, "ConfigMap")
        if c["metadata"]["name"] == tracking.USER_SYNC_CONFIGMAP
    ]
    assert volumes["user-sync-script"]["configMap"]["name"] == script["metadata"]["name"]
    assert set(script["data"]) == {tracking.SYNC_SCRIPT.name}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_users_file_holds_the_pipelines_user_iff_pipelines_are_enabled(stack: str) -> None:
    """The user names the tracking component read back from the users file it wrote
    (its ``users`` output): every team's, and ``pipelines`` where KFP runs."""
    config = parse_stack_config(load_stack_file(stack)[0])
    assert isinstance(config, StackConfig)
    (component,) = _by_type(stack, "gpuplatform:k8s:Tracking")
    expected = {team_username(t.name) for t in config.teams}
    if config.pipelines.enabled:
        expected.add(PIPELINES_USERNAME)
    assert sorted(component.component_outputs["users"]) == sorted(expected)


def test_on_premises_the_pipelines_password_is_derived_from_the_admins(
    run_under_mocks: Any,
) -> None:
    config = parse_stack_config(load_stack_file("onprem-ib")[0])
    assert isinstance(config, StackConfig) and config.pipelines.enabled
    # (Its database backups' key pair is secret config, not the question here.)
    unbacked = replace(config, tracking=replace(config.tracking, database_backup=None))
    seen: dict[str, str] = {}

    def program() -> None:
        inputs = _tracking_inputs(unbacked, None, "an admin password")
        assert inputs is not None
        assert set(inputs.service_passwords) == {PIPELINES_USERNAME}
        pulumi.Output.from_input(inputs.service_passwords[PIPELINES_USERNAME]).apply(
            lambda value: seen.setdefault("pipelines", value)
        )
        without = replace(unbacked, pipelines=replace(config.pipelines, enabled=False))
        off = _tracking_inputs(without, None, "an admin password")
        assert off is not None and dict(off.service_passwords) == {}

    run_under_mocks(program)
    assert seen == {"pipelines": service_password("an admin password", PIPELINES_USERNAME)}


@pytest.mark.parametrize("stack", [s for s in SHIPPED_STACKS if s != "onprem-ib"])
def test_aws_team_credentials_are_secrets_manager_secrets_under_the_stack_key(stack: str) -> None:
    config = parse_stack_config(load_stack_file(stack)[0])
    secrets = {
        s.inputs["name"]: s.inputs for s in _by_type(stack, "aws:secretsmanager/secret:Secret")
    }
    for team in config.teams:
        secret = secrets[f"gpu-{stack}/mlflow/team-{team.name}"]
        assert secret["kmsKeyId"].startswith("arn:aws:kms:me-central-1:")
        assert "replicas" not in secret  # in the region only
    (key,) = [
        k.inputs["targetKeyId"]
        for k in _by_type(stack, "aws:kms/alias:Alias")
        if k.inputs["name"].endswith("-secrets")
    ]
    assert key  # the stack's secrets key exists; the CMK rule checks which key is used
    services = [PIPELINES_USERNAME] if config.pipelines.enabled else []
    for user in services:
        # The pipelines runs' user is kept the same way, under its own name.
        secret = secrets[f"gpu-{stack}/mlflow/{user}"]
        assert secret["kmsKeyId"].startswith("arn:aws:kms:me-central-1:")
        assert "replicas" not in secret
    assert {n for n in secrets if "/mlflow/" in n} == {
        *(f"gpu-{stack}/mlflow/team-{t.name}" for t in config.teams),
        *(f"gpu-{stack}/mlflow/{u}" for u in services),
    }
    versions = _by_type(stack, "aws:secretsmanager/secretVersion:SecretVersion")
    assert len(versions) == len(config.teams) + len(services)


def _chart_images(values: Any) -> list[tuple[str, str | None]]:
    """(image, pull policy) of every image the release's values name: the chart's
    ``{repository, tag, pullPolicy}`` maps and the containers' ``image`` strings."""
    found: list[tuple[str, str | None]] = []
    if isinstance(values, dict):
        if isinstance(values.get("repository"), str):
            found.append((f"{values['repository']}:{values['tag']}", values.get("pullPolicy")))
        if isinstance(values.get("image"), str):
            found.append((values["image"], values.get("imagePullPolicy")))
        for value in values.values():
            found += _chart_images(value)
    elif isinstance(values, list):
        for value in values:
            found += _chart_images(value)
    return found


@pytest.mark.parametrize("store", [AWS_STORE, ONPREM_STORE], ids=["aws", "onprem"])
def test_every_tracking_image_comes_from_the_mirror_and_is_pulled_at_each_start(
    store: tracking.StoreSettings,
) -> None:
    values = tracking.mlflow_values(SPEC, store)
    found = _chart_images(values)
    # The server, its migration, the chart's two busybox init containers, the TLS proxy
    # and the user sync: none from Docker Hub, each pulled at every start.
    wanted = {
        f"{REGISTRY}/{name}:{tag}"
        for name, (_, tag) in tracking.MIRRORED_IMAGES.items()
        if name not in (tracking.DATABASE_IMAGE, tracking.DATABASE_OPERATOR_IMAGE)
    }
    assert {image for image, _ in found} == wanted
    assert {policy for _, policy in found} == {"Always"}
    for key in ("dbchecker", "mlflowDbMigration", "iniFileInitializer"):
        assert values["initImages"][key]["repository"].startswith(f"{REGISTRY}/tracking/")
    cluster = tracking.database_cluster(SPEC, "ceph")
    assert cluster["spec"]["imageName"] == f"{REGISTRY}/tracking/postgresql:17.6"


def test_the_tracking_images_need_a_resolved_registry() -> None:
    with pytest.raises(ValueError, match=r"tracking\.registry is unresolved"):
        tracking.mlflow_values(TrackingSpec(), AWS_STORE)


def test_aws_mirrors_only_the_images_it_runs() -> None:
    assert tracking.DATABASE_IMAGE not in tracking.mirrored_repositories(on_aws=True)
    assert tracking.DATABASE_OPERATOR_IMAGE not in tracking.mirrored_repositories(on_aws=True)
    operator = tracking.cloudnative_pg_values(SPEC)["image"]
    assert operator == {
        "repository": f"{REGISTRY}/tracking/cloudnative-pg",
        "tag": "1.30.0",
        "pullPolicy": "Always",
    }
    assert set(tracking.mirrored_repositories(on_aws=False)) == set(tracking.MIRRORED_IMAGES)
