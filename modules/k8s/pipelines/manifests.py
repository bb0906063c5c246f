"""Kubeflow Pipelines 2.17.0: its render placed for the stack, and the platform's own
objects beside it.

`rendered` reads ``kubeflow-pipelines-2.17.0.yaml``, KFP's own kustomize install
(``upstream/``, unchanged) with the platform's patches (``kustomize/``: TLS inside the
cluster as KFP's TLS overlay configures it, the database proxy, limits, restricted
roles, and the parts left out, each with its reason), rendered when vendoring by
``python -m tools.vendor_kfp`` (``upstream/README.md``). What differs per stack is set
here (`place`): the images from the stack's registry (`spec.MIRRORED_IMAGES`), the pods
on the system pool, the bucket and the object store, and on premises the store's key
pair.

The platform's own objects:

* the Namespace (`PIPELINES_NS`), restricted;
* state: the database credentials under upstream's Secret names and PgBouncer's
  configuration (`database_secrets`, `proxy_config`), the databases themselves (on the
  tracking RDS instance: `database_init_job`; on premises a CloudNativePG cluster:
  `database_cluster`), the API server's ``config.json`` (`apiserver_config`); no
  example password of upstream's is ever installed;
* TLS: the serving certificates from the cluster CA and the namespace's CA bundle
  every client verifies with (`tls_objects`);
* fences (`network_policies`): default-deny, then DNS, the namespace's pods to each
  other, the Kubernetes API, the database and the object store only;
* the runs' MLflow user and their way to the tracking server (`tracking_credentials`,
  `runs_tracking_egress`, `tracking_allowance`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from modules.k8s import netpol
from modules.k8s.common import Manifest, PlatformNamespace, metadata
from modules.k8s.monitoring.spec import ALERT_ROUTING_LABEL, ALERT_ROUTING_VALUE
from modules.k8s.pipelines.spec import (
    DATABASE_CLUSTER,
    DATABASE_PORT,
    DATABASE_USER,
    KFP_VERSION,
    MIRRORED_IMAGES,
    NAMESPACE,
    PROXY_HOST,
    SPECS_PREFIX,
    ObjectStoreSpec,
    PipelinesPlacement,
    PipelinesSpec,
    s3_endpoint,
)
from modules.k8s.pki.spec import ca_bundle, service_dns_names, serving_certificate
from modules.k8s.tenancy.spec import POD_IDENTITY_AGENT_CIDR, POD_IDENTITY_AGENT_PORT
from modules.k8s.tracking.manifests import (
    DATABASE_CA_CONFIGMAP as TRACKING_DATABASE_CA,
)
from modules.k8s.tracking.manifests import (
    SERVER_POD_LABELS,
    TEAM_CREDENTIALS_SECRET,
    TLS_PORT,
    TRACKING_NAMESPACE,
)
from modules.k8s.tracking.users import PIPELINES_USERNAME

HERE = Path(__file__).resolve().parent
RENDER_FILE = HERE / f"kubeflow-pipelines-{KFP_VERSION}.yaml"
DATABASE_FILE = HERE / "database.yaml"
UPSTREAM_DIR = HERE / "upstream"
#: The API server image's ``/config/config.json``.
APISERVER_CONFIG_FILE = (
    UPSTREAM_DIR / "kubeflow-pipelines" / "backend" / "src" / "apiserver" / "config" / "config.json"
)

#: Secrets the platform writes (upstream's names, so KFP's references hold).
DATABASE_SECRET = "postgres-secret-extended"  # username, password (API server)
METADATA_SECRET = "metadata-postgres-db-secrets"  # POSTGRES_USER, POSTGRES_PASSWORD (MLMD)
PROXY_USERS_SECRET = "kfp-database-proxy-users"  # PgBouncer's auth_file
OBJECT_STORE_SECRET = "mlpipeline-object-store"  # accesskey, secretkey (on premises)
PROXY_CONFIG = "kfp-database-proxy"  # PgBouncer's pgbouncer.ini (no password)
#: The CA PgBouncer verifies the database server with, mounted in its directory
#: (``kustomize/patches/database-proxy.yaml``): on AWS a ConfigMap of the region's RDS
#: authorities (`database_ca_configmap`), on premises the ``ca.crt`` of the Secret
#: CloudNativePG keeps its cluster's CA in (``<cluster>-ca``; `place` swaps it in).
PROXY_CA_VOLUME = "database-proxy-ca"
PROXY_CA_DIR = "/etc/pgbouncer/ca"
DATABASE_CA = "kfp-database-ca"
CLUSTER_CA_SECRET = f"{DATABASE_CLUSTER}-ca"
CA_FILE = "ca.crt"
APISERVER_CONFIG = "ml-pipeline-config"  # the API server's config.json
#: On premises: the database owner's credentials for CloudNativePG; on AWS: KFP's
#: password for the init Job, in the ``mlflow`` namespace.
DATABASE_OWNER_SECRET = "kfp-db-owner"
DATABASE_INIT_SECRET = "kfp-database-init"
#: The Services that serve TLS and their certificates' Secrets (the patches mount them).
API_SERVICE, API_TLS_SECRET = "ml-pipeline", "kfp-api-tls"
UI_SERVICE, UI_TLS_SECRET = "ml-pipeline-ui", "ml-pipeline-ui-tls"
MLMD_SERVICE, MLMD_TLS_SECRET = "metadata-grpc-service", "metadata-grpc-tls"
ENVOY_SERVICE, ENVOY_TLS_SECRET = "metadata-envoy-service", "metadata-envoy-tls"
#: The label the compiled pipeline puts on the pods of its steps that talk to MLflow
#: (``workloads.pipelines.steps.TRACKING_CLIENT_LABEL``; tests/k8s checks the IR): the
#: only pods of ``kubeflow`` the fences let reach the tracking server.
TRACKING_CLIENT_LABEL = "gpuplatform.ae/mlflow-client"
TRACKING_CLIENTS = {TRACKING_CLIENT_LABEL: "true"}

Key = tuple[str, str]


def key(manifest: Mapping[str, Any]) -> Key:
    return (str(manifest["kind"]), str(manifest["metadata"]["name"]))


@cache
def _parsed() -> tuple[Manifest, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = RENDER_FILE.read_text(encoding="utf-8")
    return tuple(d for d in yaml.load_all(text, Loader=loader) if d)


@cache
def objects_in(path: Path) -> tuple[Manifest, ...]:
    """The objects of one of this package's YAML lists (``loop.yaml``, ``database.yaml``);
    callers copy (`substituted`) before changing them."""
    return tuple(yaml.safe_load(path.read_text(encoding="utf-8")))


def rendered() -> list[Manifest]:
    """Every object of the render (fresh copies: callers may change them)."""
    return copy.deepcopy(list(_parsed()))


#: A ``${name}`` inside a string, for `substituted`.
_PLACEHOLDER = re.compile(r"\$\{[a-z-]+\}")


def substituted(value: Any, values: Mapping[str, Any]) -> Any:
    """``value`` (a copy) with every string that is a key of ``values`` replaced by its
    value (of any type), and every ``${name}`` key inside a longer string by its value
    (others, such as a shell's ``${i}``, stay)."""
    if isinstance(value, dict):
        return {k: substituted(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [substituted(v, values) for v in value]
    if not isinstance(value, str):
        return value
    if value in values:
        return values[value]
    return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(0), m.group(0))), value)


