"""Kubeflow Pipelines 2.17.0 from its vendored upstream render, adapted object by object.

`upstream_objects` reads ``upstream/kubeflow-pipelines-2.17.0.yaml`` (KFP's
``env/platform-agnostic-postgresql`` and ``cluster-scoped-resources``, rendered at the
tag; ``upstream/README.md``). Every object there is either installed (`KEPT`, adapted by
`adapt`) or left out (`LEFT_OUT`, with the reason); a test fails on an object in
neither, so a version bump is reviewed object by object.

What the platform changes, and why:

* **Images** come from the stack's registry (`spec.MIRRORED_IMAGES`), the driver and
  launcher images pinned (the PostgreSQL overlay's env replacement drops upstream's
  ``V2_DRIVER_IMAGE``/``V2_LAUNCHER_IMAGE``, which would fall back to ``:latest``).
* **State**: no bundled SeaweedFS or PostgreSQL. The databases are on the tracking
  database server, reached through a PgBouncer sidecar on the pod's loopback that
  encrypts to the server (`proxy_sidecar`); the artifacts in the stack's bucket
  (`launcher_config`, the API server's and UI's object-store settings).
* **Secrets**: upstream's example passwords (``password``, ``minio123``) are never
  installed; the database password is a Pulumi secret (`database_secrets`).
* **v1-only parts** (cache webhook and its certificate deployer, metadata writer,
  viewer and visualisation servers) are left out; ``BLOCK_V1_PIPELINES`` is on.
* **Placement and limits**: KFP's pods on the system pool, each container with CPU and
  memory limits; service account tokens only where a pod calls the Kubernetes API.
* **TLS inside the cluster** (`tls_objects`): the API server serves HTTPS on 8888 and
  gRPC over TLS on 8887 natively, with a certificate from the cluster CA, as KFP
  2.17.0's own overlay does it (``manifests/kustomize/env/cert-manager/
  platform-agnostic-standalone-tls``); the persistence agent, the scheduled-workflow
  controller, the UI and every run's driver and launcher verify it with the cluster CA.
  The UI (plain HTTP only in 2.17.0) is served through a ghostunnel sidecar, as the
  tracking server is. ML Metadata serves gRPC over TLS natively (its server config
  file's ``ssl_config``, as the overlay does, with the PostgreSQL connection instead of
  the overlay's MySQL one); the drivers, launchers and Envoy verify it with the cluster
  CA. Envoy serves the UI's calls over TLS too (the overlay's listener), verified by
  the UI with the cluster CA.
* **Fences** (`network_policies`): default-deny in ``kubeflow``; KFP's pods talk to each
  other, to DNS, the Kubernetes API, the database and the object store only.
* **Runs**: the ``pipeline-runner`` Role keeps what a v2 run needs (its pods, task
  results, the launcher's ConfigMap, volume claims, on premises the store's key pair),
  not upstream's wildcard rights on Deployments, Jobs, Services, every Secret and every
  ``kubeflow.org`` resource.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from modules.k8s import netpol, security
from modules.k8s.common import Manifest, metadata, namespace
from modules.k8s.monitoring.spec import ALERT_ROUTING_LABEL, ALERT_ROUTING_VALUE
from modules.k8s.names import PART_OF
from modules.k8s.pipelines.spec import (
    DATABASE_CLUSTER,
    DATABASE_PORT,
    DATABASE_USER,
    KFP_VERSION,
    METADATA_DATABASE,
    NAMESPACE,
    PGBOUNCER_UID,
    PIPELINE_DATABASE,
    PROXY_HOST,
    SPECS_PREFIX,
    ObjectStoreSpec,
    PipelinesPlacement,
    PipelinesSpec,
    labels,
    s3_endpoint,
)
from modules.k8s.pki.spec import (
    CA_BUNDLE_SECRET,
    CA_KEY,
    ca_bundle,
    ca_volume,
    service_dns_names,
    serving_certificate,
)
from modules.k8s.tenancy.spec import POD_IDENTITY_AGENT_CIDR, POD_IDENTITY_AGENT_PORT
from modules.k8s.tracking.manifests import (
    SERVER_POD_LABELS,
    TEAM_CREDENTIALS_SECRET,
    TLS_PORT,
    TRACKING_NAMESPACE,
)
from modules.k8s.tracking.users import PIPELINES_USERNAME

UPSTREAM_DIR = Path(__file__).resolve().parent / "upstream"
UPSTREAM_FILE = UPSTREAM_DIR / f"kubeflow-pipelines-{KFP_VERSION}.yaml"
APISERVER_CONFIG_FILE = UPSTREAM_DIR / f"apiserver-config-{KFP_VERSION}.json"

Key = tuple[str, str]

#: Upstream objects the platform installs (adapted by `adapt`).
KEPT: frozenset[Key] = frozenset(
    {
        ("CustomResourceDefinition", "scheduledworkflows.kubeflow.org"),
        ("CustomResourceDefinition", "workflows.argoproj.io"),
        ("CustomResourceDefinition", "workflowtemplates.argoproj.io"),
        ("CustomResourceDefinition", "clusterworkflowtemplates.argoproj.io"),
        ("CustomResourceDefinition", "cronworkflows.argoproj.io"),
        ("CustomResourceDefinition", "workflowtaskresults.argoproj.io"),
        ("CustomResourceDefinition", "workflowtasksets.argoproj.io"),
        ("CustomResourceDefinition", "workflowartifactgctasks.argoproj.io"),
        ("CustomResourceDefinition", "workfloweventbindings.argoproj.io"),
        ("ServiceAccount", "argo"),
        ("ServiceAccount", "metadata-grpc-server"),
        ("ServiceAccount", "ml-pipeline"),
        ("ServiceAccount", "ml-pipeline-persistenceagent"),
        ("ServiceAccount", "ml-pipeline-scheduledworkflow"),
        ("ServiceAccount", "ml-pipeline-ui"),
        ("ServiceAccount", "pipeline-runner"),
        ("Role", "argo-role"),
        ("Role", "ml-pipeline"),
        ("Role", "ml-pipeline-persistenceagent-role"),
        ("Role", "ml-pipeline-scheduledworkflow-role"),
        ("Role", "ml-pipeline-ui"),
        ("Role", "pipeline-runner"),
        ("RoleBinding", "argo-binding"),
        ("RoleBinding", "ml-pipeline"),
        ("RoleBinding", "ml-pipeline-persistenceagent-binding"),
        ("RoleBinding", "ml-pipeline-scheduledworkflow-binding"),
        ("RoleBinding", "ml-pipeline-ui"),
        ("RoleBinding", "pipeline-runner-binding"),
        ("ConfigMap", "kfp-launcher"),
        ("ConfigMap", "metadata-envoy-configmap"),
        ("ConfigMap", "metadata-grpc-configmap"),
        ("ConfigMap", "metadata-postgres-db-parameters"),
        ("ConfigMap", "ml-pipeline-ui-configmap"),
        ("ConfigMap", "pipeline-install-config"),
        ("ConfigMap", "workflow-controller-configmap"),
        ("Service", "metadata-envoy-service"),
        ("Service", "metadata-grpc-service"),
        ("Service", "ml-pipeline"),
        ("Service", "ml-pipeline-ui"),
        ("Deployment", "metadata-envoy-deployment"),
        ("Deployment", "metadata-grpc-deployment"),
        ("Deployment", "ml-pipeline"),
        ("Deployment", "ml-pipeline-persistenceagent"),
        ("Deployment", "ml-pipeline-scheduledworkflow"),
        ("Deployment", "ml-pipeline-ui"),
        ("Deployment", "workflow-controller"),
    }
)
#: Upstream objects the platform replaces with its own of the same name.
REPLACED: dict[Key, str] = {
    ("Namespace", NAMESPACE): "restricted Pod Security and the alert-routing label",
}

_V1 = "a KFP v1 part (v2 runs cache through the API server and write ML Metadata themselves)"
_SEAWEEDFS = "the bundled SeaweedFS object store: the artifacts go to the stack's bucket"
_POSTGRES = "the bundled PostgreSQL: the databases are on the tracking database server"
_EXAMPLE_SECRET = "an example password in clear text; the platform writes its own Secret"
#: Upstream objects left out, with the reason.
LEFT_OUT: dict[Key, str] = {
    ("CustomResourceDefinition", "applications.app.k8s.io"): (
        "the Kubernetes Application CRD; its controller is not part of KFP's install"
    ),
    ("CustomResourceDefinition", "viewers.kubeflow.org"): _V1 + ": TensorBoard viewers",
    ("ConfigMap", "kfp-cluster-scoped-params"): "a kustomize parameter, not used at run time",
    ("ConfigMap", "kubeflow-pipelines-public"): "a version note readable by every user",
    ("Role", "kubeflow-pipelines-public"): "the reader of that version note",
    ("RoleBinding", "kubeflow-pipelines-public"): "the reader of that version note",
    ("PriorityClass", "workflow-controller"): (
        "a cluster-wide priority above the platform's own classes; the controller runs on "
        "the system pool, where no job preempts it"
    ),
    ("ServiceAccount", "kubeflow-pipelines-cache-deployer-sa"): _V1,
    ("ClusterRole", "kubeflow-pipelines-cache-deployer-clusterrole"): (
        _V1 + "; it may approve certificate signing requests cluster-wide"
    ),
    ("ClusterRoleBinding", "kubeflow-pipelines-cache-deployer-clusterrolebinding"): _V1,
    ("Role", "kubeflow-pipelines-cache-deployer-role"): _V1,
    ("RoleBinding", "kubeflow-pipelines-cache-deployer-rolebinding"): _V1,
    ("Deployment", "cache-deployer-deployment"): _V1,
    ("ServiceAccount", "kubeflow-pipelines-cache"): _V1,
    ("Role", "kubeflow-pipelines-cache-role"): _V1,
    ("RoleBinding", "kubeflow-pipelines-cache-binding"): _V1,
    ("Deployment", "cache-server"): _V1 + ": the caching webhook",
    ("Service", "cache-server"): _V1,
    ("ServiceAccount", "kubeflow-pipelines-metadata-writer"): _V1,
    ("Role", "kubeflow-pipelines-metadata-writer-role"): _V1,
    ("RoleBinding", "kubeflow-pipelines-metadata-writer-binding"): _V1,
    ("Deployment", "metadata-writer"): _V1,
    ("ServiceAccount", "kubeflow-pipelines-viewer"): _V1,
    ("ServiceAccount", "ml-pipeline-viewer-crd-service-account"): _V1,
    ("Role", "ml-pipeline-viewer-controller-role"): _V1,
    ("RoleBinding", "ml-pipeline-viewer-crd-binding"): _V1,
    ("Deployment", "ml-pipeline-viewer-crd"): _V1,
    ("ServiceAccount", "ml-pipeline-visualizationserver"): _V1 + ": Python visualisations",
    ("Deployment", "ml-pipeline-visualizationserver"): _V1 + ": Python visualisations",
    ("Service", "ml-pipeline-visualizationserver"): _V1 + ": Python visualisations",
    ("ServiceAccount", "kubeflow-pipelines-container-builder"): _V1 + ": in-cluster builds",
    ("Deployment", "seaweedfs"): _SEAWEEDFS,
    ("Service", "seaweedfs"): _SEAWEEDFS,
    ("ServiceAccount", "seaweedfs"): _SEAWEEDFS,
    ("PersistentVolumeClaim", "seaweedfs-pvc"): _SEAWEEDFS,
    ("NetworkPolicy", "seaweedfs"): _SEAWEEDFS,
    ("Deployment", "postgres"): _POSTGRES,
    ("Service", "postgres-service"): _POSTGRES,
    ("ServiceAccount", "postgresql"): _POSTGRES,
    ("PersistentVolumeClaim", "postgres-pvc"): _POSTGRES,
    ("Deployment", "metadata-postgres-db"): _POSTGRES,
    ("Service", "metadata-postgres-db"): _POSTGRES,
    ("PersistentVolumeClaim", "metadata-postgres"): _POSTGRES,
    ("Secret", "postgres-secret"): _EXAMPLE_SECRET,
    ("Secret", "postgres-secret-extended"): _EXAMPLE_SECRET,
    ("Secret", "metadata-postgres-db-secrets"): _EXAMPLE_SECRET,
    ("Secret", "mlpipeline-minio-artifact"): _EXAMPLE_SECRET,
}

#: Secrets the platform writes (upstream's names, so KFP's references hold).
DATABASE_SECRET = "postgres-secret-extended"  # username, password (API server)
METADATA_SECRET = "metadata-postgres-db-secrets"  # POSTGRES_USER, POSTGRES_PASSWORD (MLMD)
PROXY_USERS_SECRET = "kfp-database-proxy-users"  # PgBouncer's auth_file
OBJECT_STORE_SECRET = "mlpipeline-object-store"  # accesskey, secretkey (on premises)
PROXY_CONFIG = "kfp-database-proxy"  # PgBouncer's pgbouncer.ini (no password)
APISERVER_CONFIG = "ml-pipeline-config"  # the API server's config.json
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
#: Deployments that read or write the object store.
#: Image of each container (Deployment, container) -> `spec.MIRRORED_IMAGES` key.
_IMAGE_NAMES = {
    "ghcr.io/kubeflow/kfp-api-server": "kfp-api-server",
    "ghcr.io/kubeflow/kfp-persistence-agent": "kfp-persistence-agent",
    "ghcr.io/kubeflow/kfp-scheduled-workflow-controller": "kfp-scheduled-workflow-controller",
    "ghcr.io/kubeflow/kfp-frontend": "kfp-frontend",
    "ghcr.io/kubeflow/kfp-metadata-envoy": "kfp-metadata-envoy",
    "gcr.io/tfx-oss-public/ml_metadata_store_server": "ml_metadata_store_server",
    "quay.io/argoproj/workflow-controller": "workflow-controller",
    "docker.io/alpine": "alpine",
}
#: The policy pack's exception annotation for its advisory read-only-root rule.
READ_ONLY_EXCEPTION = "policy-exception.gpuplatform.ae/k8s-read-only-root-filesystem"
#: CPU and memory of each container (requests = limits; upstream sets requests only).
_RESOURCES: dict[str, tuple[str, str]] = {
    "ml-pipeline-api-server": ("1", "1Gi"),
    "ml-pipeline-persistenceagent": ("500m", "512Mi"),
    "ml-pipeline-scheduledworkflow": ("500m", "256Mi"),
    "ml-pipeline-ui": ("500m", "512Mi"),
    "workflow-controller": ("1", "1Gi"),
    "container": ("500m", "512Mi"),  # ML Metadata's server and its Envoy
}

# -- TLS: KFP 2.17.0's pod-to-pod TLS overlay, manifests/kustomize/env/cert-manager/
# platform-agnostic-standalone-tls (its patches/*.yaml are vendored in
# tests/k8s/vendor/kubeflow-pipelines/tls/ and the tests hold these settings to them).
#: The API server's and the UI's Services and ports.
API_SERVICE = "ml-pipeline"
API_HTTP_PORT = 8888  # REST (grpc-gateway), HTTPS with the flags below
API_GRPC_PORT = 8887  # gRPC, over TLS with the same certificate
UI_SERVICE = "ml-pipeline-ui"
UI_PORT = 3000  # the frontend's own port, plain HTTP: the kubelet's probes and the proxy
UI_TLS_PORT = 3443  # the UI's TLS proxy
UI_TLS_PORT_NAME = "https"
UI_SERVICE_PORT = 443
#: The serving certificates' Secrets (tls.crt, tls.key and the cluster CA as ca.crt).
API_TLS_SECRET = "kfp-api-tls"
UI_TLS_SECRET = "ml-pipeline-ui-tls"
#: Where the overlay mounts the certificate (server) or the CA (clients). For the API
#: server the path matters: its REST gateway dials its own gRPC port over TLS with no
#: CA of its own (main.go ``registerHTTPHandlerFromEndpoint``, ``initCerts``: only a
#: ServerName), so the cluster CA must be in Go's system pool, and Go reads every file
#: of ``/etc/pki/tls/certs`` as a system root (crypto/x509 ``certDirectories``; the
#: image is Debian, whose own bundle is ``/etc/ssl/certs``, not hidden by the mount).
TLS_DIR = "/etc/pki/tls/certs"
UI_PROXY_TLS_DIR = "/etc/ghostunnel/tls"
#: The API server's health endpoint (the overlay's probes).
HEALTHZ_PATH = "/apis/v1beta1/healthz"
#: The copy of the certificate the API server started with (see `api_server_command`).
SERVED_CERTIFICATE = "/tmp/served-tls.crt"
#: The API server's, persistence agent's and scheduled-workflow controller's image
#: commands (backend/Dockerfile, Dockerfile.persistenceagent, Dockerfile.scheduledworkflow
#: at 2.17.0, ``CMD ["/bin/sh", "-c", ...]``), to which the overlay's TLS flags are
#: added. The overlay replaces them with shorter ones (and, for the persistence agent,
#: ``args`` that ``sh -c`` never passes on); keeping the images' commands keeps the
#: settings upstream's env carries (log level, QPS, workers...).
APISERVER_COMMAND = (
    "/bin/apiserver --config=/config --sampleconfig=/config/sample_config.json "
    "-logtostderr=true --logLevel=${LOG_LEVEL}"
)
PERSISTENCE_AGENT_COMMAND = (
    "persistence_agent --logtostderr=true --namespace=${NAMESPACE} "
    "--ttlSecondsAfterWorkflowFinish=${TTL_SECONDS_AFTER_WORKFLOW_FINISH} "
    "--numWorker ${NUM_WORKERS} --executionType ${EXECUTIONTYPE} --logLevel=${LOG_LEVEL}"
)
SCHEDULED_WORKFLOW_COMMAND = (
    "/bin/controller --logtostderr=true --namespace=${NAMESPACE} --logLevel=${LOG_LEVEL} "
    "--clientQPS=${CLIENT_QPS:-5} --clientBurst=${CLIENT_BURST:-10} "
    "--recurringRunResyncIntervalSeconds=${RESYNC_INTERVAL_SECONDS:-30} "
    "--metricsPort=${METRICS_PORT:-9090} "
    '--userIdentityHeader="${USER_IDENTITY_HEADER:-}" '
    '--userIdentityValue="${USER_IDENTITY_VALUE:-}"'
)
#: ML Metadata's gRPC Service and port (upstream's), its certificate's Secret, and the
#: memory-backed directory where its command writes the server config (it holds the
#: database password and the private key; see `metadata_server_command`).
MLMD_SERVICE = "metadata-grpc-service"
MLMD_PORT = 8080
MLMD_TLS_SECRET = "metadata-grpc-tls"
MLMD_CONFIG_DIR = "/run/mlmd"
#: Envoy's upstream cluster in upstream's metadata-envoy-configmap (to ML Metadata).
ENVOY_MLMD_CLUSTER = "metadata-cluster"
#: ML Metadata's Envoy: its Service, port (gRPC-Web for the UI), certificate's Secret
#: and where it is mounted, and the copy of the certificate Envoy started with.
ENVOY_SERVICE = "metadata-envoy-service"
ENVOY_PORT = 9090
ENVOY_TLS_SECRET = "metadata-envoy-tls"
ENVOY_TLS_DIR = "/etc/envoy-tls"
ENVOY_CONFIG = "/etc/envoy/envoy-config.yaml"  # upstream's args
ENVOY_SERVED_CERTIFICATE = "/tmp/served-tls.crt"
#: The flags both controllers take to reach the API server over TLS (main.go of each:
#: ``mlPipelineServiceTLSEnabled``, ``caCertPath``; the system pool plus this CA).
CLIENT_TLS_FLAGS = f"-mlPipelineServiceTLSEnabled=true -caCertPath={TLS_DIR}/{CA_KEY}"


def runner_rules(placement: PipelinesPlacement) -> list[Manifest]:
    """The ``pipeline-runner`` Role: what a v2 run's pods do. Argo's executor watches its
    pod and writes task results; KFP's driver and launcher read the launcher ConfigMap,
    create volume claims for kfp-kubernetes and, on premises, read the object store's key
    pair, that Secret only (a run's code shares the token: no other Secret of the
    namespace, the database password among them, is readable)."""
    rules: list[Manifest] = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "watch", "list"]},
        {
            "apiGroups": [""],
            "resources": ["persistentvolumeclaims"],
            "verbs": ["create", "delete", "get", "list", "watch", "patch"],
        },
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflows"],
            "verbs": ["get", "list", "watch", "update", "patch"],
        },
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflowtaskresults"],
            "verbs": ["create", "patch"],
        },
    ]
    if not placement.on_aws:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [OBJECT_STORE_SECRET],
                "verbs": ["get"],
            }
        )
    return rules


def ui_rules(upstream: list[Manifest], placement: PipelinesPlacement) -> list[Manifest]:
    """The UI's Role: upstream's, except that it reads every Secret of the namespace (for
    multi-user artifact credentials): here only the store's key pair, on premises."""
    rules = []
    for rule in upstream:
        if "secrets" not in rule["resources"]:
            rules.append(rule)
            continue
        others = [r for r in rule["resources"] if r != "secrets"]
        if others:
            rules.append({**rule, "resources": others})
    if not placement.on_aws:
        rules.append(
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [OBJECT_STORE_SECRET],
                "verbs": ["get"],
            }
        )
    return rules


