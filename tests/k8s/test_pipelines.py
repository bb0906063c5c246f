"""Kubeflow Pipelines on the cluster: the vendored upstream manifests, the render of the
platform's patches over them (what it keeps, and that it is what the patches give), the
placed objects (images, state, secrets, fences, identities), the loop (pipeline,
publisher, trigger, Alertmanager route), the shipped plans' objects against the
Kubernetes schemas and the vendored CRDs, and the AWS roles' least privilege."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import pytest
import yaml

from modules.aws.database import ca_bundle
from modules.aws.pipelines_access import prefixes_access
from modules.k8s.monitoring.spec import (
    ALERT_ROUTING_LABEL,
    ALERT_ROUTING_VALUE,
    MonitoringSpec,
    kube_prometheus_stack_values,
)
from modules.k8s.names import MONITORING_NAMESPACE
from modules.k8s.netpol import DEFAULT_DENY
from modules.k8s.pipelines import loop
from modules.k8s.pipelines import manifests as kfp
from modules.k8s.pipelines import spec as ps
from modules.k8s.pipelines.component import KubeflowPipelines, PipelinesArgs
from modules.k8s.pki.spec import CA_BUNDLE_SECRET, CA_KEY, CLUSTER_CA_ISSUER
from modules.k8s.serving.observability import serving_alert_rules
from modules.k8s.serving.spec import ServingSpec
from modules.k8s.tracking.manifests import (
    DATABASE_CA_CONFIGMAP,
    SERVER_POD_LABELS,
    SERVER_PORT,
    TEAM_CREDENTIALS_SECRET,
    TLS_PORT,
    TRACKING_NAMESPACE,
    TRACKING_URI,
)
from modules.k8s.tracking.users import PIPELINES_USERNAME
from modules.validation import InvalidArgsError
from stacks.config import PROJECT, parse_stack_config
from stacks.config_parsing import ConfigError
from stacks.offline_plan import load_stack_file
from stacks.offline_runtime import Registration
from stacks.pipelines_layer import ROLES, pipeline_for
from tests.conftest import shipped_plan
from tests.k8s.database_tls import verifying_ca_source
from tests.k8s.vendored_crds import is_vendored, vendored_errors
from tests.support.k8s_schema import is_builtin, schema_errors
from tools import vendor_kfp

ROOT = Path(__file__).resolve().parents[2]
VENDOR = Path(__file__).resolve().parent / "vendor"
IR_FILES = sorted((VENDOR / "kubeflow-pipelines").glob("ir-*.yaml"))
IR = VENDOR / "kubeflow-pipelines" / "ir-lightweight_python_functions_with_outputs.yaml"
#: Where the publisher and the trigger mount the pipeline's ConfigMap (loop.yaml).
PIPELINE_MOUNT = "/etc/pipeline"
REGISTRY = "123456789012.dkr.ecr.me-central-1.amazonaws.com/gpu-test"
RDS = "gpu-test-mlflow.c0ffee.me-central-1.rds.amazonaws.com"
ROOT_URI = "s3://gpu-test-data/pipelines/runs"
SPEC = ps.PipelinesSpec(enabled=True)
AWS = ps.PipelinesPlacement(
    on_aws=True,
    registry=REGISTRY,
    node_selector={"gpuplatform.ae/role": "system"},
    region="me-central-1",
    bucket="gpu-test-data",
    storage_key_arn="arn:aws:kms:me-central-1:123456789012:key/k",
    database_host=RDS,
    vpc_cidr="10.42.0.0/16",
    database_ca=ca_bundle("me-central-1"),
)
STORE = ps.ObjectStoreSpec(
    endpoint="objects.dc1.internal:443", bucket="ml-pipelines", cidrs=("10.20.40.0/24",)
)
ONPREM_SPEC = ps.PipelinesSpec(
    enabled=True, registry=REGISTRY, api_server_cidrs=("10.20.0.10/32",), object_store=STORE
)
ONPREM = ps.PipelinesPlacement(
    on_aws=False,
    registry=REGISTRY,
    node_selector={"gpuplatform.ae/role": "system"},
    bucket="ml-pipelines",
    storage_class="ceph-rbd-encrypted",
)
COMPONENT = "gpuplatform:k8s:KubeflowPipelines"
PIPELINE_STACKS = ("uae-prod", "onprem-ib")
#: Upstream's kustomize manifests, as vendored.
KUSTOMIZE = kfp.UPSTREAM_DIR / "kubeflow-pipelines" / "manifests" / "kustomize"
#: The Deployments that reach the database, each through its own PgBouncer sidecar.
DATABASE_CLIENTS = ("ml-pipeline", "metadata-grpc-deployment")
#: The Deployments that call the Kubernetes API (they keep a service account token).
API_CLIENTS = (
    "ml-pipeline",
    "ml-pipeline-persistenceagent",
    "ml-pipeline-scheduledworkflow",
    "ml-pipeline-ui",
    "workflow-controller",
)


def installed(
    spec: ps.PipelinesSpec = SPEC, placement: ps.PipelinesPlacement = AWS
) -> list[dict[str, Any]]:
    return kfp.install_objects(spec, placement, "1.33", ROOT_URI)


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pods(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o["kind"] == "Deployment" or o["kind"] == "Job":
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def upstream_file(path: str) -> dict[str, Any]:
    """One of upstream's kustomize files, as vendored (unpatched)."""
    return yaml.safe_load((KUSTOMIZE / path).read_text())  # type: ignore[no-any-return]


# -- the vendored manifests and the render ----------------------------------------------


def test_the_vendored_files_are_the_ones_the_readme_names() -> None:
    sums = (kfp.UPSTREAM_DIR / "SHA256SUMS").read_text().splitlines()
    assert sums == [f"{d}  {p}" for p, d in vendor_kfp.digests().items()]
    assert len(sums) > 100
    assert kfp.APISERVER_CONFIG_FILE.is_file()
    readme = (kfp.UPSTREAM_DIR / "README.md").read_text()
    for tag, commit in (
        (vendor_kfp.KFP_TAG, vendor_kfp.KFP_COMMIT),
        (vendor_kfp.ARGO_TAG, vendor_kfp.ARGO_COMMIT),
    ):
        assert f"tag `{tag}`, commit `{commit}`" in readme
    assert (vendor_kfp.KFP_TAG, vendor_kfp.ARGO_TAG) == (ps.KFP_VERSION, ps.ARGO_VERSION)
    assert kfp.RENDER_FILE.read_text().startswith(vendor_kfp.HEADER)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl (kustomize renders)")
def test_the_render_is_what_upstream_and_the_patches_give() -> None:
    """``kubectl kustomize`` again, over the vendored files: the committed render is its
    output, and every upstream object is kept or left out (`vendor_kfp.review`)."""
    assert vendor_kfp.render() == kfp.RENDER_FILE.read_text()
    assert vendor_kfp.main(["--check"]) == 0


def test_the_render_holds_what_was_kept_and_nothing_else() -> None:
    keys = [kfp.key(o) for o in kfp.rendered()]
    assert len(keys) == len(set(keys))
    assert set(keys) == vendor_kfp.KEPT
    assert vendor_kfp.review(keys, keys) == []