def mirrors(placement: PipelinesPlacement) -> dict[str, str]:
    """Each upstream image reference (`spec.MIRRORED_IMAGES`) -> the stack's mirror."""
    return {f"{src}:{tag}": placement.image(n) for n, (src, tag) in MIRRORED_IMAGES.items()}


#: On premises: reading the object store's key pair, that Secret only.
STORE_SECRET_RULE = {
    "apiGroups": [""],
    "resources": ["secrets"],
    "resourceNames": [OBJECT_STORE_SECRET],
    "verbs": ["get"],
}


def _container(pod: Manifest, name: str) -> Manifest:
    (found,) = [c for c in pod["containers"] if c["name"] == name]
    return found  # type: ignore[no-any-return]


def place(
    manifest: Manifest, spec: PipelinesSpec, placement: PipelinesPlacement, root: Any
) -> Manifest:
    """An object of the render as this stack installs it (a copy): images from the
    stack's registry (every reference, the driver, launcher and executor images in
    environment and arguments too), pods on the system pool, the bucket and the runs'
    pipeline root (``root``: both may be Pulumi outputs, placed, never formatted), the
    object store's settings, and on premises its key pair readable by the runs and the
    UI."""
    manifest = substituted(manifest, mirrors(placement))
    kind, name = key(manifest)
    if kind == "Deployment":
        pod = manifest["spec"]["template"]["spec"]
        pod["nodeSelector"] = {**pod.get("nodeSelector", {}), **placement.node_selector}
        if not placement.on_aws:
            for volume in pod.get("volumes", []):
                if volume["name"] == PROXY_CA_VOLUME:
                    volume.pop("configMap")
                    volume["secret"] = {
                        "secretName": CLUSTER_CA_SECRET,
                        "items": [{"key": CA_FILE, "path": CA_FILE}],
                    }
        if name == "ml-pipeline":
            _container(pod, "ml-pipeline-api-server")["env"] += object_store_env(spec, placement)
        elif name == "ml-pipeline-ui":
            _container(pod, "ml-pipeline-ui")["env"] += ui_object_store_env(spec, placement)
    elif kind == "ConfigMap" and name == "pipeline-install-config":
        manifest["data"] |= {"bucketName": placement.bucket, "defaultPipelineRoot": root}
    elif kind == "ConfigMap" and name == "kfp-launcher":
        manifest["data"] = launcher_data(spec, placement, root)
    elif kind == "Role" and name in ("pipeline-runner", "ml-pipeline-ui") and not placement.on_aws:
        manifest["rules"].append(copy.deepcopy(STORE_SECRET_RULE))
    return manifest