@cache
def _parsed() -> tuple[Manifest, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return tuple(d for d in yaml.load_all(_upstream_text(), Loader=loader) if d)


def key(manifest: Mapping[str, Any]) -> Key:
    return (str(manifest["kind"]), str(manifest["metadata"]["name"]))


@cache
def _upstream_text() -> str:
    return UPSTREAM_FILE.read_text(encoding="utf-8")


def upstream_objects() -> list[Manifest]:
    """Every object of the vendored render (fresh copies: callers may change them)."""
    return copy.deepcopy(list(_parsed()))


def upstream_object(kind: str, name: str) -> Manifest:
    """One object of the vendored render."""
    for manifest in upstream_objects():
        if key(manifest) == (kind, name):
            return manifest
    raise KeyError(f"{kind}/{name} is not in {UPSTREAM_FILE.name}")


def apiserver_config() -> dict[str, Any]:
    """The API server's ``config.json`` as the image ships it, with the object-store
    example key pair (``minio``/``minio123``) and the MLflow plugin (pointed at an Open
    Data Hub service) taken out: the key pair comes from the environment (none on AWS:
    Pod Identity), and the platform's pipeline registers its models itself.

    ``DBDriverName`` is ``pgx``, the PostgreSQL driver (client_manager.go's
    ``InitDBClient``): the image's file says ``mysql``, and the ``DB_DRIVER_NAME``
    variable the PostgreSQL overlay sets is read by nothing in the API server (viper
    looks the key up as ``DBDRIVERNAME``)."""
    config: dict[str, Any] = json.loads(APISERVER_CONFIG_FILE.read_text(encoding="utf-8"))
    store = config["ObjectStoreConfig"]
    store.pop("AccessKey", None)
    store.pop("SecretAccessKey", None)
    store["PipelinePath"] = SPECS_PREFIX.rstrip("/")
    config.pop("plugins", None)
    config["DBDriverName"] = "pgx"
    return config


# -- adapting upstream objects -------------------------------------------------------


def _containers(pod: Manifest) -> Iterable[Manifest]:
    yield from pod.get("initContainers", [])
    yield from pod.get("containers", [])


def mirrored(image: str, placement: PipelinesPlacement) -> str:
    """An upstream image reference as the stack pulls it (its mirror, same tag)."""
    repository = image.rsplit(":", 1)[0]
    name = _IMAGE_NAMES.get(repository)
    if name is None:
        raise KeyError(f"{image}: not a mirrored Kubeflow Pipelines image")
    return placement.image(name)


def _limits(container: Manifest) -> None:
    cpu, memory = _RESOURCES.get(container["name"], ("100m", "64Mi"))
    amount = {"cpu": cpu, "memory": memory}
    container["resources"] = {"requests": dict(amount), "limits": dict(amount)}


def _env_value(name: str, value: Any) -> Manifest:
    return {"name": name, "value": value}


def _env_secret(name: str, secret: str, secret_key: str) -> Manifest:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": secret_key}}}


def _replace_env(container: Manifest, replacements: list[Manifest]) -> None:
    """Set ``replacements`` on ``container``'s env, replacing entries of the same name."""
    names = {e["name"] for e in replacements}
    container["env"] = [e for e in container.get("env", []) if e["name"] not in names]
    container["env"] += replacements


def _store(spec: PipelinesSpec) -> ObjectStoreSpec:
    if spec.object_store is None:
        raise ValueError("an on-premises Kubeflow Pipelines needs pipelines.objectStore")
    return spec.object_store


def object_store_env(spec: PipelinesSpec, placement: PipelinesPlacement) -> list[Manifest]:
    """The API server's object store (``ObjectStoreConfig.*``, read from the environment
    with empty values allowed): the bucket over TLS, pipeline specs under
    ``pipelines/specs``. On AWS the key pair is empty (and gone from the config file):
    the AWS SDK's default chain answers with the Pod Identity role."""
    env = [
        _env_value("OBJECTSTORECONFIG_SECURE", "true"),
        _env_value("OBJECTSTORECONFIG_BUCKETNAME", placement.bucket),
        _env_value("OBJECTSTORECONFIG_PIPELINEPATH", SPECS_PREFIX.rstrip("/")),
    ]
    if placement.on_aws:
        return [
            *env,
            _env_value("OBJECTSTORECONFIG_HOST", s3_endpoint(placement.region)),
            _env_value("OBJECTSTORECONFIG_PORT", "443"),
            _env_value("OBJECTSTORECONFIG_REGION", placement.region),
            _env_value("OBJECTSTORECONFIG_ACCESSKEY", ""),
            _env_value("OBJECTSTORECONFIG_SECRETACCESSKEY", ""),
        ]
    store = _store(spec)
    host, _, port = store.endpoint.partition(":")
    return [
        *env,
        _env_value("OBJECTSTORECONFIG_HOST", host),
        _env_value("OBJECTSTORECONFIG_PORT", port or "443"),
        _env_value("OBJECTSTORECONFIG_REGION", store.region),
        _env_secret("OBJECTSTORECONFIG_ACCESSKEY", OBJECT_STORE_SECRET, "accesskey"),
        _env_secret("OBJECTSTORECONFIG_SECRETACCESSKEY", OBJECT_STORE_SECRET, "secretkey"),
    ]


def ui_object_store_env(spec: PipelinesSpec, placement: PipelinesPlacement) -> list[Manifest]:
    """The UI's S3 settings (``frontend/server/configs.ts``): the regional endpoint and
    the default credential chain on AWS; the site's endpoint and key pair on premises."""
    if placement.on_aws:
        return [
            _env_value("AWS_REGION", placement.region),
            _env_value("AWS_S3_ENDPOINT", s3_endpoint(placement.region)),
            _env_value("AWS_SSL", "true"),
        ]
    store = _store(spec)
    return [
        _env_value("AWS_REGION", store.region),
        _env_value("AWS_S3_ENDPOINT", store.endpoint),
        _env_value("AWS_SSL", "true"),
        _env_secret("AWS_ACCESS_KEY_ID", OBJECT_STORE_SECRET, "accesskey"),
        _env_secret("AWS_SECRET_ACCESS_KEY", OBJECT_STORE_SECRET, "secretkey"),
    ]


def _api_server(pod: Manifest, spec: PipelinesSpec, placement: PipelinesPlacement) -> None:
    (server,) = (c for c in pod["containers"] if c["name"] == "ml-pipeline-api-server")
    # Upstream's object-store entries name the example key pair's Secret.
    server["env"] = [e for e in server["env"] if not e["name"].startswith("OBJECTSTORECONFIG_")]
    _replace_env(
        server,
        [
            # The driver and launcher of every run, pinned (see the module docstring).
            _env_value("V2_DRIVER_IMAGE", placement.image("kfp-driver")),
            _env_value("V2_LAUNCHER_IMAGE", placement.image("kfp-launcher")),
            _env_value("PUBLISH_LOGS", "true"),
            _env_value("LOG_LEVEL", "info"),
            _env_value("PIPELINE_LOG_LEVEL", "1"),
            _env_value("CLUSTER_DOMAIN", "cluster.local"),
            *object_store_env(spec, placement),
        ],
    )
    server.setdefault("volumeMounts", []).append(
        {"name": "config", "mountPath": "/config/config.json", "subPath": "config.json"}
    )
    pod.setdefault("volumes", []).append(
        {"name": "config", "configMap": {"name": APISERVER_CONFIG}}
    )
    _api_server_tls(pod, server)


def api_server_command(cert_dir: str = TLS_DIR, served: str = SERVED_CERTIFICATE) -> str:
    """The API server's shell command: the image's (backend/Dockerfile ``CMD``) with the
    overlay's ``--tlsCertPath``/``--tlsCertKeyPath`` (main.go: both set, REST on 8888
    and gRPC on 8887 serve TLS, and every run is compiled with
    ``--ml_pipeline_tls_enabled``), after copying the certificate it starts with to
    ``served``: KFP reads its certificate once, at start, so `api_server_liveness`
    restarts it once cert-manager has renewed the one on disk."""
    return (
        f"cat {cert_dir}/tls.crt > {served} && exec {APISERVER_COMMAND} "
        f"--tlsCertPath={cert_dir}/tls.crt --tlsCertKeyPath={cert_dir}/tls.key"
    )


def api_server_liveness(
    cert_dir: str = TLS_DIR, served: str = SERVED_CERTIFICATE, port: int = API_HTTP_PORT
) -> list[str]:
    """The API server's liveness command (the image has ``sh`` and ``wget``; upstream's
    probe asks the health endpoint): the health endpoint answers over TLS with a
    certificate the cluster CA signed for ``localhost`` (an expired one fails), and the
    certificate on disk is still the one the server started with (after a renewal the
    kubelet restarts the container, which then reads the new one)."""
    return [
        "/bin/sh",
        "-c",
        f"wget -q -O /dev/null --ca-certificate={cert_dir}/{CA_KEY} "
        f"https://localhost:{port}{HEALTHZ_PATH} "
        f'&& [ "$(cat {cert_dir}/tls.crt)" = "$(cat {served})" ]',
    ]


def _https_probe(**timing: int) -> Manifest:
    # The kubelet does not verify the certificate (the overlay's probes).
    get = {"path": HEALTHZ_PATH, "port": API_HTTP_PORT, "scheme": "HTTPS"}
    return {"httpGet": get, **timing}


def _api_server_tls(pod: Manifest, server: Manifest) -> None:
    """The overlay's API server patch (patches/ml-pipeline-apiserver-deployment.yaml):
    the certificate's Secret at ``/etc/pki/tls/certs``, the TLS flags, HTTPS probes and
    ``CABUNDLE_SECRET_NAME``, the Secret every run's driver and launcher mount (its
    ``ca.crt`` at ``/kfp/certs``) and pass as ``--ca_cert_path`` (argocompiler
    ``ConfigureCustomCABundle``): here the namespace's cluster-CA bundle, not the
    server's own Secret, so no run's pod mounts the server's key. The overlay's
    ``METADATA_TLS_ENABLED``: every driver and launcher then dials ML Metadata over TLS
    (argocompiler container.go, dag.go, importer.go add ``--metadata_tls_enabled``;
    driver.go passes it on to the launcher; client_manager.go and driver main.go build
    the TLS config from ``--ca_cert_path``, util/tls_config.go: system roots plus the
    cluster CA), by ``metadata-grpc-service.kubeflow.svc.cluster.local``
    (v2/metadata/env.go), a name of its certificate. Not the overlay's
    ``ML_PIPELINE_SERVICE_HOST`` (no code of the 2.17.0 backend reads it)."""
    server["command"] = ["/bin/sh", "-c", api_server_command()]
    server.pop("args", None)
    _replace_env(
        server,
        [
            _env_value("CABUNDLE_SECRET_NAME", CA_BUNDLE_SECRET),
            _env_value("METADATA_TLS_ENABLED", "true"),
        ],
    )
    server["readinessProbe"] = _https_probe(
        initialDelaySeconds=3, periodSeconds=5, timeoutSeconds=2
    )
    server["startupProbe"] = _https_probe(failureThreshold=12, periodSeconds=5, timeoutSeconds=2)
    server["livenessProbe"] = {
        "exec": {"command": api_server_liveness()},
        "initialDelaySeconds": 3,
        "periodSeconds": 10,
        "timeoutSeconds": 5,
    }
    server["volumeMounts"].append({"name": "tls-certs", "mountPath": TLS_DIR, "readOnly": True})
    pod["volumes"].append({"name": "tls-certs", "secret": {"secretName": API_TLS_SECRET}})


def _ca_client(pod: Manifest, container: Manifest) -> None:
    """A client of the API server: the cluster CA (only ``ca.crt`` of the namespace's
    bundle, not the server's Secret as the overlay mounts it) where the overlay mounts
    it."""
    container.setdefault("volumeMounts", []).append(
        {"name": "tls-ca", "mountPath": TLS_DIR, "readOnly": True}
    )
    pod.setdefault("volumes", []).append(ca_volume("tls-ca"))


def _controller_tls(pod: Manifest, command: str) -> None:
    """The persistence agent or scheduled-workflow controller: its image's command with
    the overlay's TLS flags (the overlay's patches/ml-pipeline-persistenceagent-
    deployment.yaml and ml-pipeline-scheduledworkflow-deployment.yaml)."""
    (controller,) = pod["containers"]
    controller["command"] = ["/bin/sh", "-c", f"{command} {CLIENT_TLS_FLAGS}"]
    controller.pop("args", None)
    _ca_client(pod, controller)


def metadata_server_command(cert_dir: str = TLS_DIR, config_dir: str = MLMD_CONFIG_DIR) -> str:
    """ML Metadata's shell command: write its server config, then start it from it.

    ML Metadata 1.14.0 has no TLS flags: its server serves TLS only when the config
    file names an ``ssl_config`` (google/ml-metadata v1.14.0,
    ml_metadata/metadata_store/metadata_store_server_main.cc: ``has_ssl_config()`` ->
    ``BuildSslServerCredentials``, PEM strings, read once at start), and with a config
    file the database connection must be in it too (``--metadata_source_config_type=
    config_file``; the ``--postgres_config_*`` flags are then not read). So, as KFP
    2.17.0's overlay does (patches/metadata-grpc-deployment.yaml, whose writer is for
    MySQL), the command writes ``connection_config { postgresql { ... } }`` (the
    platform's: the PgBouncer sidecar on the loopback, the env upstream's args use),
    ``migration_options`` (upstream's ``--enable_database_upgrade=true``) and the
    certificate, into a memory-backed directory readable by the server's user only.
    Strings are text-format escaped (backslash and quote in the secrets; the PEMs'
    line ends as ``\n``, the overlay's ``escape``). It copies the certificate it
    started with for `metadata_server_liveness` (a renewal restarts the container).
    No client certificate is asked for (``client_verify: false``, the overlay's).
    """
    escape_pem = "sed ':a;N;$!ba;s/\\n/\\\\n/g' \"$1\""
    quote = "printf '%s' \"$1\" | sed 's/[\\\\\"]/\\\\&/g'"
    config = f"{config_dir}/config.pbtxt"
    return (
        "set -e; umask 077\n"
        f"pem() {{ {escape_pem}; }}\n"
        f"q() {{ {quote}; }}\n"
        f"cat > {config} <<EOF\n"
        "connection_config { postgresql {\n"
        f'  host: "{PROXY_HOST}"\n'
        '  port: "$(q "$POSTGRES_PORT")"\n'
        '  dbname: "$(q "$POSTGRES_DBNAME")"\n'
        '  user: "$(q "$POSTGRES_USER")"\n'
        '  password: "$(q "$POSTGRES_PASSWORD")"\n'
        "} }\n"
        "migration_options { enable_upgrade_migration: true }\n"
        "ssl_config {\n"
        f'  server_cert: "$(pem {cert_dir}/tls.crt)"\n'
        f'  server_key: "$(pem {cert_dir}/tls.key)"\n'
        "  client_verify: false\n"
        "}\n"
        "EOF\n"
        f"cat {cert_dir}/tls.crt > {config_dir}/served-tls.crt\n"
        f"exec /bin/metadata_store_server --grpc_port={MLMD_PORT} "
        "--metadata_source_config_type=config_file "
        f"--metadata_store_server_config_file={config}"
    )


def metadata_server_liveness(
    cert_dir: str = TLS_DIR, config_dir: str = MLMD_CONFIG_DIR, port: int = MLMD_PORT
) -> list[str]:
    """ML Metadata's liveness command: its port accepts (upstream's probe is a TCP
    check; bash's ``/dev/tcp``, the image is Ubuntu 20.04's) and the certificate on
    disk is still the one it started with, so that the kubelet restarts it after
    cert-manager's renewal (it reads its certificate once)."""
    return [
        "/bin/bash",
        "-c",
        f'[ "$(cat {cert_dir}/tls.crt)" = "$(cat {config_dir}/served-tls.crt)" ] '
        f"&& exec 3<>/dev/tcp/127.0.0.1/{port}",
    ]


def _metadata_server(pod: Manifest) -> None:
    """ML Metadata: connects to its sidecar, serves gRPC over TLS on upstream's port
    (`metadata_server_command`), the certificate where the overlay mounts it."""
    for init in pod["initContainers"]:
        if init["name"] == "wait-for-database":
            init["env"] = [_env_value("WAIT_HOST", PROXY_HOST), _env_value("WAIT_PORT", "5432")]
    (server,) = pod["containers"]
    server["command"] = ["/bin/sh", "-c", metadata_server_command()]
    server.pop("args", None)
    # The readiness probe stays upstream's TCP check (a TLS port accepts TCP).
    server["livenessProbe"] = {
        **{k: v for k, v in server["livenessProbe"].items() if k != "tcpSocket"},
        "exec": {"command": metadata_server_liveness()},
    }
    server.setdefault("volumeMounts", []).extend(
        [
            {"name": "tls-certs", "mountPath": TLS_DIR, "readOnly": True},
            {"name": "mlmd-config", "mountPath": MLMD_CONFIG_DIR},
        ]
    )
    pod.setdefault("volumes", []).extend(
        [
            {"name": "tls-certs", "secret": {"secretName": MLMD_TLS_SECRET}},
            {"name": "mlmd-config", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        ]
    )


def envoy_command(cert_dir: str = ENVOY_TLS_DIR, served: str = ENVOY_SERVED_CERTIFICATE) -> str:
    """Envoy's shell command: the image's entrypoint (third_party/metadata_envoy/
    Dockerfile at 2.17.0, ``envoy -c``) with upstream's config path, after copying the
    certificate it starts with (a static listener's certificate is read at start;
    `envoy_liveness` restarts it after a renewal)."""
    return f"cat {cert_dir}/tls.crt > {served} && exec /usr/local/bin/envoy -c {ENVOY_CONFIG}"


def envoy_liveness(
    cert_dir: str = ENVOY_TLS_DIR, served: str = ENVOY_SERVED_CERTIFICATE, port: int = ENVOY_PORT
) -> list[str]:
    """Envoy's liveness command (upstream has no probe): its listener accepts, and the
    certificate on disk is still the one it started with (the image is Ubuntu's, with
    bash)."""
    return [
        "/bin/bash",
        "-c",
        f'[ "$(cat {cert_dir}/tls.crt)" = "$(cat {served})" ] && exec 3<>/dev/tcp/127.0.0.1/{port}',
    ]


def _envoy(pod: Manifest) -> None:
    """ML Metadata's Envoy: its listener over TLS with its own certificate, the cluster
    CA to verify ML Metadata (`envoy_config`), probes on its listener."""
    (envoy,) = pod["containers"]
    envoy["command"] = ["/bin/sh", "-c", envoy_command()]
    envoy.pop("args", None)
    envoy["readinessProbe"] = {
        "tcpSocket": {"port": ENVOY_PORT},
        "initialDelaySeconds": 3,
        "periodSeconds": 5,
        "timeoutSeconds": 2,
    }
    envoy["livenessProbe"] = {
        "exec": {"command": envoy_liveness()},
        "initialDelaySeconds": 3,
        "periodSeconds": 10,
        "timeoutSeconds": 5,
    }
    envoy.setdefault("volumeMounts", []).append(
        {"name": "envoy-tls", "mountPath": ENVOY_TLS_DIR, "readOnly": True}
    )
    pod.setdefault("volumes", []).append(
        {"name": "envoy-tls", "secret": {"secretName": ENVOY_TLS_SECRET}}
    )
    _ca_client(pod, envoy)


def envoy_config(upstream: str) -> str:
    """Upstream's Envoy config (metadata-envoy-configmap) as the overlay's
    patches/metadata-envoy-configmap.yaml has it: the listener over TLS (its own
    certificate, ``h2`` and ``http/1.1``, no client certificate), the cluster to ML
    Metadata over TLS (the cluster CA, SNI the Service's name), and the certificate's
    name checked too (the overlay trusts any certificate of its CA; Envoy checks no name
    unless told)."""
    config = yaml.safe_load(upstream)
    (listener,) = config["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    chain["transport_socket"] = {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
            "DownstreamTlsContext",
            "common_tls_context": {
                "tls_certificates": [
                    {
                        "certificate_chain": {"filename": f"{ENVOY_TLS_DIR}/tls.crt"},
                        "private_key": {"filename": f"{ENVOY_TLS_DIR}/tls.key"},
                    }
                ],
                "alpn_protocols": ["h2", "http/1.1"],
            },
            "require_client_certificate": False,
        },
    }
    (cluster,) = [
        c for c in config["static_resources"]["clusters"] if c["name"] == ENVOY_MLMD_CLUSTER
    ]
    name = f"{MLMD_SERVICE}.{NAMESPACE}.svc"
    cluster["transport_socket"] = {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
            "UpstreamTlsContext",
            "sni": name,
            "common_tls_context": {
                "validation_context": {
                    "trusted_ca": {"filename": f"{TLS_DIR}/{CA_KEY}"},
                    "match_typed_subject_alt_names": [
                        {"san_type": "DNS", "matcher": {"exact": name}}
                    ],
                }
            },
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def _ui(pod: Manifest, spec: PipelinesSpec, placement: PipelinesPlacement) -> None:
    (ui,) = pod["containers"]
    ui["env"] = [e for e in ui["env"] if not e["name"].startswith("MINIO_")]
    _replace_env(
        ui,
        [
            # KFP publishes the runs' logs into the pipeline root; Argo's archive is off.
            _env_value("ARGO_ARCHIVE_LOGS", "false"),
            # Custom visualisations run code on the (left out) visualisation server.
            _env_value("ALLOW_CUSTOM_VISUALIZATIONS", "false"),
            *ui_object_store_env(spec, placement),
            # The overlay's patches/ml-pipeline-ui-deployment.yaml: the API server over
            # HTTPS by a name its certificate holds (the Service link would give its
            # IP), trusting the cluster CA besides Node's own roots. The port is the
            # one the Service link gives, set here so it does not depend on the links.
            _env_value("ML_PIPELINE_SERVICE_SCHEME", "https"),
            _env_value("ML_PIPELINE_SERVICE_HOST", f"{API_SERVICE}.{NAMESPACE}"),
            _env_value("ML_PIPELINE_SERVICE_PORT", str(API_HTTP_PORT)),
            # The same patch: ML Metadata's Envoy over HTTPS (frontend/server/configs.ts
            # METADATA_ENVOY_SERVICE_SERVICE_*; app.ts proxies ``/ml_metadata`` there,
            # http-proxy verifying with Node's roots and NODE_EXTRA_CA_CERTS).
            _env_value("METADATA_ENVOY_SERVICE_SERVICE_HOST", ENVOY_SERVICE),
            _env_value("METADATA_ENVOY_SERVICE_SERVICE_PORT", str(ENVOY_PORT)),
            _env_value("METADATA_ENVOY_SERVICE_SERVICE_SCHEME", "https"),
            _env_value("NODE_EXTRA_CA_CERTS", f"{TLS_DIR}/{CA_KEY}"),
        ],
    )
    _ca_client(pod, ui)
    pod["containers"].append(ui_tls_proxy(placement))
    pod["volumes"].append(
        {"name": "ui-tls", "secret": {"secretName": UI_TLS_SECRET, "defaultMode": 0o440}}
    )
    # The proxy reads the key as the pod's group (the Secret's files are root's, 0440).
    pod["securityContext"] = {**pod.get("securityContext", {}), "fsGroup": 1000}


def ui_tls_proxy(placement: PipelinesPlacement) -> Manifest:
    """ghostunnel in front of the UI, as in front of the tracking server
    (`modules.k8s.tracking.manifests.tls_proxy_container`): KFP 2.17.0's frontend has no
    TLS listener (frontend/server/app.ts, ``app.listen(port)``; the overlay gives the UI
    a CA to call the API server with, but no certificate to serve). TLS on the pod's
    3443 with a certificate from the cluster CA, re-read every hour (cert-manager's
    renewals), forwarded to the UI on the pod's loopback. No client certificates: the
    UI in single-user mode authenticates nobody (who may port-forward decides)."""
    return {
        "name": "tls-proxy",
        "image": placement.image("ghostunnel"),
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "server",
            f"--listen=0.0.0.0:{UI_TLS_PORT}",
            f"--target=127.0.0.1:{UI_PORT}",
            f"--cert={UI_PROXY_TLS_DIR}/tls.crt",
            f"--key={UI_PROXY_TLS_DIR}/tls.key",
            "--disable-authentication",
            "--timed-reload=1h",
        ],
        "ports": [{"name": UI_TLS_PORT_NAME, "containerPort": UI_TLS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": UI_TLS_PORT_NAME}, "periodSeconds": 10},
        "livenessProbe": {"tcpSocket": {"port": UI_TLS_PORT_NAME}, "periodSeconds": 30},
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "securityContext": security.restricted_container(1000),
        "volumeMounts": [{"name": "ui-tls", "mountPath": UI_PROXY_TLS_DIR, "readOnly": True}],
    }


def _workflow_controller(pod: Manifest, placement: PipelinesPlacement) -> None:
    (controller,) = pod["containers"]
    args = controller["args"]
    args[args.index("--executor-image") + 1] = placement.image("argoexec")


def _adapt_deployment(
    manifest: Manifest, spec: PipelinesSpec, placement: PipelinesPlacement
) -> Manifest:
    name = manifest["metadata"]["name"]
    pod = manifest["spec"]["template"]["spec"]
    for container in _containers(pod):
        container["image"] = mirrored(container["image"], placement)
        _limits(container)
        if container["name"].startswith("wait-for-"):
            # A shell loop around nc: nothing to write.
            container["securityContext"]["readOnlyRootFilesystem"] = True
    writable = [
        c["name"]
        for c in _containers(pod)
        if not c.get("securityContext", {}).get("readOnlyRootFilesystem")
    ]
    if writable:
        manifest["metadata"].setdefault("annotations", {})[READ_ONLY_EXCEPTION] = (
            f"{', '.join(writable)}: KFP {KFP_VERSION} runs its servers with a writable root "
            "file system (glog and Envoy write under /tmp) and upstream does not test them "
            "read-only; the init containers and the database proxy are read-only"
        )
    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), **placement.node_selector}
    pod["automountServiceAccountToken"] = name in API_CLIENTS
    pod.pop("priorityClassName", None)  # the PriorityClass is left out
    if name == "ml-pipeline":
        _api_server(pod, spec, placement)
    elif name == "metadata-grpc-deployment":
        _metadata_server(pod)
    elif name == "metadata-envoy-deployment":
        _envoy(pod)
    elif name == "ml-pipeline-ui":
        _ui(pod, spec, placement)
    elif name == "workflow-controller":
        _workflow_controller(pod, placement)
    elif name == "ml-pipeline-persistenceagent":
        _controller_tls(pod, PERSISTENCE_AGENT_COMMAND)
    elif name == "ml-pipeline-scheduledworkflow":
        _controller_tls(pod, SCHEDULED_WORKFLOW_COMMAND)
    if name in DATABASE_CLIENTS:
        pod["initContainers"] = [proxy_sidecar(placement), *pod.get("initContainers", [])]
        pod.setdefault("volumes", []).extend(proxy_volumes())
    return manifest


def _adapt_configmap(
    manifest: Manifest, spec: PipelinesSpec, placement: PipelinesPlacement, root: Any
) -> Manifest:
    name = manifest["metadata"]["name"]
    if name == "kfp-launcher":
        return launcher_config(spec, placement, root)
    data = manifest.setdefault("data", {})
    if name == "pipeline-install-config":
        data |= {
            "postgresHost": PROXY_HOST,
            "postgresPort": "5432",
            "pipelineDb": PIPELINE_DATABASE,
            "mlmdDb": METADATA_DATABASE,
            "bucketName": placement.bucket,
            "defaultPipelineRoot": root,
            "BLOCK_V1_PIPELINES": "true",
            "appVersion": KFP_VERSION,
        }
        data.pop("cacheDb", None)  # the cache webhook is left out
    elif name == "metadata-envoy-configmap":
        data["envoy-config.yaml"] = envoy_config(data["envoy-config.yaml"])
    elif name == "metadata-postgres-db-parameters":
        data |= {"POSTGRES_DBNAME": METADATA_DATABASE, "POSTGRES_PORT": "5432"}
    elif name == "workflow-controller-configmap":
        # No Argo artifact repository: v2 runs write artifacts and logs with KFP's
        # launcher; upstream's points at the bundled SeaweedFS with the example keys.
        data.pop("artifactRepository", None)
    return manifest


def adapt(
    manifest: Manifest, spec: PipelinesSpec, placement: PipelinesPlacement, root: Any
) -> Manifest | None:
    """An upstream object as the platform installs it; None when it is left out or
    replaced by the platform's own (`REPLACED`).

    Args:
        manifest: the upstream object (not changed).
        spec: the settings.
        placement: where KFP's state and images are (its ``bucket`` may be a Pulumi
            output: it is placed, never formatted).
        root: the runs' pipeline root, ``s3://<bucket>/pipelines/runs`` (an output too).
    """
    k = key(manifest)
    if k in LEFT_OUT or k in REPLACED:
        return None
    if k not in KEPT:
        raise KeyError(f"{k[0]}/{k[1]}: upstream object neither kept nor left out")
    manifest = copy.deepcopy(manifest)
    meta = manifest["metadata"]
    meta["labels"] = {**meta.get("labels", {}), **PART_OF}
    if manifest["kind"] == "Deployment":
        return _adapt_deployment(manifest, spec, placement)
    if manifest["kind"] == "Role" and meta["name"] == "pipeline-runner":
        manifest["rules"] = runner_rules(placement)
    if manifest["kind"] == "Role" and meta["name"] == "ml-pipeline-ui":
        manifest["rules"] = ui_rules(manifest["rules"], placement)
    if manifest["kind"] == "ConfigMap":
        return _adapt_configmap(manifest, spec, placement, root)
    if manifest["kind"] == "Service" and meta["name"] in (API_SERVICE, UI_SERVICE):
        return _tls_service(manifest)
    if manifest["kind"] == "Service" and meta["name"] == ENVOY_SERVICE:
        # The overlay's patches/metadata-envoy-service.yaml.
        (port,) = manifest["spec"]["ports"]
        port |= {"name": "tls", "appProtocol": "https"}
    return manifest


def _tls_service(manifest: Manifest) -> Manifest:
    """The API server's Service as the overlay patches it
    (patches/ml-pipeline-apiserver-service.yaml: 8888 named ``tls``, ``appProtocol:
    https``; upstream's scrape annotation follows); the UI's on 443 to its TLS proxy."""
    ports = manifest["spec"]["ports"]
    if manifest["metadata"]["name"] == API_SERVICE:
        for port in ports:
            if port["port"] == API_HTTP_PORT:
                port |= {"name": "tls", "appProtocol": "https"}
        annotations = manifest["metadata"].get("annotations", {})
        if "prometheus.io/scheme" in annotations:
            annotations["prometheus.io/scheme"] = "https"
        return manifest
    manifest["spec"]["ports"] = [
        {
            "name": UI_TLS_PORT_NAME,
            "port": UI_SERVICE_PORT,
            "protocol": "TCP",
            "targetPort": UI_TLS_PORT_NAME,
            "appProtocol": "https",
        }
    ]
    return manifest


def tls_objects() -> list[Manifest]:
    """The certificates, from the cluster CA: the API server's (the overlay's
    base-tls-certs/kfp-api-cert.yaml names of the API server, without the self-signed
    issuer), ML Metadata's and its Envoy's (the overlay's names of
    ``metadata-grpc-service`` and ``metadata-envoy-service``, each in a certificate of
    its own so that no server holds another's key), the UI
    proxy's, the API server's and UI's with ``localhost`` for ``kubectl
    port-forward``; and the namespace's cluster-CA bundle the clients mount
    (`modules.k8s.pki.spec.ca_bundle`)."""
    return [
        serving_certificate(
            API_TLS_SECRET, NAMESPACE, [*service_dns_names(API_SERVICE, NAMESPACE), "localhost"]
        ),
        serving_certificate(MLMD_TLS_SECRET, NAMESPACE, service_dns_names(MLMD_SERVICE, NAMESPACE)),
        serving_certificate(
            ENVOY_TLS_SECRET, NAMESPACE, service_dns_names(ENVOY_SERVICE, NAMESPACE)
        ),
        serving_certificate(
            UI_TLS_SECRET, NAMESPACE, [*service_dns_names(UI_SERVICE, NAMESPACE), "localhost"]
        ),
        namespace_ca(),
    ]


def namespace_ca() -> Manifest:
    """In ``kubeflow``: the cluster CA bundle (`ca_bundle`, as in every team namespace),
    one Secret for every client here: KFP's own (``CABUNDLE_SECRET_NAME``: the drivers,
    launchers and controllers verify the API server with it), the publisher and trigger,
    and the tracked steps, which verify the tracking server with its ``ca.crt``.
    kfp-kubernetes mounts a Secret whole, so the bundle's own client key pair comes
    along to the tracked steps; no platform endpoint accepts client certificates."""
    return ca_bundle(NAMESPACE)


def install_objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, kubernetes_version: str, root: Any
) -> list[Manifest]:
    """The platform's Namespace, then every upstream object the platform installs,
    adapted, in upstream order (CRDs included)."""
    objects = [pipelines_namespace(kubernetes_version)]
    for manifest in upstream_objects():
        adapted = adapt(manifest, spec, placement, root)
        if adapted is not None:
            objects.append(adapted)
    return objects


