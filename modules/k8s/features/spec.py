"""Typed settings and pure manifests of the feature store (Feast) on the cluster.

Nothing here calls Pulumi: `FeaturesSpec` validates the stack-file section
``uae-gpu-platform:features``, and the functions build the objects and Helm values the
thin `component` registers (and the tests check against the upstream charts and the
Kubernetes schemas).

What runs, in the namespace ``feast``:

- **Registry**: Feast's SQL registry in a database ``feast`` on the tracking server's
  PostgreSQL: on AWS the tracking RDS instance (a Job creates the role and database once,
  from the ``mlflow`` namespace that holds the master credentials); on premises a
  CloudNativePG cluster ``feast-registry`` of the operator the tracking server uses.
- **Offline store**: Parquet under ``s3://<data bucket>/features/`` (SSE-KMS with the
  stack's key, the bucket's default) on AWS, read through the region's S3 endpoint
  (`s3_endpoint`) with EKS Pod Identity; a volume on premises. The sources' paths are
  in the registry: the Job ``feast-apply`` registers the repository with them.
- **Online store**: Redis over TLS with a password: ElastiCache on AWS
  (`modules.aws.online_store`); on premises Valkey (the Linux Foundation's
  Redis-protocol server; its official chart, pinned) with a persistent volume.
- **Feature server**: the upstream ``feast-feature-server`` chart (pinned) running the
  platform's features image, reachable only through an authenticating proxy
  (kube-rbac-proxy: Kubernetes ServiceAccount tokens, TokenReview and RBAC, TLS), as
  the inference endpoints are. Feast's own ``auth: kubernetes`` is not used: in Feast
  0.67 it reads the caller's identity from the token's claims without verifying its
  signature (``kubernetes_token_parser._decode_token``).
- **Materialisation**: a CronJob running ``feast materialize-incremental`` on the
  schedule.
- **Training**: the tabular model's TrainJob in a team's namespace on a CPU pool
  (`modules.k8s.features.training`), on AWS.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

from modules.aws.online_store.spec import REDIS_PORT, OnlineStoreSpec
from modules.k8s import rbac, security
from modules.k8s.versions import Chart
from modules.validation import Checker

Manifest = dict[str, Any]

NAMESPACE = "feast"
#: The upstream feature server chart (feast-dev/feast infra/charts/feast-feature-server).
FEATURE_SERVER_CHART = Chart(
    "feast-feature-server", "0.66.0", "https://feast-helm-charts.storage.googleapis.com"
)
#: The official Valkey chart (valkey-io/valkey-helm) and the Valkey it runs (appVersion).
VALKEY_CHART = Chart("valkey", "0.11.0", "https://valkey.io/valkey-helm/")
VALKEY_TAG = "9.1.1"
KUBE_RBAC_PROXY_TAG = "v0.18.0"  # the tag the serving layer runs
#: CloudNativePG's PostgreSQL image (the tracking database's major version).
POSTGRES_IMAGE_TAG = "17.6"

SERVER_RELEASE = "feast-feature-server"  # the chart's fullname is then the release name
#: The feature server pods' ``app.kubernetes.io/name`` (the chart's name).
SERVER_NAME = "feast-feature-server"
#: The materialisation CronJob's and the registry init Job's pod names (labels).
MATERIALIZE_NAME = "feast-materialize"
REGISTRY_INIT_NAME = "feast-registry-init"
REGISTRY_PORT = 5432
SERVER_SERVICE_PORT = 80
SERVER_CONTAINER_PORT = 6566
PROXY_NAME = "feast-endpoint"
PROXY_PORT = 8443
PROXY_HEALTH_PORT = 8643
PROXY_CONFIG = "feast-endpoint-auth"
TLS_SECRET = "feast-endpoint-tls"
ONLINE_RELEASE = "feast-online-store"  # Valkey on premises
ONLINE_TLS_SECRET = "feast-online-store-tls"
ONLINE_USERS_SECRET = "feast-online-store-users"
CREDENTIALS_SECRET = "feast-store-credentials"
REPO_CONFIGMAP = "feast-feature-repo"
REGISTRY_CLUSTER = "feast-registry"
REGISTRY_DATABASE = "feast"
REGISTRY_USER = "feast"
REGISTRY_INIT_SECRET = "feast-registry-init"
#: The tracking server's namespace, where the registry init Job runs on AWS
#: (`modules.k8s.tracking.manifests.TRACKING_NAMESPACE`; this module stays free of
#: Pulumi for the features environment's tests, so a test ties the two).
TRACKING_NAMESPACE = "mlflow"
#: The registry's clients verify the database server (libpq's verify-full: its
#: certificate chains to this CA and names the host connected to) with the CA mounted at
#: `REGISTRY_CA_DIR`: on AWS the region's RDS authorities (`registry_ca_configmap`; the
#: init Job, in the tracking namespace, mounts the tracking server's copy,
#: `modules.k8s.tracking.manifests.DATABASE_CA_CONFIGMAP`, tied by a test), on premises
#: only the ``ca.crt`` of the Secret CloudNativePG keeps its cluster's CA in.
REGISTRY_SSL_MODE = "verify-full"
REGISTRY_CA_CONFIGMAP = "feast-database-ca"
TRACKING_DATABASE_CA_CONFIGMAP = "mlflow-database-ca"
REGISTRY_CA_SECRET = f"{REGISTRY_CLUSTER}-ca"
REGISTRY_CA_KEY = "ca.crt"
REGISTRY_CA_VOLUME = "registry-ca"
REGISTRY_CA_DIR = "/etc/feast/registry-ca"
REGISTRY_CA_FILE = f"{REGISTRY_CA_DIR}/{REGISTRY_CA_KEY}"
SERVICE_ACCOUNT = "feast"
#: The features image's user (``workloads/features/Dockerfile``): 10000 or more, so
#: that no container user is also a user of the node (checkov CKV_K8S_40).
RUN_AS = 10001
#: The feature server's authorisation: RBAC verb (POST -> create, GET -> get) on this
#: virtual resource, which a Role grants to the client namespaces' ServiceAccounts.
AUTH_API_GROUP = "gpuplatform.ae"
AUTH_RESOURCE = "featureservers"
AUTH_NAME = "online"
#: Environment variables Feast expands in feature_store.yaml (never written into it).
ENV_REGISTRY_HOST = "FEAST_REGISTRY_HOST"
ENV_REGISTRY_PASSWORD = "FEAST_REGISTRY_PASSWORD"
ENV_REDIS_HOST = "FEAST_REDIS_HOST"
ENV_REDIS_PASSWORD = "FEAST_REDIS_PASSWORD"
#: Why the Feast jobs take the stores' logins as environment variables (checkov
#: CKV_K8S_35): feature_store.yaml names them as ``${VAR}``, which Feast expands from the
#: environment only, so that no login is written into the repository's file.
SECRETS_IN_ENV = security.scanner_exceptions(
    {
        "CKV_K8S_35": "Feast expands the stores' logins in feature_store.yaml from the "
        "environment only (${VAR}); none is written into the file"
    }
)

_CRON = re.compile(r"^(\S+\s+){4}\S+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class FeaturesSpec:
    """The feature store (config key ``uae-gpu-platform:features``).

    Args:
        enabled: deploy it (default false).
        image_tag: tag of the features image (``features`` in the stack's registry; built
            from ``workloads/features``): the feature server and materialisation run it,
            since on-demand features import the feature repository's code.
        server_replicas: feature server pods (default 2, so a node drain is no outage).
        cpu_millicores: CPU request and limit of a feature server pod (default 500).
        memory_mib: memory request and limit of a feature server pod (default 1024).
        materialize_schedule: cron schedule of ``materialize-incremental`` (default
            hourly at minute 17).
        client_namespaces: namespaces whose ServiceAccounts may read online features
            (each must exist; the model servers' namespaces).
        online_store: ElastiCache settings (AWS).
        onprem_online_storage_gib: the Valkey volume on premises (default 20).
        onprem_offline_storage_gib: the Parquet volume on premises (default 100).
        training_team: the team whose namespace and Kueue queue run the tabular model's
            training TrainJob (AWS; default none: no job).
        training_pool: its node pool, a ``cpu-training`` pool of the stack.
        training_held: create the TrainJob without the team's queue label, so nothing
            starts it (default true, like the example job); false: Kueue admits it.
    """

    enabled: bool = False
    image_tag: str = "0.1.0"
    server_replicas: int = 2
    cpu_millicores: int = 500
    memory_mib: int = 1024
    materialize_schedule: str = "17 * * * *"
    client_namespaces: tuple[str, ...] = ()
    online_store: OnlineStoreSpec = field(default_factory=OnlineStoreSpec)
    onprem_online_storage_gib: int = 20
    onprem_offline_storage_gib: int = 100
    training_team: str = ""
    training_pool: str = ""
    training_held: bool = True

    def __post_init__(self) -> None:
        check = Checker()
        check.fixed_image_tag("image_tag", self.image_tag)
        check.require(
            bool(_CRON.match(self.materialize_schedule)),
            "materialize_schedule",
            self.materialize_schedule,
            "a five-field cron schedule such as '17 * * * *'",
        )
        ranges = {
            "server_replicas": (1, 20),
            "cpu_millicores": (250, 16_000),
            "memory_mib": (512, 65_536),
            "onprem_online_storage_gib": (1, 4096),
            "onprem_offline_storage_gib": (1, 65_536),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            check.require(low <= value <= high, name, value, f"use {low} to {high}")
        check.require(
            bool(self.training_team) == bool(self.training_pool),
            "training_pool",
            self.training_pool,
            "training_team and training_pool go together",
        )
        for index, namespace in enumerate(self.client_namespaces):
            check.require(
                bool(_DNS_LABEL.match(namespace)) and namespace != NAMESPACE,
                f"client_namespaces[{index}]",
                namespace,
                "a namespace name (DNS label), not the feature store's own",
            )
        check.done()


@dataclass(frozen=True)
class Placement:
    """Where the feature store runs and what it connects to (from the composition).

    Args:
        on_aws: ElastiCache, RDS and S3 (true) or Valkey, CloudNativePG and volumes.
        registry: the image registry in the region (ECR) or the site's.
        offline_uri: where the Parquet sources are: ``s3://<bucket>/features`` (a
            Pulumi output of the bucket's name) or a path on the offline volume.
        node_selector: the system pool's labels.
        region: the stack's AWS region (the S3 endpoint and the clients' signing
            region); empty on premises.
        database_ca: on AWS the PEM certificates of RDS's authorities in the region
            (`modules.aws.database.ca_bundle`), which the registry's clients verify the
            database with; empty on premises.
    """

    on_aws: bool
    registry: str
    offline_uri: Any
    node_selector: dict[str, str]
    region: str = ""
    database_ca: str = ""


def s3_endpoint(placement: Placement) -> str:
    """The region's S3 endpoint on AWS (no request leaves the region); empty on
    premises."""
    return f"https://s3.{placement.region}.amazonaws.com" if placement.on_aws else ""


def s3_env(placement: Placement) -> list[Manifest]:
    """The S3 clients' region (PyArrow's and s3fs's sign with it) and endpoint."""
    if not placement.on_aws:
        return []
    return [
        {"name": "AWS_REGION", "value": placement.region},
        {"name": "AWS_DEFAULT_REGION", "value": placement.region},
        {"name": "FEATURES_S3_ENDPOINT", "value": s3_endpoint(placement)},
    ]