#: ``kubeflow`` with Pod Security ``restricted`` (KFP 2.17 compiles runs' pods to the
#: restricted profile) and the label that lets its AlertmanagerConfig route alerts.
PIPELINES_NS = PlatformNamespace(NAMESPACE, labels={ALERT_ROUTING_LABEL: ALERT_ROUTING_VALUE})


def install_objects(
    spec: PipelinesSpec, placement: PipelinesPlacement, kubernetes_version: str, root: Any
) -> list[Manifest]:
    """The platform's Namespace, then every object of the render, placed (`place`)."""
    placed = [place(m, spec, placement, root) for m in _parsed()]
    return [PIPELINES_NS.manifest(kubernetes_version), *placed]


# -- the object store and the API server's configuration -------------------------------


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


def apiserver_configmap() -> Manifest:
    """The API server's ``config.json`` (`apiserver_config`), mounted over the image's."""
    config = json.dumps(apiserver_config(), indent=2, sort_keys=True)
    return _configmap(APISERVER_CONFIG, {"config.json": config})


def _configmap(name: str, data: Manifest) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, NAMESPACE),
        "data": data,
    }


def _value(name: str, value: Any) -> Manifest:
    return {"name": name, "value": value}


def _store(spec: PipelinesSpec) -> ObjectStoreSpec:
    if spec.object_store is None:
        raise ValueError("an on-premises Kubeflow Pipelines needs pipelines.objectStore")
    return spec.object_store