def pipelines_namespace(kubernetes_version: str) -> Manifest:
    """``kubeflow`` with Pod Security ``restricted`` (KFP 2.17 compiles runs' pods to the
    restricted profile) and the label that lets its AlertmanagerConfig route alerts."""
    return namespace(
        NAMESPACE,
        "restricted",
        kubernetes_version,
        labels={ALERT_ROUTING_LABEL: ALERT_ROUTING_VALUE},
    )


def launcher_config(spec: PipelinesSpec, placement: PipelinesPlacement, root: Any) -> Manifest:
    """The ``kfp-launcher`` ConfigMap every run's launcher reads: the pipeline root in the
    bucket and the S3 provider (KFP's ``providers`` format, backend/src/v2/config/s3.go):
    on AWS S3's regional endpoint over TLS with the default credential chain (Pod
    Identity of ``pipeline-runner``); on premises the site's endpoint over TLS with the
    key pair Secret. Uploads name no encryption: the bucket's default, SSE-KMS under
    the stack's key, applies (and its policy refuses any other key)."""
    default: dict[str, Any]
    if placement.on_aws:
        default = {
            "endpoint": s3_endpoint(placement.region),
            "region": placement.region,
            "disableSSL": False,
            "forcePathStyle": False,
            "credentials": {"fromEnv": True},
        }
    else:
        store = _store(spec)
        default = {
            "endpoint": store.endpoint,
            "region": store.region,
            "disableSSL": False,
            "forcePathStyle": True,
            "credentials": {
                "fromEnv": False,
                "secretRef": {
                    "secretName": OBJECT_STORE_SECRET,
                    "accessKeyKey": "accesskey",
                    "secretKeyKey": "secretkey",
                },
            },
        }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kfp-launcher",
            "namespace": NAMESPACE,
            "labels": {"application-crd-id": "kubeflow-pipelines", **PART_OF},
        },
        "data": {
            "defaultPipelineRoot": root,
            "providers": yaml.safe_dump({"s3": {"default": default}}, sort_keys=True),
        },
    }