def _meta(name: str, namespace: str = NAMESPACE, **labels: str) -> Manifest:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/part-of": "gpuplatform",
            "app.kubernetes.io/managed-by": "pulumi",
            **labels,
        },
    }


def restricted_container() -> Manifest:
    """The restricted Pod Security profile for one container."""
    return security.restricted_container(RUN_AS)


def pod_security() -> Manifest:
    return security.restricted_pod(RUN_AS)


def image(placement: Placement, name: str, tag: str) -> str:
    return f"{placement.registry}/{name}:{tag}"


# -- feature_store.yaml ---------------------------------------------------------------


def registry_host(on_aws: bool, rds_address: str = "") -> str:
    """The registry database's host: the tracking RDS instance, or the CloudNativePG
    read-write Service on premises (a name its server certificate carries, as
    verify-full requires)."""
    return rds_address if on_aws else f"{REGISTRY_CLUSTER}-rw.{NAMESPACE}.svc.cluster.local"


def redis_host_onprem() -> str:
    return f"{ONLINE_RELEASE}-valkey.{NAMESPACE}.svc.cluster.local"


#: Where the online store's CA certificate is mounted on premises (the platform's CA,
#: from the Valkey certificate's Secret); ElastiCache's certificate is publicly trusted.
ONLINE_CA_DIR = "/etc/feast/online-store-ca"