def object_store_env(spec: PipelinesSpec, placement: PipelinesPlacement) -> list[Manifest]:
    """The API server's object store (``ObjectStoreConfig.*``, read from the environment
    with empty values allowed; TLS and the specs' prefix are in the render): the bucket,
    the endpoint and region; on AWS an empty key pair (the config file's example keys
    would apply otherwise; the AWS SDK's default chain answers with the Pod Identity
    role), on premises the site's pair from its Secret."""
    if placement.on_aws:
        host, port, region = s3_endpoint(placement.region), "443", placement.region
        keys = [
            _value("OBJECTSTORECONFIG_ACCESSKEY", ""),
            _value("OBJECTSTORECONFIG_SECRETACCESSKEY", ""),
        ]
    else:
        store = _store(spec)
        host, _, port = store.endpoint.partition(":")
        port, region = port or "443", store.region
        keys = _store_keys("OBJECTSTORECONFIG_ACCESSKEY", "OBJECTSTORECONFIG_SECRETACCESSKEY")
    return [
        _value("OBJECTSTORECONFIG_BUCKETNAME", placement.bucket),
        _value("OBJECTSTORECONFIG_HOST", host),
        _value("OBJECTSTORECONFIG_PORT", port),
        _value("OBJECTSTORECONFIG_REGION", region),
        *keys,
    ]


def ui_object_store_env(spec: PipelinesSpec, placement: PipelinesPlacement) -> list[Manifest]:
    """The UI's S3 settings (``frontend/server/configs.ts``): the regional endpoint and
    the default credential chain on AWS; the site's endpoint and key pair on premises."""
    if placement.on_aws:
        region, endpoint, keys = placement.region, s3_endpoint(placement.region), []
    else:
        store = _store(spec)
        region, endpoint = store.region, store.endpoint
        keys = _store_keys("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    return [
        _value("AWS_REGION", region),
        _value("AWS_S3_ENDPOINT", endpoint),
        _value("AWS_SSL", "true"),
        *keys,
    ]


def _store_keys(access: str, secret_key: str) -> list[Manifest]:
    """On premises: the object store's key pair, from its Secret, as these variables."""
    refs = ((access, "accesskey"), (secret_key, "secretkey"))
    return [{"name": n, "valueFrom": {"secretKeyRef": {"name": OBJECT_STORE_SECRET, "key": k}}}
            for n, k in refs]  # fmt: skip


def launcher_data(spec: PipelinesSpec, placement: PipelinesPlacement, root: Any) -> Manifest:
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
        secret_ref = {
            "secretName": OBJECT_STORE_SECRET,
            "accessKeyKey": "accesskey",
            "secretKeyKey": "secretkey",
        }
        default = {
            "endpoint": store.endpoint,
            "region": store.region,
            "disableSSL": False,
            "forcePathStyle": True,
            "credentials": {"fromEnv": False, "secretRef": secret_ref},
        }
    providers = yaml.safe_dump({"s3": {"default": default}}, sort_keys=True)
    return {"defaultPipelineRoot": root, "providers": providers}


# -- TLS ------------------------------------------------------------------------------


def tls_objects() -> list[Manifest]:
    """The certificates, from the cluster CA: the API server's (the TLS overlay's
    base-tls-certs/kfp-api-cert.yaml names of the API server, without its self-signed
    issuer), ML Metadata's and its Envoy's (the overlay's names of those Services, each
    in a certificate of its own so that no server holds another's key), the UI
    proxy's; the API server's and UI's with ``localhost`` for ``kubectl
    port-forward``; and the namespace's CA bundle the clients mount (`namespace_ca`)."""
    served = [
        (API_TLS_SECRET, API_SERVICE, ["localhost"]),
        (MLMD_TLS_SECRET, MLMD_SERVICE, []),
        (ENVOY_TLS_SECRET, ENVOY_SERVICE, []),
        (UI_TLS_SECRET, UI_SERVICE, ["localhost"]),
    ]
    certificates = [
        serving_certificate(name, NAMESPACE, [*service_dns_names(service, NAMESPACE), *extra])
        for name, service, extra in served
    ]
    return [*certificates, namespace_ca()]


def namespace_ca() -> Manifest:
    """In ``kubeflow``: the cluster CA bundle (`ca_bundle`, as in every team namespace),
    one Secret for every client here: KFP's own (``CABUNDLE_SECRET_NAME``: the drivers,
    launchers and controllers verify the API server with it), the publisher and trigger,
    and the tracked steps, which verify the tracking server with its ``ca.crt``.
    kfp-kubernetes mounts a Secret whole, so the bundle's own client key pair comes
    along to the tracked steps; no platform endpoint accepts client certificates."""
    return ca_bundle(NAMESPACE)


