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
import pytest
import yaml

from modules.k8s.platform.spec import KubernetesPlatformArgs
from modules.k8s.site.onprem import OnPremSpec
from modules.k8s.tracking import manifests as tracking
from modules.k8s.tracking.spec import TrackingInputs, TrackingSpec, TrackingStoreInputs
from modules.k8s.versions import CLOUDNATIVE_PG, MLFLOW
from modules.validation import InvalidArgsError
from stacks.config import StackConfig, parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.kubernetes_layer import _tracking_inputs
from stacks.offline_plan import load_stack_file
from stacks.offline_runtime import Registration
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.fixtures import NO_PROVIDER, eks_args, onprem_args
from tests.k8s.vendored_crds import vendored_errors
from tests.support.k8s_schema import schema_errors

VENDOR = Path(__file__).resolve().parent / "vendor"
SPEC = TrackingSpec()
KEY = "arn:aws:kms:me-central-1:123456789012:key/0b6c2b3e-1111-2222-3333-444455556666"
AWS_STORE = tracking.StoreSettings(
    database_host="db.example.me-central-1.rds.amazonaws.com",
    database_secret=tracking.DATABASE_SECRET,
    auth_database_secret=tracking.AUTH_DATABASE_SECRET,
    bucket="gpu-test-data-123456789012",
    artifact_prefix="mlflow",
    kms_key_arn=KEY,
    region="me-central-1",
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
    assert chart_errors(tracking.cloudnative_pg_values(), "cloudnative-pg") == []


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
    assert values["extraEnvVars"]["PGSSLMODE"] == "require"


def test_on_premises_artifacts_are_on_the_claimed_volume() -> None:
    values = tracking.mlflow_values(SPEC, ONPREM_STORE)
    assert "s3" not in values["artifactRoot"]
    assert values["artifactRoot"]["defaultArtifactsDestination"] == tracking.ARTIFACT_MOUNT
    (volume,) = values["extraVolumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == tracking.ARTIFACT_CLAIM
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


def test_the_server_admits_only_team_namespaces_and_prometheus() -> None:
    (policy,) = tracking.server_network_policies("10.42.0.0/16")
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
    assert rule["ports"] == [{"protocol": "TCP", "port": tracking.SERVER_PORT}]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress_ports = {p["port"] for e in policy["spec"]["egress"] for p in e["ports"]}
    assert egress_ports == {53, 5432, 443, 80}  # DNS, RDS, S3/STS endpoints, Pod Identity


def test_on_premises_the_database_admits_only_the_server_its_peers_and_the_operator() -> None:
    server, database = tracking.server_network_policies(None)
    assert {p["port"] for e in server["spec"]["egress"] for p in e["ports"]} == {53, 5432}
    peers = [peer for rule in database["spec"]["ingress"] for peer in rule["from"]]
    assert {"podSelector": {"matchLabels": tracking.SERVER_POD_LABELS}} in peers
    assert not any("ipBlock" in peer for peer in peers)


@pytest.mark.parametrize("on_aws", [True, False])
def test_the_fences_pass_the_strict_schema(on_aws: bool) -> None:
    objects = [
        *tracking.server_network_policies("10.42.0.0/16" if on_aws else None),
        tracking.team_egress_policy("nlp"),
        tracking.tracking_namespace("1.33"),
        tracking.artifact_claim(SPEC, "cephfs-encrypted", "ReadWriteMany"),
    ]
    assert schema_errors(objects, "1.33") == []


def test_the_service_monitor_logs_in_with_the_admin_secret() -> None:
    monitor = tracking.service_monitor(30)
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "30s"
    assert endpoint["basicAuth"]["password"] == {"name": tracking.ADMIN_SECRET, "key": "password"}
    assert monitor["spec"]["selector"]["matchLabels"] == tracking.SERVER_POD_LABELS


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
    single = OnPremSpec(storage_class="local-encrypted", checkpoint_access_mode="ReadWriteOnce")
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


def _objects(stack: str, kind: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [
        r.inputs
        for r in registrations.values()
        if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind
    ]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_shipped_stack_runs_a_fenced_monitored_tracking_server(stack: str) -> None:
    releases = {r.inputs["name"]: r for r in _by_type(stack, "kubernetes:helm.sh/v3:Release")}
    release = releases["mlflow"]
    assert (release.inputs["chart"], release.inputs["version"]) == (MLFLOW.chart, MLFLOW.version)
    assert release.inputs["namespace"] == tracking.TRACKING_NAMESPACE
    assert release.inputs["values"]["auth"]["enabled"] is True
    policies = {
        (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in _objects(stack, "NetworkPolicy")
    }
    assert ("mlflow", "mlflow-server") in policies
    teams = {p[0] for p in policies if p[0].startswith("team-")}
    assert teams and {(t, "allow-mlflow") for t in teams} <= policies
    (monitor,) = [m for m in _objects(stack, "ServiceMonitor") if m["metadata"]["name"] == "mlflow"]
    assert monitor["metadata"]["namespace"] == tracking.TRACKING_NAMESPACE
    (admin,) = [s for s in _objects(stack, "Secret") if s["metadata"]["name"] == "mlflow-admin"]
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
    (secret,) = [s for s in _objects(stack, "Secret") if s["metadata"]["name"] == "mlflow-db"]
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


def test_a_stack_without_the_admin_password_stops_with_the_key_to_set() -> None:
    config = parse_stack_config(load_stack_file("uae-dev")[0])
    assert isinstance(config, StackConfig) and config.tracking.enabled
    with pytest.raises(ConfigError) as caught:
        _tracking_inputs(config, None, None)
    (problem,) = caught.value.problems
    assert "trackingAdminPassword" in problem and "pulumi config set --secret" in problem
    disabled = replace(config, tracking=TrackingSpec(enabled=False))
    assert _tracking_inputs(disabled, None, None) is None