def apiserver_configmap() -> Manifest:
    """The API server's ``config.json`` (`apiserver_config`), mounted over the image's."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(APISERVER_CONFIG, NAMESPACE),
        "data": {"config.json": json.dumps(apiserver_config(), indent=2, sort_keys=True)},
    }


# -- the database: PgBouncer next to each client --------------------------------------


def proxy_ini(database_host: str) -> str:
    """PgBouncer's ``pgbouncer.ini``: listens on the pod's loopback, logs in to the
    database server with TLS (``server_tls_sslmode = require``: encrypted, as the
    tracking server's own connection is; the server's CA is not mounted), and
    authenticates KFP with SCRAM from the users file (a Secret). Session pooling: KFP's
    API server runs ``CREATE DATABASE`` and migrations, which need a session."""
    return "\n".join(
        [
            "[databases]",
            f"* = host={database_host} port={DATABASE_PORT}",
            "",
            "[pgbouncer]",
            f"listen_addr = {PROXY_HOST}",
            "listen_port = 5432",
            "unix_socket_dir =",
            "auth_type = scram-sha-256",
            "auth_file = /etc/pgbouncer/users/userlist.txt",
            "pool_mode = session",
            "max_client_conn = 100",
            "default_pool_size = 20",
            "server_tls_sslmode = require",
            "client_tls_sslmode = disable",
            "ignore_startup_parameters = extra_float_digits",
            "logfile =",
            "pidfile =",
            "",
        ]
    )


def proxy_config(ini: Any) -> Manifest:
    """The ConfigMap with `proxy_ini` (no password in it: the policy pack reads the
    database host here)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(PROXY_CONFIG, NAMESPACE),
        "data": {"pgbouncer.ini": ini},
    }