def test_an_undecided_or_missing_upstream_object_stops_the_render() -> None:
    keys = sorted(vendor_kfp.KEPT)
    new = ("ConfigMap", "new-in-2.18")
    (problem,) = vendor_kfp.review([*keys, new], [*keys, new])
    assert problem.startswith("ConfigMap/new-in-2.18: upstream object neither kept nor left out")
    assert vendor_kfp.review([*keys, new], keys) == []  # left out by a delete patch
    (problem,) = vendor_kfp.review(keys, [*keys, new])
    assert "not an upstream object" in problem
    (problem,) = vendor_kfp.review(keys, keys[1:])
    assert "kept, but not in the render" in problem


def test_every_object_left_out_is_left_out_for_a_reason() -> None:
    """Each delete patch of the kustomization has its reason written above it."""
    lines = (kfp.HERE / "kustomize" / "kustomization.yaml").read_text().splitlines()
    deletes = [i for i, line in enumerate(lines) if line.startswith("- target:")]
    assert len(deletes) >= 10
    for i in deletes:
        patch = lines[i + 3].strip()
        assert patch.startswith("patch:") and "delete" in patch, lines[i : i + 4]
        assert lines[i - 1].startswith("# ") or lines[i - 1].startswith("  patch:"), lines[i]
    reasons = [i for i in deletes if lines[i - 1].startswith("# ")]
    assert len(reasons) >= 8


def test_the_install_is_what_was_kept_plus_the_platforms_namespace() -> None:
    objects = installed()
    keys = [kfp.key(o) for o in objects]
    assert keys[0] == ("Namespace", ps.NAMESPACE)
    assert set(keys[1:]) == set(vendor_kfp.KEPT)


def test_no_bundled_store_no_bundled_database_no_example_secret() -> None:
    text = json.dumps(installed())
    for example in ("minio123", "seaweedfs", "postgres-service", 'metadata-postgres-db"'):
        assert example not in text
    assert "mlpipeline-minio-artifact" not in kfp.RENDER_FILE.read_text()
    assert not [o for o in installed() if o["kind"] in ("Secret", "PersistentVolumeClaim")]


# -- images ------------------------------------------------------------------------------


def rendered_images() -> set[str]:
    """Every image reference of the render: containers, the Argo executor's argument,
    the driver's and launcher's (upstream's tags, and those the patches add)."""
    found = set()
    for o in kfp.rendered():
        if o["kind"] == "Deployment":
            for c in containers(o["spec"]["template"]["spec"]):
                found.add(c["image"])
                found |= {a for a in c.get("args", []) if a.startswith("quay.io/argoproj/")}
                found |= {v for k, v in env(c).items() if k.endswith("_IMAGE")}
    return found


def test_every_image_is_a_mirror_of_upstreams_with_the_same_tag() -> None:
    sources = {f"{source}:{tag}" for source, tag in ps.MIRRORED_IMAGES.values()}
    assert rendered_images() <= sources
    assert {"ghcr.io/kubeflow/kfp-driver:2.17.0", "quay.io/argoproj/argoexec:v4.0.5"} <= (
        rendered_images()
    )
    mirrors = {f"{REGISTRY}/{ps.MIRROR_PATH}/{n}": t for n, (_, t) in ps.MIRRORED_IMAGES.items()}
    for _, pod in pods(installed()):
        for c in containers(pod):
            repository, _, tag = c["image"].rpartition(":")
            assert mirrors.get(repository) == tag, c["image"]
    assert not {i for i in rendered_images() if i in json.dumps(installed())}


def test_the_runs_driver_launcher_and_executor_are_pinned_mirrors() -> None:
    objects = installed()
    server = find(objects, "Deployment", "ml-pipeline")["spec"]["template"]["spec"]
    (api,) = [c for c in server["containers"] if c["name"] == "ml-pipeline-api-server"]
    assert env(api)["V2_DRIVER_IMAGE"] == AWS.image("kfp-driver")
    assert env(api)["V2_LAUNCHER_IMAGE"] == AWS.image("kfp-launcher")
    assert AWS.image("kfp-driver").endswith(f":{ps.KFP_VERSION}")
    controller = find(objects, "Deployment", "workflow-controller")["spec"]["template"]["spec"]
    args = controller["containers"][0]["args"]
    assert args[args.index("--executor-image") + 1] == AWS.image("argoexec")


def test_every_env_the_platform_sets_on_the_api_server_is_one_upstream_reads() -> None:
    upstream: set[str] = set()
    for path in (
        "base/pipeline/ml-pipeline-apiserver-deployment.yaml",
        "base/postgresql/pipeline/ml-pipeline-apiserver-deployment-patch.yaml",
        "env/cert-manager/platform-agnostic-standalone-tls/patches/"
        "ml-pipeline-apiserver-deployment.yaml",
    ):
        pod = upstream_file(path)["spec"]["template"]["spec"]
        upstream |= {e.get("name") for c in pod["containers"] for e in c.get("env", [])}
    # Read through viper from ObjectStoreConfig.* (client_manager.go buildConfigFromEnvVars).
    upstream |= {"OBJECTSTORECONFIG_REGION", "OBJECTSTORECONFIG_PIPELINEPATH"}
    for placement, spec in ((AWS, SPEC), (ONPREM, ONPREM_SPEC)):
        pod = find(installed(spec, placement), "Deployment", "ml-pipeline")["spec"]["template"][
            "spec"
        ]
        (api,) = [c for c in pod["containers"] if c["name"] == "ml-pipeline-api-server"]
        assert set(env(api)) - upstream == set()


# -- the API server's configuration and object store ----------------------------------


def test_the_api_server_config_drops_the_example_keys_and_the_mlflow_plugin() -> None:
    upstream = json.loads(kfp.APISERVER_CONFIG_FILE.read_text())
    assert upstream["ObjectStoreConfig"]["AccessKey"] == "minio"  # what is taken out
    config = kfp.apiserver_config()
    assert "AccessKey" not in config["ObjectStoreConfig"]
    assert "SecretAccessKey" not in config["ObjectStoreConfig"]
    assert "plugins" not in config
    assert config["ObjectStoreConfig"]["PipelinePath"] == "pipelines/specs"
    assert (upstream["DBDriverName"], config["DBDriverName"]) == ("mysql", "pgx")
    # Everything else is upstream's.
    rest = {
        k: v
        for k, v in upstream.items()
        if k not in ("plugins", "ObjectStoreConfig", "DBDriverName")
    }
    assert {k: config[k] for k in rest} == rest
    mounted = json.loads(kfp.apiserver_configmap()["data"]["config.json"])
    assert mounted == config


def test_the_api_server_reads_the_bucket_over_tls_with_pod_identity_on_aws() -> None:
    pod = find(installed(), "Deployment", "ml-pipeline")["spec"]["template"]["spec"]
    (api,) = [c for c in pod["containers"] if c["name"] == "ml-pipeline-api-server"]
    values = env(api)
    assert values["OBJECTSTORECONFIG_HOST"] == "s3.me-central-1.amazonaws.com"
    assert values["OBJECTSTORECONFIG_SECURE"] == "true"
    assert values["OBJECTSTORECONFIG_BUCKETNAME"] == "gpu-test-data"
    # Empty, not absent: the config file's example keys would apply otherwise.
    assert values["OBJECTSTORECONFIG_ACCESSKEY"] == ""
    assert values["OBJECTSTORECONFIG_SECRETACCESSKEY"] == ""
    assert {"name": "config", "mountPath": "/config/config.json", "subPath": "config.json"} in api[
        "volumeMounts"
    ]