def feature_store_yaml(redis_ca: str | None = None) -> str:
    """The cluster's ``feature_store.yaml``: SQL registry, Redis over TLS, Parquet (the
    sources' locations and S3 endpoint are the registry's, from ``feast-apply``).

    Hosts and passwords are ``${...}`` references Feast expands from the environment
    (the Secret `CREDENTIALS_SECRET`), so the file itself holds no secret and the
    chart's value (``feature_store_yaml_base64``) can be plain. The registry's URL asks
    psycopg (libpq) to verify the database's certificate and name against
    `REGISTRY_CA_FILE` (`registry_ca` mounts it). Feast hands the online store's
    connection string's options to redis-py: TLS verifies the server's certificate,
    against ``redis_ca`` when given (on premises), else the system's trust store.
    """
    verify = f",ssl_ca_certs={redis_ca}" if redis_ca else ""
    return (
        "project: smb_churn\n"
        "provider: local\n"
        "registry:\n"
        "  registry_type: sql\n"
        f"  path: postgresql+psycopg://{REGISTRY_USER}:${{{ENV_REGISTRY_PASSWORD}}}"
        f"@${{{ENV_REGISTRY_HOST}}}:5432/{REGISTRY_DATABASE}"
        f"?sslmode={REGISTRY_SSL_MODE}&sslrootcert={REGISTRY_CA_FILE}\n"
        "  cache_ttl_seconds: 60\n"
        "  sqlalchemy_config_kwargs:\n"
        "    pool_pre_ping: true\n"
        "online_store:\n"
        "  type: redis\n"
        f"  connection_string: ${{{ENV_REDIS_HOST}}}:{REDIS_PORT},ssl=true,"
        f"password=${{{ENV_REDIS_PASSWORD}}}{verify}\n"
        "offline_store:\n"
        "  type: file\n"
        "entity_key_serialization_version: 3\n"
    )


