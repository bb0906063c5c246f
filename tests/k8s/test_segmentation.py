"""Segmentation and TLS in the shipped plans: every namespace the platform creates denies
all traffic by default and allows exactly what its services need, and the in-cluster
endpoints serve certificates of the cluster CA that their clients are given.

A dropped or renamed NetworkPolicy, Certificate or reference fails here (the deletion
check, tests/tools/deletion_check.py, removes them one by one)."""

from __future__ import annotations

from typing import Any

import pytest

from modules.k8s.monitoring.spec import (
    ALERTMANAGER_TLS,
    GRAFANA_TLS,
    PROMETHEUS_SERVICE,
    PROMETHEUS_TLS,
)
from modules.k8s.netpol import DEFAULT_DENY, is_default_deny
from modules.k8s.pki.spec import CA_BUNDLE_SECRET, CLUSTER_CA_ISSUER
from modules.k8s.tracking import manifests as tracking
from stacks.config import StackConfig, parse_stack_config
from stacks.offline_plan import load_stack_file
from tests.conftest import SHIPPED_STACKS, shipped_plan
from tests.k8s.shipped import kubernetes_objects

KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
#: What each platform namespace allows besides its default deny (policy names): a new,
#: broader or missing allowance fails the exact comparison.
PLATFORM_ALLOWS: dict[str, set[str]] = {
    "cert-manager": {"allow-dns", "allow-api-server", "allow-webhooks", "allow-metrics-scrape"},
    "monitoring": {
        "allow-dns",
        "allow-api-server",
        "allow-own-ports",
        "allow-prometheus-scrape",
        "allow-webhooks",
        "allow-opencost",
    },
    "opencost": {"allow-dns", "allow-api-server", "allow-prometheus", "allow-metrics-scrape"},
    "gpu-operator": {"allow-dns", "allow-api-server", "allow-metrics-scrape"},
    "nvidia-network-operator": {"allow-dns", "allow-api-server"},
    "kueue-system": {"allow-dns", "allow-api-server", "allow-webhooks", "allow-metrics-scrape"},
    "kserve": {"allow-dns", "allow-api-server", "allow-webhooks"},
    "gpuplatform-storage": {"allow-dns"},
    "cnpg-system": {"allow-dns", "allow-api-server", "allow-webhooks", "allow-database-instances"},
    "kubeflow-system": {
        "allow-dns",
        "allow-api-server",
        "allow-trainer-webhook",
        "allow-jobset-webhook",
    },
    "feast": {"allow-dns", "feast-endpoint", "feast-feature-server", "feast-stores"},
    # Spark (tests/k8s/test_spark.py): the operator's webhook.
    "spark-operator": {"allow-dns", "allow-api-server", "allow-webhooks"},
    # The LLM gateway (tests/k8s/test_gateway.py): the proxies, the rate limit service
    # and its counters, the controllers; its own namespace holds configuration only.
    "envoy-gateway-system": {
        "allow-dns",
        "allow-api-server",
        "allow-webhooks",
        "allow-gateway-clients",
        "allow-proxy-egress",
        "allow-ratelimit-from-proxies",
        "allow-ratelimit-egress",
        "allow-ratelimit-config",
        "allow-counters-from-ratelimit",
        "allow-controller-xds",
        "allow-controller-extension",
        "allow-proxy-scrape",
        "allow-controller-scrape",
    },
    "envoy-ai-gateway-system": {
        "allow-dns",
        "allow-api-server",
        "allow-webhooks",
        "allow-extension-from-envoy-gateway",
        "allow-metrics-scrape",
    },
    "llm-gateway": {"allow-dns"},
    # LLM serving (tests/k8s/test_llm.py): KEDA and its HTTP add-on, LeaderWorkerSet.
    "keda": {
        "allow-dns",
        "allow-api-server",
        "allow-own-ports",
        "allow-webhooks",
        "allow-metrics-api",
        "allow-gateway-to-interceptor",
        "allow-prometheus",
        "allow-interceptor-to-models",
    },
    "lws-system": {"allow-dns", "allow-api-server", "allow-webhooks"},
}
#: Each team's Spark namespace (``spark-<team>``, one per team with a job): the jobs reach
#: their store, the drivers the API server (plus, per job of that team, its own pods).
SPARK_JOBS_ALLOWS = {"allow-dns", "allow-object-store", "allow-drivers-api-server"}
#: The feature store's further allowances: on AWS its materialisation reaches S3/STS and
#: the Pod Identity agent; on premises its own stores admit it.
FEAST_AWS = {"feast-materialize-aws"}
#: Kubeflow Pipelines' namespace (modules/k8s/pipelines/manifests.py network_policies):
#: its pods to each other, the API server, its database, the object store; the runs to
#: the object store and MLflow; Alertmanager to the retrain trigger.
KFP_ALLOWS = {
    "allow-dns",
    "allow-same-namespace",
    "allow-kubernetes-api",
    "allow-object-store",
    "allow-runs-object-store",
    "allow-runs-tracking",
    "allow-alertmanager-to-trigger",
}
#: On AWS the databases are on the tracking RDS instance (through the TLS sidecars); on
#: premises the CloudNativePG operator manages its own cluster in the namespace.
KFP_AWS = {"allow-database", "allow-metadata-database"}
KFP_ONPREM = {"allow-database-operator"}
FEAST_ONPREM = {"feast-online-store", "feast-registry-database", "feast-registry-api-server"}