def proxy_userlist(password: str) -> str:
    """PgBouncer's auth_file line for KFP's role (a plain password: PgBouncer logs in to
    the server with it, SCRAM on both sides)."""
    escaped = password.replace('"', '""')
    return f'"{DATABASE_USER}" "{escaped}"\n'


def proxy_volumes() -> list[Manifest]:
    return [
        {"name": "database-proxy-config", "configMap": {"name": PROXY_CONFIG}},
        {"name": "database-proxy-users", "secret": {"secretName": PROXY_USERS_SECRET}},
    ]


def proxy_sidecar(placement: PipelinesPlacement) -> Manifest:
    """PgBouncer as a native sidecar (an init container that keeps running, Kubernetes
    1.29+), so it is up before the client's own init containers wait for the
    database."""
    return {
        "name": "database-proxy",
        "image": placement.image("pgbouncer"),
        "restartPolicy": "Always",
        "command": ["/usr/bin/pgbouncer", "/etc/pgbouncer/pgbouncer.ini"],
        "volumeMounts": [
            {
                "name": "database-proxy-config",
                "mountPath": "/etc/pgbouncer/pgbouncer.ini",
                "subPath": "pgbouncer.ini",
                "readOnly": True,
            },
            {"name": "database-proxy-users", "mountPath": "/etc/pgbouncer/users", "readOnly": True},
        ],
        "resources": {
            "requests": {"cpu": "200m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"},
        },
        # The client's containers start once the sidecar accepts connections.
        "startupProbe": {"tcpSocket": {"port": 5432}, "periodSeconds": 2, "failureThreshold": 30},
        "securityContext": security.restricted_container(PGBOUNCER_UID),
    }