def online_ca(placement: Placement) -> tuple[str | None, list[Manifest], list[Manifest]]:
    """On premises: the CA file Feast verifies Valkey with, its volume and mount (only
    ``ca.crt`` of the server's certificate Secret); on AWS nothing."""
    if placement.on_aws:
        return None, [], []
    volume = {
        "name": "online-store-ca",
        "secret": {"secretName": ONLINE_TLS_SECRET, "items": [{"key": "ca.crt", "path": "ca.crt"}]},
    }
    mount = {"name": "online-store-ca", "mountPath": ONLINE_CA_DIR, "readOnly": True}
    return f"{ONLINE_CA_DIR}/ca.crt", [volume], [mount]


def _ca_items() -> list[Manifest]:
    return [{"key": REGISTRY_CA_KEY, "path": REGISTRY_CA_KEY}]


def registry_ca(placement: Placement) -> tuple[list[Manifest], list[Manifest]]:
    """The volume and mount of the registry database's CA (`REGISTRY_CA_FILE`): the
    RDS authorities' ConfigMap on AWS, the ``ca.crt`` of CloudNativePG's CA Secret on
    premises."""
    if placement.on_aws:
        source: Manifest = {"configMap": {"name": REGISTRY_CA_CONFIGMAP, "items": _ca_items()}}
    else:
        source = {"secret": {"secretName": REGISTRY_CA_SECRET, "items": _ca_items()}}
    volume = {"name": REGISTRY_CA_VOLUME, **source}
    mount = {"name": REGISTRY_CA_VOLUME, "mountPath": REGISTRY_CA_DIR, "readOnly": True}
    return [volume], [mount]


def registry_ca_configmap(placement: Placement) -> Manifest:
    """On AWS: the region's RDS authorities (`Placement.database_ca`) in ``feast``.

    Raises:
        ValueError: the placement carries no CA (the composition always gives one).
    """
    if "BEGIN CERTIFICATE" not in placement.database_ca:
        raise ValueError("the feature store on AWS needs the RDS CA bundle (database_ca)")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(REGISTRY_CA_CONFIGMAP),
        "data": {REGISTRY_CA_KEY: placement.database_ca},
    }


def credential_env() -> list[Manifest]:
    """The four variables of `feature_store_yaml`, from `CREDENTIALS_SECRET`."""
    return [
        {
            "name": name,
            "valueFrom": {"secretKeyRef": {"name": CREDENTIALS_SECRET, "key": name}},
        }
        for name in (ENV_REGISTRY_HOST, ENV_REGISTRY_PASSWORD, ENV_REDIS_HOST, ENV_REDIS_PASSWORD)
    ]


# -- the feature server (upstream chart) behind kube-rbac-proxy -----------------------