def config(stack: str) -> StackConfig:
    return parse_stack_config(load_stack_file(stack)[0])


def policies(stack: str) -> dict[str, dict[str, dict[str, Any]]]:
    """namespace -> policy name -> policy."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for p in kubernetes_objects(stack, "NetworkPolicy"):
        found.setdefault(p["metadata"]["namespace"], {})[p["metadata"]["name"]] = p
    return found


def api_server_cidrs(stack: str) -> list[str]:
    c = config(stack)
    return list(c.onprem.api_server_cidrs) if c.onprem else [c.network.vpc_cidr]


def release_values(stack: str, name: str) -> dict[str, Any]:
    (values,) = [r["values"] for r in objects_of_type(stack, "Release") if r["name"] == name]
    return values  # type: ignore[no-any-return]


def objects_of_type(stack: str, suffix: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [r.inputs for r in registrations.values() if r.type.endswith(f":{suffix}")]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_every_namespace_denies_all_traffic_by_default(stack: str) -> None:
    fenced = policies(stack)
    for namespace in kubernetes_objects(stack, "Namespace"):
        name = namespace["metadata"]["name"]
        assert is_default_deny(fenced.get(name, {}).get(DEFAULT_DENY, {})), name
        dns = fenced[name]["allow-dns"]["spec"]
        assert dns["policyTypes"] == ["Egress"]
        (rule,) = dns["egress"]
        assert rule["to"] == [KUBE_DNS]
        assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("UDP", 53), ("TCP", 53)}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_platform_namespaces_allow_exactly_what_their_services_need(stack: str) -> None:
    fenced = policies(stack)
    namespaces = {n["metadata"]["name"] for n in kubernetes_objects(stack, "Namespace")}
    platform = namespaces - {n for n in namespaces if n.startswith("team-")} - {"mlflow"}
    spark_teams = {f"spark-{job.team}": job.team for job in config(stack).spark.jobs}
    assert platform <= {*PLATFORM_ALLOWS, "kubeflow", *spark_teams}, platform - set(PLATFORM_ALLOWS)
    for name in platform:
        expected = set(PLATFORM_ALLOWS.get(name, ()))
        if name == "monitoring" and config(stack).monitoring.grafana_access != "port-forward":
            expected.add("allow-grafana-load-balancer")
        if name == "kueue-system" and config(stack).fleet is not None:
            expected.add("allow-fleet-workers")
        if name == "monitoring" and config(stack).llm is not None:
            expected.add("allow-keda")  # KEDA reads vLLM's metrics
        if name == "keda" and _gateway_routes_to(stack, "keda"):
            expected.add("allow-llm-gateway-proxies")  # the gateway's own rule, to the interceptor
        if name == "feast":
            expected |= FEAST_ONPREM if config(stack).onprem is not None else FEAST_AWS
        if name == "kubeflow":
            expected = KFP_ALLOWS | (KFP_ONPREM if config(stack).onprem is not None else KFP_AWS)
        if name in spark_teams:
            expected = SPARK_JOBS_ALLOWS | {
                f"allow-within-{job.name}"
                for job in config(stack).spark.jobs
                if job.team == spark_teams[name]
            }
        if name == "cnpg-system" and config(stack).features.enabled:
            # The operator also manages the feature registry's database.
            expected.add("allow-feast-registry")
        assert set(fenced[name]) - {DEFAULT_DENY} == expected, name


def _team_allows(stack: str, team: str) -> set[str]:
    """What a team namespace allows besides its default deny, from the stack file."""
    c = config(stack)
    allows = {"allow-dns", "allow-same-namespace", "allow-metrics-scrape"}
    if c.target == "aws":
        allows |= {"allow-pod-identity-agent", "allow-https-endpoints"}
    elif c.onprem is not None and c.onprem.egress_cidrs:
        allows.add("allow-https-endpoints")
    if c.tracking.enabled:
        allows.add("allow-mlflow")
    if c.serving is not None:
        allows.add("allow-inference-api-server")
    service = c.example_service
    if service is not None and service.team == team:
        allows.add(f"example-{service.model_name}-clients")
        # Its drift service admits the predictor's request logger and Prometheus.
        allows.add(f"example-{service.model_name}-drift-ingress")
    if c.features.enabled and f"team-{team}" in c.features.client_namespaces:
        allows.add("allow-feast")
    if c.llm_gateway is not None and team in {t.team for t in c.llm_gateway.teams}:
        allows.add("allow-llm-gateway")  # egress to the gateway's proxies
    if _gateway_routes_to(stack, f"team-{team}"):
        allows.add("allow-llm-gateway-proxies")  # the gateway's own rule, to its GPU models
    for model in c.llm.models if c.llm is not None else ():
        if model.team == team:
            # tests/k8s/test_llm.py: the gateway (or the interceptor) and Prometheus in;
            # on GPU pools the endpoint picker out to the API server.
            allows |= {f"llm-{model.name}-from-gateway", f"llm-{model.name}-metrics"}
            if model.pool in {p.name for p in c.node_pools if p.role == "gpu"} | {
                p.name for p in c.onprem_node_pools if p.has_gpus
            }:
                allows.add(f"llm-{model.name}-scheduler-api-server")
    return allows


def _gateway_routes_to(stack: str, namespace: str) -> bool:
    """Whether the stack's LLM gateway routes a model to a backend in ``namespace`` (the
    model's team namespace on GPU pools, the KEDA HTTP add-on's interceptor on CPU)."""
    c = config(stack)
    if c.llm_gateway is None or c.llm is None:
        return False
    routed = {model for t in c.llm_gateway.teams for model in t.models}
    gpu_pools = {p.name for p in c.node_pools if p.role == "gpu"}
    gpu_pools |= {p.name for p in c.onprem_node_pools if p.has_gpus}
    return any(
        namespace == (f"team-{m.team}" if m.pool in gpu_pools else "keda")
        for m in c.llm.models
        if m.name in routed
    )


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_team_namespaces_allow_exactly_what_their_jobs_need(stack: str) -> None:
    fenced = policies(stack)
    for team in config(stack).teams:
        ns = f"team-{team.name}"
        assert set(fenced[ns]) - {DEFAULT_DENY} == _team_allows(stack, team.name), ns
        same = fenced[ns]["allow-same-namespace"]["spec"]
        assert same["ingress"] == [{"from": [{"podSelector": {}}]}]
        assert same["egress"] == [{"to": [{"podSelector": {}}]}]
        if "allow-pod-identity-agent" in fenced[ns]:
            (rule,) = fenced[ns]["allow-pod-identity-agent"]["spec"]["egress"]
            assert rule["to"] == [{"ipBlock": {"cidr": "169.254.170.23/32"}}]
        if "allow-https-endpoints" in fenced[ns]:
            (rule,) = fenced[ns]["allow-https-endpoints"]["spec"]["egress"]
            assert rule["ports"] == [{"protocol": "TCP", "port": 443}]
        if "allow-inference-api-server" in fenced[ns]:
            spec = fenced[ns]["allow-inference-api-server"]["spec"]
            assert spec["podSelector"]["matchExpressions"][0]["key"] == (
                "serving.kserve.io/inferenceservice"
            )
            (rule,) = spec["egress"]
            cidrs = [{"ipBlock": {"cidr": c}} for c in api_server_cidrs(stack)]
            assert rule["to"][: len(cidrs)] == cidrs


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_tracking_namespace_allows_exactly_the_server_and_its_database(stack: str) -> None:
    fenced = policies(stack)["mlflow"]
    expected = {"allow-dns", "mlflow-server"}
    if config(stack).onprem is not None:
        expected |= {"mlflow-database", "mlflow-database-api-server"}
        database = fenced["mlflow-database"]["spec"]
        assert database["podSelector"] == {"matchLabels": {"cnpg.io/cluster": "mlflow-db"}}
        assert {p["port"] for r in database["ingress"] for p in r["ports"]} == {5432, 8000, 9187}
        (api,) = fenced["mlflow-database-api-server"]["spec"]["egress"]
        assert api["to"] == [{"ipBlock": {"cidr": c}} for c in api_server_cidrs(stack)]
        backup = config(stack).tracking.database_backup
        if backup is not None:
            # Backups: the database's pods reach the site's object store, nothing else.
            expected.add("mlflow-database-backup")
            (store,) = fenced["mlflow-database-backup"]["spec"]["egress"]
            assert store["to"] == [{"ipBlock": {"cidr": c}} for c in backup.endpoint_cidrs]
    if config(stack).pipelines.enabled:
        # Kubeflow Pipelines' runs reach the server (evaluate, register, canary).
        expected.add("allow-kubeflow-pipelines")
    if config(stack).features.enabled and config(stack).onprem is None:
        # The feature registry's init Job reaches the tracking RDS instance, nothing else.
        expected.add("feast-registry-init")
        init = fenced["feast-registry-init"]["spec"]
        assert init["podSelector"] == {
            "matchLabels": {"app.kubernetes.io/name": "feast-registry-init"}
        }
        (rule,) = init["egress"]
        assert rule["to"] == [{"ipBlock": {"cidr": config(stack).network.vpc_cidr}}]
        assert rule["ports"] == [{"protocol": "TCP", "port": 5432}]
        (job,) = [
            j
            for j in kubernetes_objects(stack, "Job")
            if j["metadata"]["name"] == "feast-registry-init"
        ]
        assert job["metadata"]["namespace"] == "mlflow"
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in init["podSelector"]["matchLabels"].items())
    assert set(fenced) - {DEFAULT_DENY} == expected


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_api_server_is_reached_and_calls_webhooks_only_at_its_addresses(stack: str) -> None:
    cidrs = [{"ipBlock": {"cidr": c}} for c in api_server_cidrs(stack)]
    for name, fenced in policies(stack).items():
        if "allow-api-server" in fenced:
            (rule,) = fenced["allow-api-server"]["spec"]["egress"]
            assert rule["to"] == cidrs, name
            assert {p["port"] for p in rule["ports"]} == {443, 6443}, name
        if "allow-webhooks" in fenced:
            spec = fenced["allow-webhooks"]["spec"]
            (rule,) = spec["ingress"]
            assert rule["from"] == cidrs, name
            assert spec["podSelector"]["matchLabels"], f"{name}: webhooks of chosen pods only"
    webhooks = {
        n: {p["port"] for p in f["allow-webhooks"]["spec"]["ingress"][0]["ports"]}
        for n, f in policies(stack).items()
        if "allow-webhooks" in f
    }
    assert webhooks["cert-manager"] == {"https"}
    assert webhooks["kueue-system"] == {"webhook-server", "visibility"}
    assert webhooks["kserve"] == {"webhook-server"}
    assert webhooks["monitoring"] == {10250}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_prometheus_scrapes_and_reads_only_what_it_should(stack: str) -> None:
    fenced = policies(stack)
    scrape = fenced["monitoring"]["allow-prometheus-scrape"]["spec"]
    assert scrape["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    pods, nodes = scrape["egress"]
    assert pods == {"to": [{"namespaceSelector": {}}]}  # each target admits its own port
    c = config(stack)
    node_cidrs = list(c.onprem.node_cidrs) if c.onprem else [c.network.vpc_cidr]
    assert nodes["to"] == [{"ipBlock": {"cidr": n}} for n in node_cidrs]
    # The kubelets and node exporters; on premises also the control plane's components
    # (kube-proxy, controller manager, scheduler, etcd), which EKS does not expose.
    control_plane = {10249, 10257, 10259, 2381} if c.onprem else set()
    assert {p["port"] for p in nodes["ports"]} == {10250, 9100} | control_plane
    for name in ("cert-manager", "opencost", "kueue-system", "gpu-operator"):
        if "allow-metrics-scrape" not in fenced.get(name, {}):
            continue
        (rule,) = fenced[name]["allow-metrics-scrape"]["spec"]["ingress"]
        assert rule["from"] == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ]
    opencost = fenced["opencost"]["allow-prometheus"]["spec"]["egress"][0]
    assert opencost["to"][0]["podSelector"] == scrape["podSelector"]
    assert opencost["ports"] == [{"protocol": "TCP", "port": 9090}]


def test_a_fleet_manager_reaches_only_its_workers_api_servers() -> None:
    """onprem-ib bursts to uae-prod: Kueue may reach uae-prod's VPC (its private API
    endpoint, over the site link) and nothing else outside the site."""
    manager = config("onprem-ib")
    assert manager.fleet is not None
    workers = [config(w.stack) for w in manager.fleet.workers]
    rule = policies("onprem-ib")["kueue-system"]["allow-fleet-workers"]["spec"]
    (egress,) = rule["egress"]
    assert egress["to"] == [{"ipBlock": {"cidr": w.network.vpc_cidr}} for w in workers]
    assert {p["port"] for p in egress["ports"]} == {443, 6443}
    assert rule["podSelector"] == {"matchLabels": {"control-plane": "controller-manager"}}
    assert "allow-fleet-workers" not in policies("uae-prod")["kueue-system"]


def _certificates(stack: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (c["metadata"]["namespace"], c["spec"]["secretName"]): c
        for c in kubernetes_objects(stack, "Certificate")
        if "namespace" in c["metadata"]
    }


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_monitoring_serves_tls_from_the_cluster_ca(stack: str) -> None:
    certificates = _certificates(stack)
    values = release_values(stack, "kube-prometheus-stack")
    prometheus = values["prometheus"]["prometheusSpec"]["web"]["tlsConfig"]
    alertmanager = values["alertmanager"]["alertmanagerSpec"]["web"]["tlsConfig"]
    for tls, secret in ((prometheus, PROMETHEUS_TLS), (alertmanager, ALERTMANAGER_TLS)):
        assert tls["cert"]["secret"]["name"] == tls["keySecret"]["name"] == secret
        assert tls["minVersion"] == "TLS13"
        certificate = certificates[("monitoring", secret)]
        assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
    # Prometheus sends alerts and scrapes itself over TLS, checking the server name.
    sender = values["alertmanager"]["alertmanagerSpec"]
    assert sender["scheme"] == "https"
    assert (
        sender["tlsConfig"]["serverName"]
        in certificates[("monitoring", ALERTMANAGER_TLS)]["spec"]["dnsNames"]
    )
    monitor = values["prometheus"]["serviceMonitor"]
    assert monitor["scheme"] == "https"
    assert (
        monitor["tlsConfig"]["serverName"]
        in certificates[("monitoring", PROMETHEUS_TLS)]["spec"]["dnsNames"]
    )
    # Grafana: TLS 1.3 from its certificate's Secret; it reads Prometheus over https.
    grafana = values["grafana"]
    server = grafana["grafana.ini"]["server"]
    assert (server["protocol"], server["min_tls_version"]) == ("https", "TLS1.3")
    (mount,) = grafana["extraSecretMounts"]
    assert server["cert_file"] == f"{mount['mountPath']}/tls.crt"
    assert mount["secretName"] == GRAFANA_TLS and ("monitoring", GRAFANA_TLS) in certificates
    datasource = grafana["sidecar"]["datasources"]["url"]
    assert datasource.startswith(f"https://{PROMETHEUS_SERVICE}.monitoring.svc:")
    assert grafana["env"]["SSL_CERT_FILE"] == f"{mount['mountPath']}/ca.crt"
    assert grafana["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_clients_in_other_namespaces_get_the_cluster_ca(stack: str) -> None:
    certificates = _certificates(stack)
    namespaces = [f"team-{t.name}" for t in config(stack).teams] + ["opencost"]
    for ns in namespaces:
        bundle = certificates[(ns, CA_BUNDLE_SECRET)]
        assert bundle["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER
        assert "server auth" not in bundle["spec"]["usages"]
    issuers = {i["metadata"]["name"]: i for i in kubernetes_objects(stack, "ClusterIssuer")}
    issuer = issuers[CLUSTER_CA_ISSUER]
    (ca,) = [c for c in kubernetes_objects(stack, "Certificate") if c["spec"].get("isCA")]
    assert ca["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    # The CA certificate is signed by a self-signed issuer of the same plan.
    assert issuers[ca["spec"]["issuerRef"]["name"]]["spec"] == {"selfSigned": {}}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_prometheus_scrapes_cert_manager_where_its_namespace_admits_it(stack: str) -> None:
    (monitor,) = [
        m
        for m in kubernetes_objects(stack, "PodMonitor")
        if m["metadata"].get("namespace") == "cert-manager"
    ]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (rule,) = policies(stack)["cert-manager"]["allow-metrics-scrape"]["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [endpoint["port"]]


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_tracking_server_is_only_reachable_over_tls(stack: str) -> None:
    certificates = _certificates(stack)
    assert ("mlflow", tracking.TLS_SECRET) in certificates
    fenced = policies(stack)["mlflow"]
    ports = {p["port"] for r in fenced["mlflow-server"]["spec"]["ingress"] for p in r["ports"]}
    assert ports == {tracking.TLS_PORT}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_inference_proxy_requires_tls_1_3(stack: str) -> None:
    services = kubernetes_objects(stack, "InferenceService")
    assert services, "every shipped stack has an example service"
    certificates = _certificates(stack)
    for service in services:
        predictor = service["spec"]["predictor"]
        (proxy,) = [c for c in predictor["containers"] if c["name"] == "kube-rbac-proxy"]
        assert "--tls-min-version=VersionTLS13" in proxy["args"]
        # It serves the certificate the plan issues for it, from the cluster CA.
        volumes = {v["name"]: v for v in predictor["volumes"]}
        (tls,) = [
            m
            for m in proxy["volumeMounts"]
            if f"--tls-cert-file={m['mountPath']}/tls.crt" in proxy["args"]
        ]
        secret = volumes[tls["name"]]["secret"]["secretName"]
        certificate = certificates[(service["metadata"]["namespace"], secret)]
        assert certificate["spec"]["issuerRef"]["name"] == CLUSTER_CA_ISSUER


# -- Kubeflow Trainer and the feature store ---------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a pod selector (matchLabels and In/Exists expressions) selects ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value = labels.get(expression["key"])
        if expression["operator"] == "In" and value not in expression["values"]:
            return False
        if expression["operator"] == "Exists" and value is None:
            return False
    return True


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_the_trainer_controllers_serve_their_webhooks_to_the_api_server_only(stack: str) -> None:
    fenced = policies(stack)["kubeflow-system"]
    cidrs = [{"ipBlock": {"cidr": c}} for c in api_server_cidrs(stack)]
    # The pods as the pinned charts label them (trainer.manager.selectorLabels and
    # jobset.controller.selectorLabels at kubeflow-trainer 2.3.0 / jobset 0.12.0).
    controllers = {
        "allow-trainer-webhook": {
            "app.kubernetes.io/name": "kubeflow-trainer",
            "app.kubernetes.io/instance": "kubeflow-trainer",
            "app.kubernetes.io/part-of": "kubeflow",
            "app.kubernetes.io/component": "manager",
        },
        "allow-jobset-webhook": {
            "app.kubernetes.io/name": "jobset",
            "app.kubernetes.io/instance": "kubeflow-trainer",
            "app.kubernetes.io/component": "controller",
        },
    }
    for name, labels in controllers.items():
        spec = fenced[name]["spec"]
        assert spec["policyTypes"] == ["Ingress"]
        assert _selects(spec["podSelector"], labels), name
        (rule,) = spec["ingress"]
        assert rule["from"] == cidrs
        assert rule["ports"] == [{"protocol": "TCP", "port": 9443}]  # the webhook port
    assert not _selects(
        fenced["allow-trainer-webhook"]["spec"]["podSelector"], controllers["allow-jobset-webhook"]
    )
    (api,) = fenced["allow-api-server"]["spec"]["egress"]
    assert api["to"] == cidrs


FEATURE_STACKS = [s for s in SHIPPED_STACKS if config(s).features.enabled]


@pytest.mark.parametrize("stack", FEATURE_STACKS)
def test_the_feature_store_reaches_exactly_its_stores(stack: str) -> None:
    """Clients -> proxy -> feature server; the server and the materialisation -> the
    registry database and the online store; nothing else leaves the namespace."""
    c = config(stack)
    fenced = policies(stack)["feast"]
    server = {"app.kubernetes.io/name": "feast-feature-server"}
    proxy = {"app.kubernetes.io/name": "feast-endpoint"}
    materialize = {"app.kubernetes.io/name": "feast-materialize"}
    endpoint = fenced["feast-endpoint"]["spec"]
    assert _selects(endpoint["podSelector"], proxy)
    (clients,) = endpoint["ingress"]
    assert [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            for p in clients["from"]] == list(c.features.client_namespaces)  # fmt: skip
    to_server, to_api = endpoint["egress"]
    assert to_server == {"to": [{"podSelector": {"matchLabels": server}}],
                         "ports": [{"protocol": "TCP", "port": 6566}]}  # fmt: skip
    assert to_api["to"] == [{"ipBlock": {"cidr": x}} for x in api_server_cidrs(stack)]
    (ingress,) = fenced["feast-feature-server"]["spec"]["ingress"]
    assert ingress["from"] == [{"podSelector": {"matchLabels": proxy}}]
    stores = fenced["feast-stores"]["spec"]
    assert _selects(stores["podSelector"], server) and _selects(stores["podSelector"], materialize)
    assert not _selects(stores["podSelector"], proxy)
    ports = {p["port"] for r in stores["egress"] for p in r["ports"]}
    assert ports == {5432, 6379}
    if c.onprem is None:
        assert [r["to"] for r in stores["egress"]] == [[{"ipBlock": {"cidr": c.network.vpc_cidr}}]]
        aws = fenced["feast-materialize-aws"]["spec"]
        assert aws["podSelector"] == {"matchLabels": materialize}
        assert {p["port"] for r in aws["egress"] for p in r["ports"]} == {443, 80}
    else:
        peers = [peer["podSelector"]["matchLabels"] for r in stores["egress"] for peer in r["to"]]
        assert peers == [{"cnpg.io/cluster": "feast-registry"},
                         {"app.kubernetes.io/instance": "feast-online-store"}]  # fmt: skip
        (online,) = fenced["feast-online-store"]["spec"]["ingress"]
        assert online["from"] == [{"podSelector": stores["podSelector"]}]
        operator = policies(stack)["cnpg-system"]["allow-feast-registry"]["spec"]
        (rule,) = operator["egress"]
        assert rule["to"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "feast"}},
                "podSelector": {"matchLabels": {"cnpg.io/cluster": "feast-registry"}},
            }
        ]
    # The workloads carry the labels the policies select.
    (cronjob,) = [
        j for j in kubernetes_objects(stack, "CronJob") if j["metadata"]["namespace"] == "feast"
    ]
    pod_labels = cronjob["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    assert _selects(stores["podSelector"], pod_labels)
    # Each client namespace may reach the endpoint, and only it.
    for ns in c.features.client_namespaces:
        (rule,) = policies(stack)[ns]["allow-feast"]["spec"]["egress"]
        assert rule["to"][0]["podSelector"] == {"matchLabels": proxy}
        assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]


@pytest.mark.parametrize("stack", FEATURE_STACKS)
def test_the_feature_endpoint_requires_tls_1_3(stack: str) -> None:
    (deployment,) = [
        d
        for d in kubernetes_objects(stack, "Deployment")
        if d["metadata"]["namespace"] == "feast" and d["metadata"]["name"] == "feast-endpoint"
    ]
    (proxy,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--tls-min-version=VersionTLS13" in proxy["args"]