#: The CloudNativePG PostgreSQL image's ``postgres`` user (the database-init Job's psql).
POSTGRES_UID = 26


def database_host(placement: PipelinesPlacement) -> Any:
    """The database server's host: the tracking RDS instance's address on AWS (a Pulumi
    output), the CloudNativePG cluster's read-write Service on premises."""
    if placement.on_aws:
        return placement.database_host
    return f"{DATABASE_CLUSTER}-rw.{NAMESPACE}.svc.cluster.local"


def secret(name: str, ns: str, data: Mapping[str, Any], secret_type: str = "Opaque") -> Manifest:
    """A Secret from ``stringData`` (the component wraps every value in
    ``pulumi.Output.secret``: the plan shows ``[secret]``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(name, ns),
        "type": secret_type,
        "stringData": dict(data),
    }


def database_secrets(password: Any, userlist: Any) -> list[Manifest]:
    """KFP's database credentials under upstream's Secret names (the API server reads
    ``postgres-secret-extended``, ML Metadata ``metadata-postgres-db-secrets``) and
    PgBouncer's users file."""
    return [
        secret(DATABASE_SECRET, NAMESPACE, {"username": DATABASE_USER, "password": password}),
        secret(
            METADATA_SECRET,
            NAMESPACE,
            {"POSTGRES_USER": DATABASE_USER, "POSTGRES_PASSWORD": password},
        ),
        secret(PROXY_USERS_SECRET, NAMESPACE, {"userlist.txt": userlist}),
    ]