def feature_server_values(spec: FeaturesSpec, placement: Placement) -> Manifest:
    """Values of the ``feast-feature-server`` chart (every key exists in its values.yaml)."""
    amounts = {"cpu": f"{spec.cpu_millicores}m", "memory": f"{spec.memory_mib}Mi"}
    ca_file, ca_volumes, ca_mounts = online_ca(placement)
    registry_volumes, registry_mounts = registry_ca(placement)
    config = feature_store_yaml(ca_file).encode()
    return {
        "replicaCount": spec.server_replicas,
        "image": {
            "repository": f"{placement.registry}/features",
            "tag": spec.image_tag,
            "pullPolicy": "IfNotPresent",
        },
        "feast_mode": "online",
        "feature_store_yaml_base64": base64.b64encode(config).decode(),
        "logLevel": "WARNING",
        # Plain HTTP inside the pod network: only the proxy pods may connect (NetworkPolicy
        # `feature_server_policy`), and the proxy terminates TLS for the clients.
        "commandArgs": ["feast", "serve", "-h", "0.0.0.0", "-p", str(SERVER_CONTAINER_PORT)],
        "extraEnvs": [
            *credential_env(),
            {"name": "FEAST_USAGE", "value": "False"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "serviceAccount": {"name": SERVICE_ACCOUNT},
        "podSecurityContext": pod_security(),
        "securityContext": restricted_container(),
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "volumes": [{"name": "tmp", "emptyDir": {}}, *ca_volumes, *registry_volumes],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *ca_mounts, *registry_mounts],
        "nodeSelector": dict(placement.node_selector),
        "service": {"type": "ClusterIP", "port": SERVER_SERVICE_PORT},
        "metrics": {"enabled": False},
        "route": {"enabled": False},
    }


def proxy_config() -> str:
    return (
        "authorization:\n"
        "  resourceAttributes:\n"
        f"    namespace: {NAMESPACE}\n"
        f"    apiGroup: {AUTH_API_GROUP}\n"
        "    apiVersion: v1\n"
        f"    resource: {AUTH_RESOURCE}\n"
        f"    name: {AUTH_NAME}\n"
    )


def proxy_objects(spec: FeaturesSpec, placement: Placement, ca_issuer: str) -> list[Manifest]:
    """The authenticating endpoint: ConfigMap, Certificate, Deployment, Service."""
    labels = {"app.kubernetes.io/name": PROXY_NAME}
    upstream = f"http://{SERVER_RELEASE}.{NAMESPACE}.svc.cluster.local:{SERVER_SERVICE_PORT}/"
    container = {
        "name": "kube-rbac-proxy",
        "image": image(placement, "kube-rbac-proxy", KUBE_RBAC_PROXY_TAG),
        "args": [
            f"--secure-listen-address=0.0.0.0:{PROXY_PORT}",
            f"--upstream={upstream}",
            "--config-file=/etc/kube-rbac-proxy/config.yaml",
            f"--proxy-endpoints-port={PROXY_HEALTH_PORT}",
            "--tls-cert-file=/etc/tls/private/tls.crt",
            "--tls-private-key-file=/etc/tls/private/tls.key",
            # TLS 1.3 only, as the inference endpoints (every client speaks it).
            "--tls-min-version=VersionTLS13",
        ],
        "ports": [
            {"name": "https", "containerPort": PROXY_PORT, "protocol": "TCP"},
            {"name": "proxy-health", "containerPort": PROXY_HEALTH_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": PROXY_HEALTH_PORT, "scheme": "HTTPS"}
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": PROXY_HEALTH_PORT, "scheme": "HTTPS"},
            "periodSeconds": 20,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        },
        "securityContext": restricted_container(),
        "volumeMounts": [
            {"name": "auth-config", "mountPath": "/etc/kube-rbac-proxy", "readOnly": True},
            {"name": "tls", "mountPath": "/etc/tls/private", "readOnly": True},
        ],
    }
    dns = [
        f"{PROXY_NAME}.{NAMESPACE}.svc",
        f"{PROXY_NAME}.{NAMESPACE}.svc.cluster.local",
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(PROXY_CONFIG, **labels),
            "data": {"config.yaml": proxy_config()},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": _meta(TLS_SECRET, **labels),
            "spec": {
                "secretName": TLS_SECRET,
                "dnsNames": dns,
                "issuerRef": {"name": ca_issuer, "kind": "ClusterIssuer"},
                "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                "duration": "2160h",
                "renewBefore": "360h",
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                **_meta(PROXY_NAME, **labels),
                "annotations": security.scanner_exceptions(
                    {"CKV_K8S_38": security.KUBE_RBAC_PROXY_TOKEN}
                ),
            },
            "spec": {
                "replicas": spec.server_replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": SERVICE_ACCOUNT,
                        # kube-rbac-proxy reviews each caller's token and access
                        # (TokenReview, SubjectAccessReview) with the API server.
                        "automountServiceAccountToken": True,
                        "securityContext": pod_security(),
                        "nodeSelector": dict(placement.node_selector),
                        "containers": [container],
                        "volumes": [
                            {"name": "auth-config", "configMap": {"name": PROXY_CONFIG}},
                            {"name": "tls", "secret": {"secretName": TLS_SECRET}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(PROXY_NAME, **labels),
            "spec": {
                "type": "ClusterIP",
                "selector": labels,
                "ports": [
                    {"name": "https", "port": PROXY_PORT, "targetPort": "https", "protocol": "TCP"}
                ],
            },
        },
    ]


def rbac_objects(spec: FeaturesSpec) -> list[Manifest]:
    """The proxy's right to review tokens and access; the clients' right to call it."""
    role_rule = {
        "apiGroups": [AUTH_API_GROUP],
        "resources": [AUTH_RESOURCE],
        "resourceNames": [AUTH_NAME],
        "verbs": ["create", "get"],
    }
    objects: list[Manifest] = [
        # No API token by default: the feature server, apply and materialisation call no
        # Kubernetes API (the registry is SQL, the stores Redis and S3; EKS Pod Identity
        # projects its own token, modules.k8s.rbac); the endpoint's pod mounts one.
        rbac.service_account(_meta(SERVICE_ACCOUNT), mount_token=False),
        # TokenReview and SubjectAccessReview: the built-in role kube-rbac-proxy needs.
        rbac.role_binding(
            {
                "name": "feast-endpoint-auth-delegator",
                "labels": {"app.kubernetes.io/part-of": "gpuplatform"},
            },
            "system:auth-delegator",
            rbac.service_account_subjects(SERVICE_ACCOUNT, [NAMESPACE]),
            role_kind="ClusterRole",
            cluster=True,
        ),
        rbac.role(_meta("feast-online-reader"), [role_rule]),
    ]
    if spec.client_namespaces:
        objects.append(
            rbac.role_binding(
                _meta("feast-online-readers"),
                "feast-online-reader",
                rbac.service_accounts_of(spec.client_namespaces),
            )
        )
    return objects


# -- network: the feature store's own policies are `modules.k8s.features.network` ------


def _ns_selector(name: str) -> Manifest:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def client_egress_policy(namespace: str) -> Manifest:
    """In a client namespace (default-deny egress): to the feature store's endpoint."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("allow-feast", namespace=namespace),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            **_ns_selector(NAMESPACE),
                            "podSelector": {"matchLabels": {"app.kubernetes.io/name": PROXY_NAME}},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": PROXY_PORT}],
                }
            ],
        },
    }


# -- materialisation -----------------------------------------------------------------


def _feast_job_pod(
    spec: FeaturesSpec,
    placement: Placement,
    *,
    restart_policy: str,
    name: str,
    command: list[str],
    args: list[str],
    cpu: tuple[str, str],
    memory: str,
) -> Manifest:
    """The pod of a Feast job (materialisation, apply): one container of the features
    image, named ``name``, that talks to the registry, the online store and the offline
    store (their credentials and endpoints), the repository's ``feature_store.yaml``
    read-only, a writable /tmp, the online store's CA and the registry database's;
    restricted, on the system pool."""
    _, ca_volumes, ca_mounts = online_ca(placement)
    registry_volumes, registry_mounts = registry_ca(placement)
    container = {
        "name": name,
        "image": image(placement, "features", spec.image_tag),
        "command": command,
        "args": args,
        "env": [
            *credential_env(),
            *s3_env(placement),
            {"name": "FEAST_USAGE", "value": "False"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {
            "requests": {"cpu": cpu[0], "memory": memory},
            "limits": {"cpu": cpu[1], "memory": memory},
        },
        "securityContext": restricted_container(),
        "volumeMounts": [
            {"name": "feature-repo", "mountPath": "/feature_repo", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            *ca_mounts,
            *registry_mounts,
        ],
    }
    return {
        "restartPolicy": restart_policy,
        "serviceAccountName": SERVICE_ACCOUNT,
        # Said here too, not only on the ServiceAccount: neither job calls the API.
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "nodeSelector": dict(placement.node_selector),
        "containers": [container],
        "volumes": [
            {"name": "feature-repo", "configMap": {"name": REPO_CONFIGMAP}},
            {"name": "tmp", "emptyDir": {}},
            *ca_volumes,
            *registry_volumes,
        ],
    }


def materialize_cronjob(spec: FeaturesSpec, placement: Placement) -> Manifest:
    """``feast materialize-incremental`` up to now, on the schedule, one at a time."""
    pod = _feast_job_pod(
        spec,
        placement,
        restart_policy="Never",
        name="materialize",
        command=["/bin/sh", "-c"],
        args=[
            'exec feast -c /feature_repo materialize-incremental "$(date -u +%Y-%m-%dT%H:%M:%S)"'
        ],
        cpu=("500m", "2"),
        memory="2Gi",
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {**_meta("feast-materialize"), "annotations": SECRETS_IN_ENV},
        "spec": {
            "schedule": spec.materialize_schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 5,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 2,
                    "activeDeadlineSeconds": 3300,
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/name": MATERIALIZE_NAME}},
                        "spec": pod,
                    },
                }
            },
        },
    }


def repo_configmap(placement: Placement) -> Manifest:
    """``feature_store.yaml`` for the CronJob (``feast -c /feature_repo``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(REPO_CONFIGMAP),
        "data": {"feature_store.yaml": feature_store_yaml(online_ca(placement)[0])},
    }


def apply_job(spec: FeaturesSpec, placement: Placement) -> Manifest:
    """``python -m workloads.features apply``: the repository's objects into the SQL
    registry, their sources under `Placement.offline_uri` (through the region's S3
    endpoint on AWS). Idempotent (Feast's apply); rerun when the image changes."""
    args = ["--repo", "/feature_repo", "--offline-uri", placement.offline_uri]
    if placement.on_aws:
        args += ["--s3-endpoint", s3_endpoint(placement)]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**_meta("feast-apply"), "annotations": SECRETS_IN_ENV},
        "spec": {
            "backoffLimit": 6,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "spec": _feast_job_pod(
                    spec,
                    placement,
                    restart_policy="OnFailure",
                    name="apply",
                    command=["python", "-m", "workloads.features", "apply"],
                    args=args,
                    cpu=("250m", "1"),
                    memory="1Gi",
                )
            },
        },
    }


# -- the online store on premises (Valkey chart) --------------------------------------


def valkey_values(spec: FeaturesSpec, placement: Placement, storage_class: str) -> Manifest:
    """Values of the ``valkey`` chart: one primary with a persistent volume, ACL users
    from a Secret (the default user disabled), TLS from a cert-manager certificate."""
    amounts = {"cpu": "500m", "memory": "1Gi"}
    return {
        "image": {"registry": placement.registry, "repository": "valkey", "tag": VALKEY_TAG},
        "podSecurityContext": pod_security(),
        "securityContext": {
            key: value for key, value in restricted_container().items() if key != "runAsGroup"
        },
        "auth": {
            "enabled": True,
            "usersExistingSecret": ONLINE_USERS_SECRET,
            "aclUsers": {
                # Feast connects as `default` (a password-only connection string).
                "default": {"permissions": "~* &* +@all -@admin -@dangerous"},
            },
        },
        "tls": {
            "enabled": True,
            "existingSecret": ONLINE_TLS_SECRET,
            "serverPublicKey": "tls.crt",
            "serverKey": "tls.key",
            "caPublicKey": "ca.crt",
            "requireClientCertificate": False,
        },
        "dataStorage": {
            "enabled": True,
            "requestedSize": f"{spec.onprem_online_storage_gib}Gi",
            "className": storage_class,
            "keepPvc": True,
        },
        # One pod on a ReadWriteOnce volume: the old pod must go before the new mounts.
        "deploymentStrategy": "Recreate",
        "valkeyConfig": "appendonly yes\nappendfsync everysec\nmaxmemory-policy noeviction\n",
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "nodeSelector": dict(placement.node_selector),
        "service": {"type": "ClusterIP", "port": REDIS_PORT},
        "metrics": {"enabled": False},
    }


def online_store_certificate(ca_issuer: str) -> Manifest:
    """The Valkey server's TLS certificate (the platform's CA; clients verify it)."""
    service = f"{ONLINE_RELEASE}-valkey"
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": _meta(ONLINE_TLS_SECRET),
        "spec": {
            "secretName": ONLINE_TLS_SECRET,
            "dnsNames": [f"{service}.{NAMESPACE}.svc", f"{service}.{NAMESPACE}.svc.cluster.local"],
            "issuerRef": {"name": ca_issuer, "kind": "ClusterIssuer"},
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "duration": "2160h",
            "renewBefore": "360h",
        },
    }