# -- the database: PgBouncer next to each client --------------------------------------


def proxy_ini(database_host: str) -> str:
    """PgBouncer's ``pgbouncer.ini``: listens on the pod's loopback, logs in to the
    database server with TLS, verifying its certificate with the mounted CA and its name
    against ``database_host`` (``server_tls_sslmode = verify-full``: the RDS instance's
    address, or the CloudNativePG cluster's read-write Service, whose certificate names
    ``<service>.<namespace>.svc.<cluster domain>``, the operator's
    ``KUBERNETES_CLUSTER_DOMAIN``, default cluster.local), and authenticates KFP with
    SCRAM from the users file (a Secret). Session pooling: KFP's API server runs
    ``CREATE DATABASE`` and migrations, which need a session."""
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
            "server_tls_sslmode = verify-full",
            f"server_tls_ca_file = {PROXY_CA_DIR}/{CA_FILE}",
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
    return _configmap(PROXY_CONFIG, {"pgbouncer.ini": ini})


def database_ca_configmap(placement: PipelinesPlacement) -> Manifest:
    """On AWS: the region's RDS authorities (`PipelinesPlacement.database_ca`), which the
    database proxy verifies the instance with.

    Raises:
        ValueError: the placement carries no CA (the composition always gives one).
    """
    if not placement.database_ca.strip():
        raise ValueError("Kubeflow Pipelines on AWS needs the RDS CA bundle (database_ca)")
    return _configmap(DATABASE_CA, {CA_FILE: placement.database_ca})


def proxy_userlist(password: str) -> str:
    """PgBouncer's auth_file line for KFP's role (a plain password: PgBouncer logs in to
    the server with it, SCRAM on both sides)."""
    escaped = password.replace('"', '""')
    return f'"{DATABASE_USER}" "{escaped}"\n'


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


def _database_object(kind: str, placement: PipelinesPlacement, values: Manifest) -> Manifest:
    (found,) = [o for o in objects_in(DATABASE_FILE) if o["kind"] == kind]
    common = {**mirrors(placement), "${node-selector}": dict(placement.node_selector)}
    return substituted(found, {**common, **values})  # type: ignore[no-any-return]


def database_cluster(spec: PipelinesSpec, placement: PipelinesPlacement) -> Manifest:
    """On premises: KFP's PostgreSQL, a CloudNativePG ``Cluster`` (``database.yaml``),
    its PodDisruptionBudget with more than one instance."""
    return _database_object(
        "Cluster",
        placement,
        {
            "${instances}": spec.database_instances,
            "${storage-class}": placement.storage_class,
            "${storage-gib}": spec.database_storage_gib,
            "${pdb}": spec.database_instances > 1,
        },
    )


def database_init_job(placement: PipelinesPlacement, database_host_value: Any) -> Manifest:
    """On AWS: the Job that makes KFP's role and databases on the tracking RDS instance
    (``database.yaml``) at ``database_host_value`` (a Pulumi output), verifying it with
    the RDS authorities of the tracking server's ConfigMap in the Job's namespace."""
    master = placement.tracking_database_secret
    values = {
        "${database-host}": database_host_value,
        "${master-secret}": master,
        "${database-ca}": TRACKING_DATABASE_CA,
    }
    return _database_object("Job", placement, values)


# -- fences --------------------------------------------------------------------------


