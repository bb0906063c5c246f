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
}


def config(stack: str) -> StackConfig:
    return parse_stack_config(load_stack_file(stack)[0])


def objects(stack: str, kind: str) -> list[dict[str, Any]]:
    registrations, _ = shipped_plan(stack)
    return [
        r.inputs
        for r in registrations.values()
        if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind
    ]


def policies(stack: str) -> dict[str, dict[str, dict[str, Any]]]:
    """namespace -> policy name -> policy."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for p in objects(stack, "NetworkPolicy"):
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
    for namespace in objects(stack, "Namespace"):
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
    namespaces = {n["metadata"]["name"] for n in objects(stack, "Namespace")}
    platform = namespaces - {n for n in namespaces if n.startswith("team-")} - {"mlflow"}
    assert platform <= set(PLATFORM_ALLOWS), platform - set(PLATFORM_ALLOWS)
    for name in platform:
        expected = set(PLATFORM_ALLOWS[name])
        if name == "monitoring" and config(stack).monitoring.grafana_access != "port-forward":
            expected.add("allow-grafana-load-balancer")
        if name == "kueue-system" and config(stack).fleet is not None:
            expected.add("allow-fleet-workers")
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
    return allows


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
        for c in objects(stack, "Certificate")
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
    issuers = {i["metadata"]["name"]: i for i in objects(stack, "ClusterIssuer")}
    issuer = issuers[CLUSTER_CA_ISSUER]
    (ca,) = [c for c in objects(stack, "Certificate") if c["spec"].get("isCA")]
    assert ca["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    # The CA certificate is signed by a self-signed issuer of the same plan.
    assert issuers[ca["spec"]["issuerRef"]["name"]]["spec"] == {"selfSigned": {}}


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_prometheus_scrapes_cert_manager_where_its_namespace_admits_it(stack: str) -> None:
    (monitor,) = [
        m for m in objects(stack, "PodMonitor") if m["metadata"].get("namespace") == "cert-manager"
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
    services = objects(stack, "InferenceService")
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