def onprem_registry_cluster(placement: Placement, storage_class: str) -> Manifest:
    """The registry's PostgreSQL on premises (CloudNativePG, like the tracking server's),
    its PostgreSQL image from the stack's mirror (as the init Job's on AWS)."""
    amount = {"cpu": "500m", "memory": "1Gi"}
    return {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": _meta(REGISTRY_CLUSTER),
        "spec": {
            "instances": 2,
            "imageName": image(placement, "postgresql", POSTGRES_IMAGE_TAG),
            "enableSuperuserAccess": False,
            "bootstrap": {
                "initdb": {
                    "database": REGISTRY_DATABASE,
                    "owner": REGISTRY_USER,
                    "secret": {"name": f"{REGISTRY_CLUSTER}-owner"},
                }
            },
            "storage": {"storageClass": storage_class, "size": "5Gi"},
            "resources": {"requests": dict(amount), "limits": dict(amount)},
            "enablePDB": True,
        },
    }


def registry_init_job(placement: Placement, database_secret: str, database_host: Any) -> Manifest:
    """On AWS: create the registry's role and database on the tracking RDS instance,
    idempotently, as its master user (in the ``mlflow`` namespace, where the master
    credentials already are; the registry password comes from `REGISTRY_INIT_SECRET`),
    verifying the instance with the RDS authorities the tracking server's ConfigMap
    there holds. ``database_host`` is the RDS address (a Pulumi output of one, from the
    component)."""
    script = (
        "set -eu\n"
        "psql -v ON_ERROR_STOP=1 -v pw=\"$FEAST_REGISTRY_PASSWORD\" <<'SQL'\n"
        "SELECT 'CREATE ROLE feast LOGIN' WHERE NOT EXISTS "
        "(SELECT FROM pg_roles WHERE rolname = 'feast')\\gexec\n"
        "ALTER ROLE feast WITH LOGIN PASSWORD :'pw';\n"
        "GRANT feast TO CURRENT_USER;\n"
        "SELECT 'CREATE DATABASE feast OWNER feast' WHERE NOT EXISTS "
        "(SELECT FROM pg_database WHERE datname = 'feast')\\gexec\n"
        "SQL\n"
    )
    secret = {"name": database_secret}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **_meta(REGISTRY_INIT_NAME, namespace=TRACKING_NAMESPACE),
            "annotations": security.scanner_exceptions(
                {
                    "CKV_K8S_35": "psql takes the master login from PGUSER and PGPASSWORD: "
                    "the Secret is the database's own (username and password keys), not a "
                    "pgpass file; the new role's password reaches the script the same way"
                }
            ),
        },
        "spec": {
            "backoffLimit": 6,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": REGISTRY_INIT_NAME}},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "automountServiceAccountToken": False,
                    # As the platform's UID, not the image's postgres user (26): psql
                    # only reads the image's files and writes nothing.
                    "securityContext": pod_security(),
                    "nodeSelector": dict(placement.node_selector),
                    "containers": [
                        {
                            "name": "psql",
                            "image": image(placement, "postgresql", POSTGRES_IMAGE_TAG),
                            "command": ["/bin/sh", "-c", script],
                            "env": [
                                {"name": "PGSSLMODE", "value": REGISTRY_SSL_MODE},
                                {"name": "PGSSLROOTCERT", "value": REGISTRY_CA_FILE},
                                {"name": "PGDATABASE", "value": "mlflow"},
                                {"name": "PGHOST", "value": database_host},
                                {
                                    "name": "PGUSER",
                                    "valueFrom": {"secretKeyRef": {**secret, "key": "username"}},
                                },
                                {
                                    "name": "PGPASSWORD",
                                    "valueFrom": {"secretKeyRef": {**secret, "key": "password"}},
                                },
                                {
                                    "name": "FEAST_REGISTRY_PASSWORD",
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": REGISTRY_INIT_SECRET,
                                            "key": "password",
                                        }
                                    },
                                },
                            ],
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "64Mi"},
                                "limits": {"cpu": "500m", "memory": "128Mi"},
                            },
                            "securityContext": restricted_container(),
                            "volumeMounts": [
                                {
                                    "name": REGISTRY_CA_VOLUME,
                                    "mountPath": REGISTRY_CA_DIR,
                                    "readOnly": True,
                                }
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": REGISTRY_CA_VOLUME,
                            "configMap": {
                                "name": TRACKING_DATABASE_CA_CONFIGMAP,
                                "items": _ca_items(),
                            },
                        }
                    ],
                },
            },
        },
    }