def network_policies(spec: PipelinesSpec, placement: PipelinesPlacement) -> list[Manifest]:
    """Default-deny in ``kubeflow``, then what KFP needs:

    * every pod: DNS, and the other pods of the namespace (UI -> API server and Envoy,
      Envoy -> ML Metadata, runs -> API server and ML Metadata, controllers -> API
      server, the trigger and publisher -> API server);
    * the Kubernetes API (controllers, the API server, the UI, the runs' executors):
      the VPC on EKS (the cluster endpoint's interfaces are in it), the site's API
      server CIDRs on premises;
    * the database: the API server's and ML Metadata's pods, to RDS in the VPC (5432)
      on AWS; on premises the CloudNativePG pods are in the namespace (its operator,
      in ``cnpg-system``, manages them);
    * the object store (443), from the API server, the UI and every run's pods: S3's
      interface endpoint in the VPC and the Pod Identity agent on AWS; the site's
      store on premises.

    Nothing outside the namespace may connect in: the UI is reached with
    ``kubectl port-forward`` (through the API server and the kubelet, which
    NetworkPolicies do not see), the trigger only from Alertmanager (`loop`)."""
    own = [netpol.same_namespace_peer()]
    policies = [
        netpol.default_deny(NAMESPACE),
        netpol.allow_dns(NAMESPACE),
        netpol.policy(NAMESPACE, "allow-same-namespace", {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": own}], "egress": [{"to": own}],
        }),
    ]  # fmt: skip
    if placement.on_aws:
        vpc = netpol.cidr_peers([placement.vpc_cidr])
        api = {"to": vpc, "ports": netpol.tcp(443)}
        store: list[Manifest] = [
            {"to": vpc, "ports": netpol.tcp(443)},
            {"to": netpol.cidr_peers([POD_IDENTITY_AGENT_CIDR]),
             "ports": netpol.tcp(POD_IDENTITY_AGENT_PORT)},
        ]  # fmt: skip
    else:
        api = {"to": netpol.cidr_peers(spec.api_server_cidrs), "ports": netpol.tcp(443, 6443)}
        cidrs = spec.object_store.cidrs if spec.object_store is not None else ()
        store = [{"to": netpol.cidr_peers(cidrs), "ports": netpol.tcp(443)}]

    def egress(name: str, selector: Manifest, rules: list[Manifest]) -> Manifest:
        return netpol.policy(
            NAMESPACE, name, {"podSelector": selector, "policyTypes": ["Egress"], "egress": rules}
        )

    def pods_in(label: str, *values: str) -> Manifest:
        return {"matchExpressions": [{"key": label, "operator": "In", "values": list(values)}]}

    # Every pod of a run carries Argo's workflow label.
    runs = {"matchExpressions": [{"key": "workflows.argoproj.io/workflow", "operator": "Exists"}]}
    policies += [
        egress("allow-kubernetes-api", {}, [api]),
        egress("allow-object-store", pods_in("app", "ml-pipeline", "ml-pipeline-ui"), store),
        egress("allow-runs-object-store", runs, store),
    ]
    if placement.on_aws:
        database = [{"to": netpol.cidr_peers([placement.vpc_cidr]),
                     "ports": netpol.tcp(DATABASE_PORT)}]  # fmt: skip
        return [
            *policies,
            egress("allow-database", pods_in("app", "ml-pipeline"), database),
            egress(
                "allow-metadata-database", pods_in("component", "metadata-grpc-server"), database
            ),
        ]
    operator = netpol.allow_ingress(
        NAMESPACE,
        "allow-database-operator",
        [netpol.namespace_peer("cnpg-system")],
        netpol.tcp(8000, DATABASE_PORT),
        {"cnpg.io/cluster": DATABASE_CLUSTER},
    )
    return [*policies, operator]


# -- the runs' MLflow user -------------------------------------------------------------


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
    return netpol.allow_ingress(
        TRACKING_NAMESPACE,
        "allow-kubeflow-pipelines",
        [netpol.namespace_peer(NAMESPACE, TRACKING_CLIENTS)],
        netpol.tcp(TLS_PORT),
        SERVER_POD_LABELS,
    )


def runs_tracking_egress() -> Manifest:
    """In ``kubeflow``: the tracked steps' pods may reach the tracking server's pods on
    its TLS port, and nothing else of ``mlflow``."""
    return netpol.allow_egress(
        NAMESPACE,
        "allow-runs-tracking",
        [netpol.namespace_peer(TRACKING_NAMESPACE, SERVER_POD_LABELS)],
        netpol.tcp(TLS_PORT),
        TRACKING_CLIENTS,
    )