def database_cluster(spec: PipelinesSpec, placement: PipelinesPlacement) -> Manifest:
    """On premises: KFP's PostgreSQL as a CloudNativePG ``Cluster`` of the operator the
    tracking server installs (Feast's registry does the same): the owner role with the
    platform's password, ``CREATEDB`` (KFP's API server runs ``CREATE DATABASE`` at
    start and only ignores "already exists"; PostgreSQL checks the right first), and
    ML Metadata's database made after the bootstrap."""
    amount = {"cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": metadata(DATABASE_CLUSTER, NAMESPACE),
        "spec": {
            "instances": spec.database_instances,
            "imageName": placement.image("postgresql"),
            "enableSuperuserAccess": False,
            "bootstrap": {
                "initdb": {
                    "database": PIPELINE_DATABASE,
                    "owner": DATABASE_USER,
                    "secret": {"name": DATABASE_OWNER_SECRET},
                    "postInitApplicationSQL": [
                        f"ALTER ROLE {DATABASE_USER} CREATEDB",
                        f"CREATE DATABASE {METADATA_DATABASE} OWNER {DATABASE_USER}",
                    ],
                }
            },
            "storage": {
                "storageClass": placement.storage_class,
                "size": f"{spec.database_storage_gib}Gi",
            },
            "resources": {"requests": dict(amount), "limits": dict(amount)},
            "affinity": {"nodeSelector": dict(placement.node_selector)},
            "enablePDB": spec.database_instances > 1,
        },
    }


#: On premises: the owner's credentials for CloudNativePG (``kubernetes.io/basic-auth``).
DATABASE_OWNER_SECRET = "kfp-db-owner"