def test_on_premises_the_site_store_and_its_key_pair_from_a_secret() -> None:
    objects = installed(ONPREM_SPEC, ONPREM)
    pod = find(objects, "Deployment", "ml-pipeline")["spec"]["template"]["spec"]
    (api,) = [c for c in pod["containers"] if c["name"] == "ml-pipeline-api-server"]
    values = env(api)
    assert (values["OBJECTSTORECONFIG_HOST"], values["OBJECTSTORECONFIG_PORT"]) == (
        "objects.dc1.internal",
        "443",
    )
    assert values["OBJECTSTORECONFIG_ACCESSKEY"] == {
        "secretKeyRef": {"name": kfp.OBJECT_STORE_SECRET, "key": "accesskey"}
    }
    ui = find(objects, "Deployment", "ml-pipeline-ui")["spec"]["template"]["spec"]["containers"][0]
    assert env(ui)["AWS_S3_ENDPOINT"] == "objects.dc1.internal:443"
    assert not [name for name in env(ui) if name.startswith("MINIO_")]


@pytest.mark.parametrize(
    ("spec", "placement"), [(SPEC, AWS), (ONPREM_SPEC, ONPREM)], ids=["aws", "onprem"]
)
def test_the_launcher_writes_the_pipeline_root_over_tls(
    spec: ps.PipelinesSpec, placement: ps.PipelinesPlacement
) -> None:
    launcher = find(installed(spec, placement), "ConfigMap", "kfp-launcher")
    assert launcher["data"]["defaultPipelineRoot"] == ROOT_URI
    providers = yaml.safe_load(launcher["data"]["providers"])
    assert set(providers) == {"s3"}
    default = providers["s3"]["default"]
    assert default["disableSSL"] is False
    if placement.on_aws:
        assert default["endpoint"] == "s3.me-central-1.amazonaws.com"
        assert default["credentials"] == {"fromEnv": True}
    else:
        assert default["endpoint"] == STORE.endpoint
        assert default["credentials"]["secretRef"]["secretName"] == kfp.OBJECT_STORE_SECRET


def test_the_launcher_config_keys_are_the_ones_kfp_reads() -> None:
    # backend/src/v2/config/env.go: defaultPipelineRoot, providers; s3.go's field names.
    launcher = find(installed(), "ConfigMap", "kfp-launcher")
    assert set(launcher["data"]) == {"defaultPipelineRoot", "providers"}
    default = yaml.safe_load(launcher["data"]["providers"])["s3"]["default"]
    assert set(default) <= {
        "endpoint",
        "credentials",
        "region",
        "disableSSL",
        "forcePathStyle",
        "maxRetries",
    }


def test_v1_is_blocked_and_the_install_config_names_the_proxy_and_databases() -> None:
    data = find(installed(), "ConfigMap", "pipeline-install-config")["data"]
    assert data["dbType"] == "postgres"
    assert (data["postgresHost"], data["postgresPort"]) == ("127.0.0.1", "5432")
    assert (data["pipelineDb"], data["mlmdDb"]) == ("mlpipeline", "metadb")
    assert data["BLOCK_V1_PIPELINES"] == "true"
    assert data["bucketName"] == "gpu-test-data" and data["defaultPipelineRoot"] == ROOT_URI
    assert (
        "artifactRepository"
        not in find(installed(), "ConfigMap", "workflow-controller-configmap")["data"]
    )


def test_the_install_config_keys_are_upstreams() -> None:
    upstream = upstream_file("base/installs/generic/postgres/pipeline-install-config.yaml")["data"]
    ours = find(installed(), "ConfigMap", "pipeline-install-config")["data"]
    assert set(ours) <= set(upstream)
    assert set(upstream) - set(ours) == {"cacheDb"}  # the cache webhook is left out


# -- the database --------------------------------------------------------------------------


@pytest.mark.parametrize("name", DATABASE_CLIENTS)
def test_database_clients_reach_the_server_through_their_own_tls_proxy(name: str) -> None:
    pod = find(installed(), "Deployment", name)["spec"]["template"]["spec"]
    proxy = pod["initContainers"][0]
    assert proxy["name"] == "database-proxy" and proxy["restartPolicy"] == "Always"
    assert proxy["image"] == AWS.image("pgbouncer")
    assert proxy["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"] for v in pod["volumes"]}
    assert {m["name"] for m in proxy["volumeMounts"]} <= volumes


def test_ml_metadata_connects_to_its_sidecar() -> None:
    pod = find(installed(), "Deployment", "metadata-grpc-deployment")["spec"]["template"]["spec"]
    # Its config file's connection (test_pipelines_tls parses what the command writes).
    assert 'host: "127.0.0.1"' in pod["containers"][0]["command"][2]
    (wait,) = [c for c in pod["initContainers"] if c["name"] == "wait-for-database"]
    assert env(wait) == {"WAIT_HOST": "127.0.0.1", "WAIT_PORT": "5432"}


def test_the_proxy_speaks_tls_to_the_server_and_listens_on_loopback_only() -> None:
    ini = kfp.proxy_ini(RDS)
    assert f"* = host={RDS} port=5432" in ini
    for line in (
        "listen_addr = 127.0.0.1",
        # The server's certificate and name are verified, with the mounted CA.
        "server_tls_sslmode = verify-full",
        "server_tls_ca_file = /etc/pgbouncer/ca/ca.crt",
        "auth_type = scram-sha-256",
        "pool_mode = session",
    ):
        assert line in ini.splitlines()
    assert "password" not in ini


