"""The TLS settings of the charts, checked against what the charts and the operator read:
kube-prometheus-stack's and Grafana's values.yaml (a misspelt key is ignored by Helm),
the Prometheus Operator's CRD schemas for ``web.tlsConfig`` and the alerting and scrape
``tlsConfig`` (strict: a field the operator does not know fails), and the cluster CA's
objects against cert-manager's CRDs. The network operator's values against its chart.
Sources and versions: tests/k8s/vendor/charts/README.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from modules.k8s.fabric.spec import network_operator_values
from modules.k8s.monitoring.spec import (
    MonitoringSpec,
    kube_prometheus_stack_values,
    monitoring_certificates,
    monitoring_network_policies,
)
from modules.k8s.netpol import ClusterNetwork
from modules.k8s.pki.spec import (
    ca_bundle,
    cert_manager_pod_monitor,
    network_policies,
    serving_certificate,
)
from tests.k8s.crd_checks import crd_errors
from tests.k8s.test_serving import unknown_keys
from tests.k8s.vendored_crds import _strict
from tests.support.k8s_schema import schema_errors

VENDOR = Path(__file__).resolve().parent / "vendor" / "charts"
NETWORK = ClusterNetwork(("10.20.0.10/32",), ("10.20.0.0/22",))
VALUES = kube_prometheus_stack_values(MonitoringSpec(), "gp3-encrypted", True)
#: Keys the charts' templates read that their values.yaml only shows commented out:
#: key -> (vendored template, what it reads).
TEMPLATE_KEYS = {
    "grafana.sidecar.datasources.url": (
        "kube-prometheus-stack-88.5.3-configmaps-datasources.yaml",
        ".Values.grafana.sidecar.datasources.url",
    ),
    "grafana.sidecar.datasources.alertmanager.url": (
        "kube-prometheus-stack-88.5.3-configmaps-datasources.yaml",
        ".Values.grafana.sidecar.datasources.alertmanager.url",
    ),
    "grafana.fullnameOverride": ("grafana-12.11.1-_helpers.tpl", ".Values.fullnameOverride"),
    "grafana.adminPassword": ("grafana-12.11.1-_config.tpl", ".Values.adminPassword"),
}
#: Values the charts copy into the pod spec as they are (Kubernetes' own fields).
FREE_FORM = ("grafana.ini", "readinessProbe", "livenessProbe")


def chart(name: str) -> dict[str, Any]:
    return yaml.safe_load((VENDOR / name).read_text())  # type: ignore[no-any-return]


def operator_schema(name: str) -> jsonschema.Draft7Validator:
    schemas = json.loads((VENDOR / "prometheus-operator-v0.93.1-web-tls.json").read_text())
    return jsonschema.Draft7Validator(_strict(schemas[name]))


def errors(validator: jsonschema.Draft7Validator, value: Any) -> list[str]:
    return [e.message for e in validator.iter_errors(value)]


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def test_every_monitoring_value_is_a_key_of_the_charts() -> None:
    kps = chart("kube-prometheus-stack-88.5.3-values.yaml")
    # Grafana's keys are checked against the Grafana chart (a subchart: its values are
    # the `grafana:` section, over the subchart's defaults). grafana.ini is free-form
    # (it becomes the ini file). kube-state-metrics' and the node exporter's own
    # charts are not vendored: their sections are left out of this check.
    kps["grafana"] = _merged(chart("grafana-12.11.1-values.yaml"), kps["grafana"])
    for key in FREE_FORM:
        kps["grafana"][key] = {}
    skipped = ("kube-state-metrics", "prometheus-node-exporter")
    ours = {k: v for k, v in VALUES.items() if k not in skipped}
    missing = unknown_keys(ours, kps)
    assert set(missing) <= set(TEMPLATE_KEYS), missing
    for template, read in TEMPLATE_KEYS.values():
        assert read in (VENDOR / template).read_text()
    assert unknown_keys({"prometheus": {"prometheusSpec": {"webb": {}}}}, kps) == [
        "prometheus.prometheusSpec.webb"
    ]


def test_prometheus_and_alertmanager_serve_tls_1_3_as_the_operator_reads_it() -> None:
    prometheus = VALUES["prometheus"]["prometheusSpec"]["web"]
    alertmanager = VALUES["alertmanager"]["alertmanagerSpec"]["web"]
    assert errors(operator_schema("prometheus.spec.web"), prometheus) == []
    assert errors(operator_schema("alertmanager.spec.web"), alertmanager) == []
    assert prometheus["tlsConfig"]["minVersion"] == alertmanager["tlsConfig"]["minVersion"]
    # The strict schema refuses what the operator would not read.
    assert errors(operator_schema("prometheus.spec.web"), {"tlsConfig": {"minVerion": "TLS13"}})


def test_prometheus_sends_alerts_over_tls_as_the_operator_reads_it() -> None:
    sender = VALUES["alertmanager"]["alertmanagerSpec"]
    # kube-prometheus-stack puts scheme and tlsConfig on the Prometheus' alerting
    # endpoint (templates/prometheus/prometheus.yaml).
    endpoint = {
        "namespace": "monitoring",
        "name": "kube-prometheus-stack-alertmanager",
        "port": "http-web",
        "scheme": sender["scheme"],
        "tlsConfig": sender["tlsConfig"],
        "apiVersion": "v2",
    }
    assert errors(operator_schema("prometheus.spec.alerting.alertmanagers.items"), endpoint) == []


def _monitor(endpoint: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "check", "namespace": "monitoring"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "endpoints": [endpoint]},
    }


@pytest.mark.parametrize(
    "path", ["prometheus.serviceMonitor", "alertmanager.serviceMonitor", "grafana.serviceMonitor"]
)
def test_the_self_scrapes_are_https_endpoints_the_operator_accepts(path: str) -> None:
    first, second = path.split(".")
    monitor = VALUES[first][second]
    endpoint = {"port": "web", "scheme": monitor["scheme"], "tlsConfig": monitor["tlsConfig"]}
    assert crd_errors([_monitor(endpoint)]) == []
    assert crd_errors([_monitor({**endpoint, "tlsConfig": {"servername": "x"}})])


def test_monitoring_objects_pass_their_schemas() -> None:
    certificates = monitoring_certificates()
    assert crd_errors(certificates) == []
    assert all(c["spec"]["issuerRef"]["kind"] == "ClusterIssuer" for c in certificates)
    fences = monitoring_network_policies(NETWORK, "internal-load-balancer", "opencost")
    assert schema_errors(fences, "1.33") == []


def test_the_pki_objects_pass_their_schemas() -> None:
    assert crd_errors([serving_certificate("x-tls", "ns", ["x.ns.svc"]), ca_bundle("ns")]) == []
    assert crd_errors([cert_manager_pod_monitor()]) == []
    assert schema_errors(network_policies(NETWORK), "1.33") == []


def test_network_operator_values_exist_in_the_pinned_chart() -> None:
    """v26.4.1 has no ``deployCR`` (upstream removed the chart's NicClusterPolicy in
    2024); a key the chart does not read must not be set."""
    upstream = chart("network-operator-v26.4.1-values.yaml")
    assert unknown_keys(network_operator_values(), upstream) == []
    assert unknown_keys({"deployCR": False}, upstream) == ["deployCR"]