def database_init_job(placement: PipelinesPlacement, database_host_value: Any) -> Manifest:
    """On AWS: create KFP's role (with ``CREATEDB``, see `database_cluster`) and both
    databases on the tracking RDS instance, idempotently, as its master user, from the
    ``mlflow`` namespace where the master credentials are (as Feast's registry does).
    KFP's password comes from `DATABASE_INIT_SECRET` there."""
    user, pipeline_db, metadata_db = DATABASE_USER, PIPELINE_DATABASE, METADATA_DATABASE
    script = (
        "set -eu\n"
        "psql -v ON_ERROR_STOP=1 -v pw=\"$KFP_DATABASE_PASSWORD\" <<'SQL'\n"
        f"SELECT 'CREATE ROLE {user} LOGIN' WHERE NOT EXISTS "
        f"(SELECT FROM pg_roles WHERE rolname = '{user}')\\gexec\n"
        f"ALTER ROLE {user} WITH LOGIN CREATEDB PASSWORD :'pw';\n"
        f"GRANT {user} TO CURRENT_USER;\n"
        f"SELECT 'CREATE DATABASE {pipeline_db} OWNER {user}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_database WHERE datname = '{pipeline_db}')\\gexec\n"
        f"SELECT 'CREATE DATABASE {metadata_db} OWNER {user}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_database WHERE datname = '{metadata_db}')\\gexec\n"
        "SQL\n"
    )
    master = {"name": placement.tracking_database_secret}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata("kfp-database-init", "mlflow", labels=labels("database-init")),
        "spec": {
            "backoffLimit": 6,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": labels("database-init")},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "automountServiceAccountToken": False,
                    "securityContext": security.restricted_pod(POSTGRES_UID, fs_group=False),
                    "nodeSelector": dict(placement.node_selector),
                    "containers": [
                        {
                            "name": "psql",
                            "image": placement.image("postgresql"),
                            "command": ["/bin/sh", "-c", script],
                            "env": [
                                _env_value("PGSSLMODE", "require"),
                                _env_value("PGDATABASE", "mlflow"),
                                {"name": "PGHOST", "value": database_host_value},
                                _env_secret("PGUSER", master["name"], "username"),
                                _env_secret("PGPASSWORD", master["name"], "password"),
                                _env_secret(
                                    "KFP_DATABASE_PASSWORD", DATABASE_INIT_SECRET, "password"
                                ),
                            ],
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "64Mi"},
                                "limits": {"cpu": "500m", "memory": "128Mi"},
                            },
                            "securityContext": security.restricted_container(POSTGRES_UID),
                        }
                    ],
                },
            },
        },
    }


#: On AWS: KFP's password for the init Job, in the ``mlflow`` namespace.
DATABASE_INIT_SECRET = "kfp-database-init"


# -- fences --------------------------------------------------------------------------


def _policy(name: str, spec: Manifest, ns: str = NAMESPACE) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, ns),
        "spec": spec,
    }


def _namespace_peer(name: str) -> Manifest:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def _pods(*names: str) -> Manifest:
    """A selector of KFP's Deployments' pods by their ``app``/``component`` labels."""
    values = {
        "ml-pipeline": ("app", "ml-pipeline"),
        "ml-pipeline-ui": ("app", "ml-pipeline-ui"),
        "metadata-grpc-deployment": ("component", "metadata-grpc-server"),
    }
    (label,) = {values[n][0] for n in names}
    return {
        "matchExpressions": [
            {"key": label, "operator": "In", "values": sorted(values[n][1] for n in names)}
        ]
    }


def network_policies(spec: PipelinesSpec, placement: PipelinesPlacement) -> list[Manifest]:
    """Default-deny in ``kubeflow``, then what KFP needs:

    * every pod: DNS, and the other pods of the namespace (UI -> API server and Envoy,
      Envoy -> ML Metadata, runs -> API server and ML Metadata, controllers -> API
      server, the trigger and publisher -> API server);
    * the Kubernetes API (controllers, the API server, the UI, the runs' executors):
      the VPC on EKS (the cluster endpoint's interfaces are in it), the site's API
      server CIDRs on premises;
    * the database: the API server's and ML Metadata's pods, to RDS in the VPC (5432)
      on AWS; on premises the CloudNativePG pods are in the namespace;
    * the object store (443): S3's interface endpoint in the VPC and the Pod Identity
      agent on AWS; the site's store on premises.

    Nothing outside the namespace may connect in: the UI is reached with
    ``kubectl port-forward`` (through the API server and the kubelet, which
    NetworkPolicies do not see), the trigger only from Alertmanager (`loop`)."""
    own: list[Manifest] = [{"podSelector": {}}]
    # The platform's convention (modules.k8s.netpol): the default deny, DNS, and here the
    # namespace's pods to each other.
    policies = [
        netpol.default_deny(NAMESPACE),
        netpol.allow_dns(NAMESPACE),
        _policy(
            "allow-same-namespace",
            {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": own}],
                "egress": [{"to": own}],
            },
        ),
    ]
    if placement.on_aws:
        vpc = [{"ipBlock": {"cidr": placement.vpc_cidr}}]
        api = {"to": vpc, "ports": [{"protocol": "TCP", "port": 443}]}
        store: list[Manifest] = [
            {"to": vpc, "ports": [{"protocol": "TCP", "port": 443}]},
            {
                "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT_CIDR}}],
                "ports": [{"protocol": "TCP", "port": POD_IDENTITY_AGENT_PORT}],
            },
        ]
    else:
        api = {
            "to": [{"ipBlock": {"cidr": c}} for c in spec.api_server_cidrs],
            "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}],
        }
        cidrs = spec.object_store.cidrs if spec.object_store is not None else ()
        store = [
            {
                "to": [{"ipBlock": {"cidr": c}} for c in cidrs],
                "ports": [{"protocol": "TCP", "port": 443}],
            }
        ]
    policies.append(
        _policy(
            "allow-kubernetes-api",
            {"podSelector": {}, "policyTypes": ["Egress"], "egress": [api]},
        )
    )
    # Runs (their launchers), the API server and the UI reach the object store.
    policies.append(
        _policy(
            "allow-object-store",
            {
                "podSelector": {
                    "matchExpressions": [
                        {
                            "key": "app",
                            "operator": "In",
                            "values": ["ml-pipeline", "ml-pipeline-ui"],
                        }
                    ]
                },
                "policyTypes": ["Egress"],
                "egress": store,
            },
        )
    )
    policies.append(
        _policy(
            "allow-runs-object-store",
            {
                # Every pod of a run carries Argo's workflow label.
                "podSelector": {
                    "matchExpressions": [
                        {"key": "workflows.argoproj.io/workflow", "operator": "Exists"}
                    ]
                },
                "policyTypes": ["Egress"],
                "egress": store,
            },
        )
    )
    if placement.on_aws:
        policies.append(
            _policy(
                "allow-database",
                {
                    "podSelector": _pods("ml-pipeline"),
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": placement.vpc_cidr}}],
                            "ports": [{"protocol": "TCP", "port": DATABASE_PORT}],
                        }
                    ],
                },
            )
        )
        policies.append(
            _policy(
                "allow-metadata-database",
                {
                    "podSelector": _pods("metadata-grpc-deployment"),
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": placement.vpc_cidr}}],
                            "ports": [{"protocol": "TCP", "port": DATABASE_PORT}],
                        }
                    ],
                },
            )
        )
    else:
        # CloudNativePG's operator (in its own namespace) manages the instances.
        policies.append(
            _policy(
                "allow-database-operator",
                {
                    "podSelector": {"matchLabels": {"cnpg.io/cluster": DATABASE_CLUSTER}},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [_namespace_peer("cnpg-system")],
                            "ports": [
                                {"protocol": "TCP", "port": 8000},
                                {"protocol": "TCP", "port": DATABASE_PORT},
                            ],
                        }
                    ],
                },
            )
        )
    return policies


# -- the runs' MLflow user -------------------------------------------------------------

#: The label the compiled pipeline puts on the pods of its steps that talk to MLflow
#: (``workloads.pipelines.steps.TRACKING_CLIENT_LABEL``; tests/k8s checks the IR): the
#: only pods of ``kubeflow`` the fences let reach the tracking server.
TRACKING_CLIENT_LABEL = "gpuplatform.ae/mlflow-client"
TRACKING_CLIENTS = {TRACKING_CLIENT_LABEL: "true"}


def tracking_credentials(password: Any) -> Manifest:
    """In ``kubeflow``: the runs' MLflow user (``pipelines``, the tracking server's
    users file has it) under the name and keys a team namespace's has
    (``mlflow-credentials``: ``username``, ``password``); the compiled pipeline's
    tracked steps read it as environment (kfp-kubernetes ``use_secret_as_env``: a
    reference in the pod, so the ``pipeline-runner`` Role needs no right on Secrets)."""
    return secret(
        TEAM_CREDENTIALS_SECRET, NAMESPACE, {"username": PIPELINES_USERNAME, "password": password}
    )


def tracking_allowance() -> Manifest:
    """In ``mlflow``: the tracked steps' pods (`TRACKING_CLIENTS`) may reach the tracking
    server's TLS port, as the team namespaces may (its own policy admits team
    namespaces and Prometheus only; NetworkPolicies add up). MLflow's own plain port
    stays the kubelet's alone."""
    return _policy(
        "allow-kubeflow-pipelines",
        {
            "podSelector": {"matchLabels": dict(SERVER_POD_LABELS)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            **_namespace_peer(NAMESPACE),
                            "podSelector": {"matchLabels": dict(TRACKING_CLIENTS)},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": TLS_PORT}],
                }
            ],
        },
        ns=TRACKING_NAMESPACE,
    )


def runs_tracking_egress() -> Manifest:
    """In ``kubeflow``: the tracked steps' pods may reach the tracking server's pods on
    its TLS port, and nothing else of ``mlflow``."""
    return _policy(
        "allow-runs-tracking",
        {
            "podSelector": {"matchLabels": dict(TRACKING_CLIENTS)},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            **_namespace_peer(TRACKING_NAMESPACE),
                            "podSelector": {"matchLabels": dict(SERVER_POD_LABELS)},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": TLS_PORT}],
                }
            ],
        },
    )