@pytest.mark.parametrize(
    ("spec", "placement", "source"),
    [
        (SPEC, AWS, {"configMap": {"name": "kfp-database-ca"}}),
        (
            ONPREM_SPEC,
            ONPREM,
            {"secret": {"secretName": "kfp-db-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ),
    ],
    ids=["aws", "onprem"],
)
@pytest.mark.parametrize("name", DATABASE_CLIENTS)
def test_the_proxy_verifies_the_server_with_its_ca(
    name: str, spec: ps.PipelinesSpec, placement: ps.PipelinesPlacement, source: dict[str, Any]
) -> None:
    """The CA file pgbouncer.ini names is mounted: on AWS the region's RDS authorities
    (a ConfigMap of the platform's), on premises the ``ca.crt`` of CloudNativePG's CA
    Secret for the cluster (``<cluster>-ca``), not its key."""
    pod = find(installed(spec, placement), "Deployment", name)["spec"]["template"]["spec"]
    proxy = pod["initContainers"][0]
    (mount,) = [m for m in proxy["volumeMounts"] if m["mountPath"] == "/etc/pgbouncer/ca"]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert {k: v for k, v in volume.items() if k != "name"} == source
    assert f"{mount['mountPath']}/ca.crt" in kfp.proxy_ini(RDS)


def test_on_aws_the_proxys_ca_is_the_regions_rds_bundle() -> None:
    configmap = kfp.database_ca_configmap(AWS)
    meta = configmap["metadata"]
    assert (meta["name"], meta["namespace"]) == ("kfp-database-ca", "kubeflow")
    assert configmap["data"] == {"ca.crt": ca_bundle("me-central-1")}
    with pytest.raises(ValueError, match="RDS CA bundle"):
        kfp.database_ca_configmap(replace(AWS, database_ca=""))


def test_the_users_file_quotes_the_password() -> None:
    assert kfp.proxy_userlist('a"b') == '"kubeflow_pipelines" "a""b"\n'


def test_on_aws_the_init_job_makes_the_role_and_both_databases_idempotently() -> None:
    job = kfp.database_init_job(AWS, RDS)
    assert job["metadata"]["namespace"] == "mlflow"
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "CREATE ROLE kubeflow_pipelines LOGIN" in script and "CREATEDB" in script
    for database in ("mlpipeline", "metadb"):
        assert f"CREATE DATABASE {database} OWNER kubeflow_pipelines" in script
        assert f"WHERE datname = '{database}'" in script
    values = env(job["spec"]["template"]["spec"]["containers"][0])
    assert values["PGHOST"] == RDS


def test_on_aws_the_init_job_verifies_the_instance_with_the_tracking_servers_ca() -> None:
    """verify-full with the region's RDS authorities: the tracking server's ConfigMap in
    the Job's namespace (``kfp-database-ca`` is in ``kubeflow``, out of the Job's reach)."""
    job = kfp.database_init_job(AWS, RDS)
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    source = verifying_ca_source(env(container), container["volumeMounts"], pod["volumes"])
    items = [{"key": "ca.crt", "path": "ca.crt"}]
    assert source == ({"configMap": {"name": DATABASE_CA_CONFIGMAP, "items": items}}, "ca.crt")
    assert job["metadata"]["namespace"] == TRACKING_NAMESPACE


def test_on_premises_the_database_is_a_cloudnativepg_cluster_of_the_site() -> None:
    cluster = kfp.database_cluster(ONPREM_SPEC, ONPREM)
    assert vendored_errors([cluster]) == []
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    assert (initdb["database"], initdb["owner"]) == ("mlpipeline", "kubeflow_pipelines")
    assert "CREATE DATABASE metadb OWNER kubeflow_pipelines" in initdb["postInitApplicationSQL"]
    assert cluster["spec"]["storage"]["storageClass"] == "ceph-rbd-encrypted"
    assert kfp.database_host(ONPREM) == "kfp-db-rw.kubeflow.svc.cluster.local"


# -- pods, roles and fences ----------------------------------------------------------------


def test_every_pod_is_restricted_limited_and_on_the_system_pool() -> None:
    for name, pod in pods(installed()):
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["nodeSelector"]["gpuplatform.ae/role"] == "system", name
        assert pod["automountServiceAccountToken"] is (name in API_CLIENTS), name
        for c in containers(pod):
            context = c["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert context["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert c["resources"]["limits"].keys() >= {"cpu", "memory"}, (name, c["name"])


def test_the_runner_role_is_within_upstreams_and_without_its_wildcards() -> None:
    upstream = upstream_file("base/pipeline/pipeline-runner-role.yaml")["rules"]
    ours = find(installed(), "Role", "pipeline-runner")["rules"]

    def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
        return any(
            group in r["apiGroups"]
            and resource in r["resources"]
            and (verb in r["verbs"] or "*" in r["verbs"])
            for r in rules
        )

    for rule in ours:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert granted(upstream, group, resource, verb), (group, resource, verb)
    flat = json.dumps(ours)
    for gone in ('"*"', "deployments", "jobs", "services", "seldondeployments", "pods/exec"):
        assert gone not in flat
    # No Secret on AWS; on premises the store's key pair only (not the database password).
    assert "secrets" not in flat
    onprem = find(installed(ONPREM_SPEC, ONPREM), "Role", "pipeline-runner")["rules"]
    (secrets,) = [r for r in onprem if "secrets" in r["resources"]]
    assert secrets["resourceNames"] == [kfp.OBJECT_STORE_SECRET] and secrets["verbs"] == ["get"]


def test_the_ui_reads_no_secret_but_the_stores_key_pair() -> None:
    upstream = upstream_file("base/pipeline/ml-pipeline-ui-role.yaml")["rules"]
    assert any("secrets" in r["resources"] for r in upstream)  # what is taken away
    aws = find(installed(), "Role", "ml-pipeline-ui")["rules"]
    assert not [r for r in aws if "secrets" in r["resources"]]
    assert any("configmaps" in r["resources"] for r in aws)
    onprem = find(installed(ONPREM_SPEC, ONPREM), "Role", "ml-pipeline-ui")["rules"]
    (secrets,) = [r for r in onprem if "secrets" in r["resources"]]
    assert secrets == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": [kfp.OBJECT_STORE_SECRET],
        "verbs": ["get"],
    }


def test_the_namespace_is_restricted_and_may_route_alerts() -> None:
    namespace = installed()[0]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels[ALERT_ROUTING_LABEL] == ALERT_ROUTING_VALUE


def policy(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return find(objects, "NetworkPolicy", name)["spec"]


def test_the_namespace_denies_by_default_and_admits_nothing_from_outside() -> None:
    objects = kfp.network_policies(SPEC, AWS)
    assert policy(objects, DEFAULT_DENY) == {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
    }
    for o in objects:
        for rule in o["spec"].get("ingress", []):
            for peer in rule.get("from", []):
                # Only the namespace's own pods, or the CloudNativePG operator (on premises).
                assert peer == {"podSelector": {}} or "cnpg-system" in json.dumps(peer)


def test_egress_on_aws_is_the_vpc_and_the_pod_identity_agent_only() -> None:
    for o in kfp.network_policies(SPEC, AWS):
        for rule in o["spec"].get("egress", []):
            for peer in rule.get("to", []):
                block = peer.get("ipBlock", {}).get("cidr")
                assert block in (None, "10.42.0.0/16", "169.254.170.23/32"), o["metadata"]["name"]
    database = policy(kfp.network_policies(SPEC, AWS), "allow-database")
    assert database["egress"][0]["ports"] == [{"protocol": "TCP", "port": 5432}]


def test_egress_on_premises_is_the_api_server_and_the_sites_store() -> None:
    objects = kfp.network_policies(ONPREM_SPEC, ONPREM)
    api = policy(objects, "allow-kubernetes-api")["egress"][0]
    assert api["to"] == [{"ipBlock": {"cidr": "10.20.0.10/32"}}]
    store = policy(objects, "allow-runs-object-store")["egress"][0]
    assert store == {
        "to": [{"ipBlock": {"cidr": "10.20.40.0/24"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert "allow-database" not in {o["metadata"]["name"] for o in objects}


def test_tracked_steps_may_reach_the_tracking_servers_tls_port_and_nothing_else() -> None:
    allowance = kfp.tracking_allowance()
    assert allowance["metadata"]["namespace"] == "mlflow"
    assert allowance["spec"]["podSelector"] == {"matchLabels": SERVER_POD_LABELS}
    (rule,) = allowance["spec"]["ingress"]
    # The TLS proxy's port, as for the teams; MLflow's plain port stays the kubelet's.
    assert rule["ports"] == [{"protocol": "TCP", "port": TLS_PORT}]
    assert TLS_PORT != SERVER_PORT
    (peer,) = rule["from"]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ps.NAMESPACE}},
        "podSelector": {"matchLabels": {kfp.TRACKING_CLIENT_LABEL: "true"}},
    }
    egress = kfp.runs_tracking_egress()
    assert egress["metadata"]["namespace"] == ps.NAMESPACE
    assert egress["spec"]["podSelector"] == {"matchLabels": {kfp.TRACKING_CLIENT_LABEL: "true"}}
    (out,) = egress["spec"]["egress"]
    assert out["ports"] == [{"protocol": "TCP", "port": TLS_PORT}]
    # No kubeflow policy, of either side, opens MLflow's plain port.
    kubeflow_policies = [*kfp.network_policies(SPEC, AWS), allowance, egress]
    opened = {
        port.get("port")
        for p in kubeflow_policies
        for direction in ("ingress", "egress")
        for rule_ in p["spec"].get(direction, [])
        for port in rule_.get("ports", [])
    }
    assert SERVER_PORT not in opened
    (to,) = out["to"]
    assert to == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mlflow"}},
        "podSelector": {"matchLabels": SERVER_POD_LABELS},
    }


def test_the_runs_mlflow_user_and_the_cluster_ca_are_in_kubeflow() -> None:
    credentials = kfp.tracking_credentials("a-password")
    meta = credentials["metadata"]
    assert (meta["name"], meta["namespace"]) == (TEAM_CREDENTIALS_SECRET, "kubeflow")
    # The keys and name a team namespace's Secret has (the trainers' convention).
    assert credentials["stringData"] == {"username": PIPELINES_USERNAME, "password": "a-password"}
    assert PIPELINES_USERNAME == "pipelines"
    ca = kfp.namespace_ca()
    assert ca["kind"] == "Certificate" and ca["metadata"]["namespace"] == "kubeflow"
    assert ca["spec"]["secretName"] == CA_BUNDLE_SECRET
    assert ca["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER


def _ir_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / ps.PIPELINE_FILE).read_text()) if d]


def test_the_committed_pipeline_wires_exactly_its_tracked_steps_to_what_kubeflow_holds() -> None:
    """The compiled pipeline (what KFP runs) against the objects this layer installs:
    the tracked steps read the Secret `tracking_credentials` makes, by its keys, mount
    the CA Secret `namespace_ca` makes and point MLflow at ``ca.crt`` in it, and carry
    the label the fences select; no other step has any of it."""
    spec, platform = _ir_documents()
    tasks = spec["root"]["dag"]["tasks"]
    executor_of = {
        name: spec["components"][task["componentRef"]["name"]]["executorLabel"]
        for name, task in tasks.items()
    }
    tracked = {"train", "evaluate", "register", "canary"}
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == {executor_of[name] for name in tracked}
    credentials = kfp.tracking_credentials("x")
    ca_secret = kfp.namespace_ca()["spec"]["secretName"]
    for name in tracked:
        config = executors[executor_of[name]]
        (env,) = config["secretAsEnv"]
        assert (
            env["secretNameParameter"]["runtimeValue"]["constant"]
            == (credentials["metadata"]["name"])
        )
        refs = {e["secretKey"]: e["envVar"] for e in env["keyToEnv"]}
        assert refs == {
            "username": "MLFLOW_TRACKING_USERNAME",
            "password": "MLFLOW_TRACKING_PASSWORD",
        }
        assert set(refs) == set(credentials["stringData"])
        (volume,) = config["secretAsVolume"]
        assert volume["secretNameParameter"]["runtimeValue"]["constant"] == ca_secret
        container = spec["deploymentSpec"]["executors"][executor_of[name]]["container"]
        variables = {e["name"]: e["value"] for e in container["env"]}
        assert variables["MLFLOW_TRACKING_SERVER_CERT_PATH"] == (f"{volume['mountPath']}/{CA_KEY}")
        labels = config["podMetadata"]["labels"]
        for selector in (
            kfp.runs_tracking_egress()["spec"]["podSelector"],
            kfp.tracking_allowance()["spec"]["ingress"][0]["from"][0]["podSelector"],
        ):
            assert selector["matchLabels"].items() <= labels.items()
    for name in set(tasks) - tracked:
        container = spec["deploymentSpec"]["executors"][executor_of[name]].get("container", {})
        assert "env" not in container, name


@pytest.mark.parametrize("stack", PIPELINE_STACKS)
def test_the_shipped_runs_talk_to_the_tls_endpoint(stack: str) -> None:
    config = parse_stack_config(load_stack_file(stack)[0])
    assert config.pipelines.parameters["tracking_uri"] == TRACKING_URI
    assert TRACKING_URI.startswith("https://")


def test_every_service_is_cluster_internal() -> None:
    for o in installed():
        if o["kind"] == "Service":
            assert o["spec"].get("type", "ClusterIP") == "ClusterIP", o["metadata"]["name"]
            assert "externalIPs" not in o["spec"]


# -- the loop -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", IR_FILES, ids=lambda p: p.name)
def test_compiled_pipelines_of_the_kfp_sdk_are_read(path: Path) -> None:
    ir = loop.read_pipeline(path)
    assert ir is not None and ir.name and ir.text == path.read_text()
    assert re.fullmatch(r"[a-z0-9-]+-[0-9a-f]{12}", ir.version)


def test_the_pipelines_platform_settings_are_read_with_it_and_nothing_else(
    tmp_path: Path,
) -> None:
    ir = loop.read_pipeline(ROOT / ps.PIPELINE_FILE)
    assert ir is not None and ir.name == ps.PIPELINE_NAME
    assert "platforms:" in ir.text and ir.parameters["tracking_uri"].parameter_type == "STRING"
    spec = (ROOT / ps.PIPELINE_FILE).read_text().split("\n---\n")[0]
    (tmp_path / "other.yaml").write_text(spec + "\n---\nkind: ConfigMap\n")
    with pytest.raises(loop.PipelineFileError, match="not its platform settings"):
        loop.read_pipeline(tmp_path / "other.yaml")


def test_a_missing_pipeline_is_none_and_a_foreign_file_is_an_error(tmp_path: Path) -> None:
    assert loop.read_pipeline(tmp_path / "none.yaml") is None
    (tmp_path / "x.yaml").write_text("kind: ConfigMap\n")
    with pytest.raises(loop.PipelineFileError, match="not a compiled KFP pipeline"):
        loop.read_pipeline(tmp_path / "x.yaml")


def test_run_parameters_are_typed_as_the_pipeline_declares() -> None:
    ir = loop.read_pipeline(
        VENDOR / "kubeflow-pipelines" / "ir-nested_pipeline_opt_inputs_parent_level_compiled.yaml"
    )
    assert ir is not None
    values, problems = loop.run_parameters(
        ir, {"inputBool": "true", "inputInt": "3", "inputStr": "x"}
    )
    assert problems == [] and values == {"inputBool": True, "inputInt": 3, "inputStr": "x"}
    _, problems = loop.run_parameters(ir, {"inputInt": "three", "nope": "1"})
    assert [p[0] for p in problems] == ["inputInt", "nope"]


def test_required_inputs_without_a_value_are_problems() -> None:
    ir = loop.read_pipeline(IR)
    assert ir is not None
    _, problems = loop.run_parameters(ir, {"first_message": "a"})
    assert sorted(p[0] for p in problems) == ["first_number", "second_message", "second_number"]


def ir_and_values() -> tuple[loop.PipelineIR, dict[str, Any]]:
    ir = loop.read_pipeline(IR)
    assert ir is not None
    values, problems = loop.run_parameters(
        ir,
        {
            "first_message": "a",
            "first_number": "1",
            "second_message": "b",
            "second_number": "2",
        },
    )
    assert problems == []
    return ir, values


def test_the_pipeline_configmap_holds_the_file_unchanged() -> None:
    ir, values = ir_and_values()
    configmap = loop.pipeline_configmap(ir, values)
    assert configmap["data"]["pipeline.yaml"] == IR.read_text()
    assert json.loads(configmap["data"]["parameters.json"]) == values


def test_the_publisher_job_runs_the_publisher_on_this_version_and_schedule() -> None:
    ir, _ = ir_and_values()
    job = loop.publish_job(SPEC, AWS, ir)
    assert job["metadata"]["name"] == f"publish-{ir.version}"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{REGISTRY}/pipelines:{SPEC.image_tag}"
    args = container["args"]
    assert args[:2] == ["-m", "workloads.pipelines.publish"]
    options = dict(zip(args[2::2], args[3::2], strict=True))
    assert options["--version"] == ir.version and options["--schedule"] == SPEC.schedule
    assert options["--host"] == loop.API_SERVER_URL
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_drift_route_matches_the_serving_layers_alert() -> None:
    names = {rule.alert for rule in serving_alert_rules(ServingSpec())}
    assert loop.DRIFT_ALERT in names
    config = loop.alertmanager_config(SPEC)
    route = config["spec"]["route"]
    assert route["matchers"] == [
        {"name": "alertname", "value": "ModelInputDrift", "matchType": "="}
    ]
    assert route["repeatInterval"] == f"{SPEC.retrain_cooldown_hours}h"
    (receiver,) = config["spec"]["receivers"]
    assert receiver["name"] == route["receiver"]
    assert receiver["webhookConfigs"][0]["url"] == loop.TRIGGER_URL
    assert vendored_errors([config]) == []


def test_alertmanager_picks_the_route_up_and_takes_its_matchers_as_written() -> None:
    spec = kube_prometheus_stack_values(MonitoringSpec(), "gp3", True)["alertmanager"][
        "alertmanagerSpec"
    ]
    config = loop.alertmanager_config(SPEC)
    selector = spec["alertmanagerConfigSelector"]["matchLabels"]
    assert selector.items() <= config["metadata"]["labels"].items()
    namespace = spec["alertmanagerConfigNamespaceSelector"]["matchLabels"]
    assert namespace.items() <= installed()[0]["metadata"]["labels"].items()
    # The drift alert carries the team's namespace, not kubeflow: no namespace matcher.
    assert spec["alertmanagerConfigMatcherStrategy"] == {"type": "None"}


def test_the_alertmanager_keys_exist_in_the_chart() -> None:
    values = yaml.safe_load(
        (VENDOR / "charts" / "kube-prometheus-stack-88.5.3-values.yaml").read_text()
    )
    chart = values["alertmanager"]["alertmanagerSpec"]
    ours = kube_prometheus_stack_values(MonitoringSpec(), "gp3", True)["alertmanager"][
        "alertmanagerSpec"
    ]
    assert set(ours) - set(chart) == set()


def test_the_trigger_listens_where_the_route_posts_and_only_alertmanager_may_call() -> None:
    ir, _ = ir_and_values()
    account, _, deployment, service, fence = loop.trigger_objects(SPEC, AWS, ir)
    assert account["automountServiceAccountToken"] is False
    url = re.fullmatch(r"https://([^.]+)\.([^.]+)\.svc\.cluster\.local(/.*)", loop.TRIGGER_URL)
    assert url is not None
    name, namespace, path = url.groups()
    assert (service["metadata"]["name"], service["metadata"]["namespace"]) == (name, namespace)
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443 and port["targetPort"] == "https"  # the URL's default port
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    trigger, proxy = pod["spec"]["containers"]
    args = trigger["args"]
    options = dict(zip(args[2::2], args[3::2], strict=True))
    assert (options["--path"], options["--alert"]) == (path, "ModelInputDrift")
    assert options["--cooldown-hours"] == str(SPEC.retrain_cooldown_hours)
    assert (options["--pipeline"], options["--parameters"]) == (
        ir.name,
        f"{PIPELINE_MOUNT}/parameters.json",
    )
    # The Service's port leads to the proxy, the proxy to the trigger on the loopback.
    (https,) = proxy["ports"]
    assert https["name"] == "https"
    assert f"--target={options['--bind']}:{options['--port']}" in proxy["args"]
    (rule,) = fence["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": https["containerPort"]}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": MONITORING_NAMESPACE
    }
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "alertmanager"}
    assert fence["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_every_placeholder_is_filled_and_shell_variables_stay() -> None:
    """``loop.yaml`` and ``database.yaml`` are filled in completely; the render's shell
    scripts keep their own ``${...}`` (`manifests.substituted` fills only its names)."""
    ir, values = ir_and_values()
    filled = [
        *loop.loop_objects(SPEC, AWS, ir, values),
        kfp.database_init_job(AWS, RDS),
        kfp.database_cluster(ONPREM_SPEC, ONPREM),
    ]
    assert "${" not in json.dumps(filled)
    cluster = filled[-1]["spec"]
    assert (cluster["instances"], cluster["enablePDB"]) == (2, True)
    assert cluster["storage"]["size"] == "20Gi"
    assert cluster["imageName"] == ONPREM.image("postgresql")
    job = filled[-2]["spec"]["template"]["spec"]
    assert job["nodeSelector"] == AWS.node_selector and job["containers"][0]["image"] == (
        AWS.image("postgresql")
    )
    shell = find(installed(), "Deployment", "ml-pipeline-persistenceagent")["spec"]["template"]
    assert "${NAMESPACE}" in shell["spec"]["containers"][0]["command"][2]
    assert "${i}/${MAX_RETRIES}" in shell["spec"]["initContainers"][0]["args"][0]
    with_ = {"${a}": 1, "x": ["y"]}
    assert kfp.substituted({"k": ["${a}", "p-${a}", "x", "${b}"]}, with_) == {
        "k": [1, "p-1", ["y"], "${b}"]
    }


def test_without_retraining_on_drift_there_is_no_trigger_and_no_route() -> None:
    ir, values = ir_and_values()
    kinds = {
        o["kind"] for o in loop.loop_objects(replace(SPEC, retrain_on_drift=False), AWS, ir, values)
    }
    assert kinds == {"ConfigMap", "ServiceAccount", "Job"}


# -- the component under mocks, with a pipeline ----------------------------------------------


def component_objects(
    spec: ps.PipelinesSpec, placement: ps.PipelinesPlacement, run_under_mocks: Any
) -> list[Registration]:
    ir, values = ir_and_values()

    def program() -> None:
        provider = k8s.Provider("cluster", kubeconfig="{}")
        KubeflowPipelines(
            "pipelines",
            PipelinesArgs(
                provider=provider,
                spec=spec,
                placement=placement,
                kubernetes_version="1.33",
                database_password="a-password-of-sixteen",
                object_store_keys=None if placement.on_aws else ("AKID", "SECRET"),
                pipeline=ir,
                parameters=values,
                tracking_password="a-tracking-password",
            ),
        )

    return [
        r
        for r in run_under_mocks(program).values()
        if r.custom and r.type.startswith("kubernetes:")
    ]


@pytest.mark.parametrize(
    ("spec", "placement"), [(SPEC, AWS), (ONPREM_SPEC, ONPREM)], ids=["aws", "onprem"]
)
def test_the_component_with_a_pipeline_is_valid_for_kubernetes_and_the_crds(
    spec: ps.PipelinesSpec, placement: ps.PipelinesPlacement, run_under_mocks: Any
) -> None:
    objects = [r.inputs for r in component_objects(spec, placement, run_under_mocks)]
    kinds = {o["kind"] for o in objects}
    assert {"AlertmanagerConfig", "Job", "CustomResourceDefinition"} <= kinds
    assert schema_errors([o for o in objects if is_builtin(o)], "1.33") == []
    others = [o for o in objects if not is_builtin(o)]
    assert [o["kind"] for o in others if not is_vendored(o)] == []
    assert vendored_errors(others) == []


def test_secrets_are_pulumi_secrets(run_under_mocks: Any) -> None:
    records = component_objects(ONPREM_SPEC, ONPREM, run_under_mocks)
    secrets = [r for r in records if r.type == "kubernetes:core/v1:Secret"]
    assert {s.inputs["metadata"]["name"] for s in secrets} == {
        kfp.DATABASE_SECRET,
        kfp.METADATA_SECRET,
        kfp.PROXY_USERS_SECRET,
        kfp.DATABASE_OWNER_SECRET,
        kfp.OBJECT_STORE_SECRET,
        TEAM_CREDENTIALS_SECRET,
    }
    text = json.dumps([s.inputs for s in secrets])
    for value in ("a-password-of-sixteen", "AKID", 'SECRET"', "a-tracking-password"):
        assert value not in text


# -- the shipped plans ------------------------------------------------------------------------


def kfp_records(stack: str) -> list[Registration]:
    registrations, _ = shipped_plan(stack)

    def under(record: Registration) -> bool:
        while record.parent in registrations:
            record = registrations[record.parent]
            if record.type == COMPONENT:
                return True
        return False

    return [r for r in registrations.values() if r.custom and under(r)]


@pytest.mark.parametrize("stack", PIPELINE_STACKS)
def test_shipped_objects_pass_the_schemas_and_the_vendored_crds(stack: str) -> None:
    _, plan = shipped_plan(stack)
    version = str(plan["config"]["uae-gpu-platform:kubernetesVersion"])
    objects = [r.inputs for r in kfp_records(stack)]
    assert len(objects) > 40
    assert schema_errors([o for o in objects if is_builtin(o)], version) == []
    others = [o for o in objects if not is_builtin(o)]
    assert [o["kind"] for o in others if not is_vendored(o)] == []
    assert vendored_errors(others) == []


@pytest.mark.parametrize("stack", PIPELINE_STACKS)
def test_shipped_plans_install_kfp_and_the_loop_iff_the_pipeline_exists(stack: str) -> None:
    names = {(r.inputs["kind"], r.inputs["metadata"]["name"]) for r in kfp_records(stack)}
    assert set(vendor_kfp.KEPT) <= names
    for kind, name in [
        ("ConfigMap", kfp.PROXY_CONFIG),
        ("ConfigMap", kfp.APISERVER_CONFIG),
        ("NetworkPolicy", DEFAULT_DENY),
        ("NetworkPolicy", "allow-kubeflow-pipelines"),
        ("Secret", kfp.DATABASE_SECRET),
        ("Secret", kfp.PROXY_USERS_SECRET),
    ]:
        assert (kind, name) in names
    pipeline = ROOT / ps.PIPELINE_FILE
    assert (("ConfigMap", loop.PIPELINE_CONFIGMAP) in names) is pipeline.is_file()
    if pipeline.is_file():
        (configmap,) = [
            r.inputs
            for r in kfp_records(stack)
            if r.inputs["metadata"]["name"] == loop.PIPELINE_CONFIGMAP
        ]
        assert configmap["data"]["pipeline.yaml"] == pipeline.read_text()
        assert ("AlertmanagerConfig", loop.ALERTMANAGER_CONFIG) in names


#: The platform's own objects beside the upstream ones, per shipped stack (a deleted or an
#: added object fails here).
OWN_COMMON = {
    ("ConfigMap", kfp.PROXY_CONFIG),
    ("ConfigMap", kfp.APISERVER_CONFIG),
    ("Secret", kfp.DATABASE_SECRET),
    ("Secret", kfp.METADATA_SECRET),
    ("Secret", kfp.PROXY_USERS_SECRET),
    ("NetworkPolicy", DEFAULT_DENY),
    ("NetworkPolicy", "allow-dns"),
    ("NetworkPolicy", "allow-same-namespace"),
    ("NetworkPolicy", "allow-kubernetes-api"),
    ("NetworkPolicy", "allow-object-store"),
    ("NetworkPolicy", "allow-runs-object-store"),
    ("NetworkPolicy", "allow-runs-tracking"),
    ("NetworkPolicy", "allow-kubeflow-pipelines"),
    # The runs' MLflow user and the cluster CA their tracked steps verify it with.
    ("Secret", TEAM_CREDENTIALS_SECRET),
    ("Certificate", kfp.API_TLS_SECRET),
    ("Certificate", kfp.MLMD_TLS_SECRET),
    ("Certificate", kfp.ENVOY_TLS_SECRET),
    ("Certificate", kfp.UI_TLS_SECRET),
    ("Certificate", CA_BUNDLE_SECRET),
}
OWN = {
    "uae-prod": OWN_COMMON
    | {
        ("Secret", kfp.DATABASE_INIT_SECRET),
        ("Job", "kfp-database-init"),
        # The region's RDS CAs, which the database proxy verifies the instance with.
        ("ConfigMap", kfp.DATABASE_CA),
        ("NetworkPolicy", "allow-database"),
        ("NetworkPolicy", "allow-metadata-database"),
    },
    "onprem-ib": OWN_COMMON
    | {
        ("Secret", kfp.DATABASE_OWNER_SECRET),
        ("Secret", kfp.OBJECT_STORE_SECRET),
        ("Cluster", kfp.DATABASE_CLUSTER),
        ("NetworkPolicy", "allow-database-operator"),
    },
}
LOOP = {
    ("ConfigMap", loop.PIPELINE_CONFIGMAP),
    ("ServiceAccount", ps.PUBLISHER_ACCOUNT),
    ("ServiceAccount", ps.TRIGGER_ACCOUNT),
    ("Certificate", loop.TRIGGER_TLS_SECRET),
    ("Deployment", loop.TRIGGER),
    ("Service", loop.TRIGGER),
    ("NetworkPolicy", "allow-alertmanager-to-trigger"),
    ("AlertmanagerConfig", loop.ALERTMANAGER_CONFIG),
}


@pytest.mark.parametrize("stack", PIPELINE_STACKS)
def test_shipped_plans_hold_exactly_kfp_the_platforms_objects_and_the_loop(stack: str) -> None:
    names = [(r.inputs["kind"], r.inputs["metadata"]["name"]) for r in kfp_records(stack)]
    assert len(names) == len(set(names))
    expected = set(vendor_kfp.KEPT) | OWN[stack] | {("Namespace", ps.NAMESPACE)}
    if (ROOT / ps.PIPELINE_FILE).is_file():
        expected |= LOOP
        publish = {n for n in names if n[0] == "Job" and n[1].startswith("publish-")}
        assert len(publish) == 1
        expected |= publish
    assert set(names) == expected


def test_every_mirrored_image_has_its_ecr_repository() -> None:
    registrations, _ = shipped_plan("uae-prod")
    repositories = {
        r.inputs["name"]
        for r in registrations.values()
        if r.type == "aws:ecr/repository:Repository"
    }
    wanted = {f"gpu-uae-prod/{ps.MIRROR_PATH}/{name}" for name in ps.MIRRORED_IMAGES}
    assert wanted | {"gpu-uae-prod/pipelines"} <= repositories


def test_shipped_aws_plan_resolves_the_bucket_and_the_database() -> None:
    records = kfp_records("uae-prod")
    (install,) = [
        r.inputs for r in records if r.inputs["metadata"]["name"] == "pipeline-install-config"
    ]
    bucket = install["data"]["bucketName"]
    assert bucket.startswith("gpu-uae-prod-data-")
    assert install["data"]["defaultPipelineRoot"] == f"s3://{bucket}/pipelines/runs"
    (proxy,) = [r.inputs for r in records if r.inputs["metadata"]["name"] == kfp.PROXY_CONFIG]
    assert re.search(
        r"host=\S+\.me-central-1\.rds\.amazonaws\.com port=5432", proxy["data"]["pgbouncer.ini"]
    )


def test_shipped_onprem_plan_protects_the_database() -> None:
    (cluster,) = [r for r in kfp_records("onprem-ib") if r.inputs["kind"] == "Cluster"]
    assert cluster.protect is True


# -- the AWS side: identities -----------------------------------------------------------------


def role_policies(stack: str) -> dict[str, dict[str, Any]]:
    """Pod Identity role name -> its inline policy document, for KFP's three roles."""
    registrations, _ = shipped_plan(stack)
    found = {}
    for record in registrations.values():
        if record.type == "aws:iam/rolePolicy:RolePolicy" and record.name.startswith("pipelines-"):
            found[record.name] = json.loads(record.inputs["policy"])
    return found


def test_each_kfp_identity_gets_only_its_prefixes_and_the_key_through_s3() -> None:
    policies = role_policies("uae-prod")
    assert len(policies) == len(ROLES)
    for name, document in policies.items():
        for statement in document["Statement"]:
            resources = (
                statement["Resource"]
                if isinstance(statement["Resource"], list)
                else [statement["Resource"]]
            )
            assert "*" not in resources, name
            actions = (
                statement["Action"]
                if isinstance(statement["Action"], list)
                else [statement["Action"]]
            )
            assert not [a for a in actions if a.endswith("*")], name
            assert "s3:DeleteObject" not in actions
            if any(a.startswith("kms:") for a in actions):
                assert statement["Condition"] == {
                    "StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}
                }
            for resource in resources:
                if resource.startswith("arn:aws:s3:::") and "/" in resource:
                    assert resource.split("/", 1)[1].startswith("pipelines/"), (name, resource)


def test_the_roles_are_bound_to_kfps_service_accounts() -> None:
    registrations, _ = shipped_plan("uae-prod")
    associations = {
        r.inputs["serviceAccount"]: r.inputs["namespace"]
        for r in registrations.values()
        if r.type == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
        and r.name.startswith("pipelines-")
    }
    assert associations == {account: "kubeflow" for _, account, *_ in ROLES}


def test_the_ui_only_reads_and_the_runner_cannot_touch_the_specs() -> None:
    ui = prefixes_access("arn:aws:s3:::b", "arn:k", "me-central-1", read=(ps.RUNS_PREFIX,))
    assert {
        a
        for s in ui["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    } == {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}
    _, _, _, write, read = ROLES[0]
    assert ps.SPECS_PREFIX not in (*write, *read)
    with pytest.raises(ValueError, match="at least one prefix"):
        prefixes_access("arn:aws:s3:::b", "arn:k", "me-central-1")


# -- the stack section ------------------------------------------------------------------------


def stack_config(stack: str, **section: Any) -> dict[str, str]:
    config, _ = load_stack_file(stack)
    key = f"{PROJECT}:pipelines"
    config = dict(config)
    config[key] = json.dumps({"enabled": True, **section})
    return config


def problems(config: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_stack_config(config)
    return err.value.problems


def test_the_shipped_sections_parse() -> None:
    for stack in PIPELINE_STACKS:
        config, _ = load_stack_file(stack)
        assert parse_stack_config(config).pipelines.enabled


def test_pipelines_need_tracking() -> None:
    config = stack_config("uae-dev")
    config[f"{PROJECT}:tracking"] = json.dumps({"enabled": False})
    assert any("pipelines.enabled" in p and "tracking" in p for p in problems(config))


def test_an_onprem_stack_must_name_its_registry_store_and_api_server() -> None:
    found = problems(stack_config("onprem-ib"))
    for key in ("pipelines.registry", "pipelines.objectStore", "pipelines.apiServerCidrs"):
        assert any(p.startswith(f"{PROJECT}:{key}") for p in found), key


def test_an_aws_stack_must_not_name_a_site_store() -> None:
    found = problems(
        stack_config("uae-dev", registry="r.example/x", apiServerCidrs=["10.0.0.1/32"])
    )
    assert any(p.startswith(f"{PROJECT}:pipelines.registry") for p in found)
    assert any(p.startswith(f"{PROJECT}:pipelines.apiServerCidrs") for p in found)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"schedule": "0 2 * * 0"}, "schedule"),
        ({"imageTag": "latest"}, "imageTag"),
        ({"retrainCooldownHours": 0}, "retrainCooldownHours"),
        ({"parameters": {"bad name": "x"}}, "parameters.bad name"),
    ],
    ids=["five-field-cron", "latest", "cooldown", "parameter-name"],
)
def test_bad_values_name_their_key(section: dict[str, Any], key: str) -> None:
    assert any(
        p.startswith(f"{PROJECT}:pipelines.{key}")
        for p in problems(stack_config("uae-dev", **section))
    )


def test_the_object_store_checks_its_endpoint_and_addresses() -> None:
    with pytest.raises(InvalidArgsError) as err:
        ps.ObjectStoreSpec(endpoint="s3.eu-west-1.amazonaws.com", bucket="bkt", cidrs=("nope",))
    assert {p.field for p in err.value.problems} == {"endpoint", "cidrs[0]"}


# -- the compiled pipeline at plan time --------------------------------------------------------


def config_with(parameters: dict[str, str]) -> Any:
    config, _ = load_stack_file("uae-prod")
    config = dict(config)
    config[f"{PROJECT}:pipelines"] = json.dumps({"enabled": True, "parameters": parameters})
    return parse_stack_config(config)


def test_a_pipeline_of_another_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the loop runs 'data-to-model'"):
        pipeline_for(config_with({}), IR)


def test_a_broken_pipeline_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("{not yaml")
    with pytest.raises(ConfigError) as err:
        pipeline_for(config_with({}), tmp_path / "p.yaml")
    assert err.value.problems == [f"{ps.PIPELINE_FILE}: not YAML (ParserError); compile it again"]


def test_parameters_that_do_not_fit_the_pipeline_name_their_keys(tmp_path: Path) -> None:
    text = IR.read_text().replace("name: functions-with-outputs", "name: data-to-model")
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        pipeline_for(config_with({"first_number": "one", "extra": "1"}), tmp_path / "p.yaml")
    keys = {p.split(":")[1].split(";")[0] for p in err.value.problems}
    assert keys == {
        f"pipelines.parameters.{name}"
        for name in ("extra", "first_number", "first_message", "second_message", "second_number")
    }


def test_an_absent_pipeline_installs_kfp_without_the_loop(tmp_path: Path) -> None:
    assert pipeline_for(config_with({}), tmp_path / "none.yaml") == (None, {})
