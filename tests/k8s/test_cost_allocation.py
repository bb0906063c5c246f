"""Cost allocation: OpenCost's values exist in the pinned chart, the cost rules and the
dashboard parse as PromQL and read only metrics OpenCost, kube-state-metrics or our
own recording rules export, budgets alert at 80% and 100%, and the unit prices price
a GPU node as the snapshot does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from modules.k8s.cost.spec import (
    KUBE_STATE_METRICS,
    OPENCOST_METRICS,
    CostInputs,
    UnitPrices,
    budget_alerts,
    cost_dashboard,
    cost_rule,
    llm_gateway_rows,
    opencost_values,
    recording_rules,
)
from modules.k8s.gateway import manifests as gateway
from modules.k8s.monitoring.spec import PROMETHEUS_TLS, monitoring_certificates
from modules.k8s.pki.spec import CA_BUNDLE_SECRET, CA_KEY
from stacks.config import parse_stack_config
from stacks.cost import unit_prices
from stacks.offline_plan import load_stack_file
from stacks.pricing import load_snapshot
from tests.conftest import shipped_plan
from tests.k8s.crd_checks import crd_errors

VENDOR = Path(__file__).resolve().parent / "vendor" / "opencost" / "values.yaml"
INPUTS = CostInputs("ae-abudhabi-dc1", UnitPrices(0.01, 0.002, 2.0, "test"), (("nlp", 1000.0),))


def _unknown_keys(ours: Any, upstream: Any, path: str = "") -> list[str]:
    if not isinstance(ours, dict) or not isinstance(upstream, dict) or not upstream:
        return []  # a free-form value upstream ({} / [] / scalar): anything goes below
    missing = []
    for key, value in ours.items():
        if key not in upstream:
            missing.append(f"{path}{key}")
        else:
            missing += _unknown_keys(value, upstream[key], f"{path}{key}.")
    return missing


def test_every_opencost_value_is_a_key_of_the_pinned_chart() -> None:
    upstream = yaml.safe_load(VENDOR.read_text())
    assert _unknown_keys(opencost_values(INPUTS), upstream) == []
    assert _unknown_keys({"opencost": {"exportr": {}}}, upstream) == ["opencost.exportr"]


def test_opencost_uses_the_platform_prometheus_and_local_prices_only() -> None:
    top = opencost_values(INPUTS)
    values = top["opencost"]
    assert values["prometheus"]["external"] == {
        "enabled": True,
        "url": "https://kube-prometheus-stack-prometheus.monitoring.svc:9090",
    }
    # Over TLS, verified with the cluster CA only (Go reads SSL_CERT_FILE), which the
    # pod mounts from the namespace's CA bundle (the key Prometheus' certificate names).
    env = {e["name"]: e["value"] for e in values["exporter"]["env"]}
    (mount,) = values["exporter"]["extraVolumeMounts"]
    (volume,) = top["extraVolumes"]
    assert volume["name"] == mount["name"]
    assert volume["secret"]["secretName"] == CA_BUNDLE_SECRET
    assert env["SSL_CERT_FILE"] == f"{mount['mountPath']}/{volume['secret']['items'][0]['path']}"
    assert volume["secret"]["items"][0]["key"] == CA_KEY
    # The certificate Prometheus serves carries the URL's host.
    (prometheus,) = [
        c for c in monitoring_certificates() if c["metadata"]["name"] == PROMETHEUS_TLS
    ]
    host = values["prometheus"]["external"]["url"].split("//")[1].split(":")[0]
    assert host in prometheus["spec"]["dnsNames"]
    assert {"name": "USE_CUSTOM_PROVIDER", "value": "true"} in values["exporter"]["env"]
    assert values["customPricing"]["enabled"] is True
    assert values["customPricing"]["costModel"]["GPU"] == "2.000000"
    # Nothing leaves: no cloud-cost (billing export) integration, no UI, no MCP server.
    assert values["cloudCost"]["enabled"] is False
    assert values["ui"]["enabled"] is False and values["mcp"]["enabled"] is False


def _expressions() -> list[str]:
    rule = cost_rule(INPUTS)
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    exprs += [t["expr"] for p in cost_dashboard()["panels"] for t in p["targets"]]
    return exprs


@pytest.mark.parametrize("expr", _expressions())
def test_cost_expressions_parse(expr: str) -> None:
    promql_parser.parse(expr)


def _metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(str(node.name))
        for attr in ("expr", "lhs", "rhs", "vector_selector"):
            child = getattr(node, attr, None)
            if child is not None and child is not node:
                walk(child)
        for arg in getattr(node, "args", None) or []:
            walk(arg)

    walk(promql_parser.parse(expr))
    return names


def test_cost_expressions_read_only_exported_metrics() -> None:
    recorded = {r["record"] for r in recording_rules()}
    exported = set(OPENCOST_METRICS) | set(KUBE_STATE_METRICS) | recorded
    # The LLM gateway's rows: AI Gateway's gen_ai metrics and the gateway's spend series.
    exported |= {gateway.TOKEN_METRIC, gateway.REQUEST_METRIC, gateway.COST_SERIES}
    used: set[str] = set()
    for expr in _expressions():
        used |= _metric_names(expr)
    assert used and used <= exported, used - exported
    assert {"container_gpu_allocation", "node_gpu_hourly_cost", "kube_pod_labels"} <= used


def test_budget_alerts_fire_at_80_and_100_percent() -> None:
    alerts = budget_alerts([("nlp", 60000.0)])
    assert [a["alert"] for a in alerts] == ["TeamBudget80Percent", "TeamBudget100Percent"]
    assert alerts[0]["expr"].endswith("> 48000.00") and alerts[1]["expr"].endswith("> 60000.00")
    assert all('namespace="team-nlp"' in a["expr"] for a in alerts)
    assert [a["labels"]["severity"] for a in alerts] == ["warning", "critical"]
    assert crd_errors([cost_rule(INPUTS)]) == []


def test_a_gpu_node_is_priced_as_the_snapshot_lists_it() -> None:
    config = parse_stack_config(load_stack_file("uae-prod")[0])
    snapshot = load_snapshot()
    prices = unit_prices(config, snapshot)
    assert prices is not None  # every shipped pool has a verified price
    p5en = snapshot.instance_types["p5en.48xlarge"]
    node = (
        p5en.vcpus * prices.cpu_usd
        + p5en.memory_gib * prices.memory_gib_usd
        + p5en.gpus * prices.gpu_usd
    )
    assert node == pytest.approx(p5en.usd_per_hour)
    system = snapshot.instance_types["m7i.2xlarge"]
    assert (
        system.vcpus * prices.cpu_usd + system.memory_gib * prices.memory_gib_usd
        == pytest.approx(system.usd_per_hour)
    )


@pytest.mark.parametrize("stack", ["onprem-ib", "uae-prod"])
def test_every_shipped_cluster_runs_opencost_with_its_budgets(stack: str) -> None:
    registrations, _ = shipped_plan(stack)
    releases = [r for r in registrations.values() if r.type == "kubernetes:helm.sh/v3:Release"]
    (opencost,) = [r for r in releases if r.inputs["name"] == "opencost"]
    assert opencost.inputs["version"] == "2.5.17"
    rules = [
        r.inputs
        for r in registrations.values()
        if r.type.endswith(":PrometheusRule") and r.inputs["metadata"]["name"] == "gpuplatform-cost"
    ]
    (rule,) = rules
    alerts = [a for g in rule["spec"]["groups"] for a in g["rules"] if "alert" in a]
    config = parse_stack_config(load_stack_file(stack)[0])
    assert {a["labels"]["team"] for a in alerts} == {b.team for b in config.budgets}
    (dashboard,) = [
        r.inputs
        for r in registrations.values()
        if r.type == "kubernetes:core/v1:ConfigMap"
        and r.inputs["metadata"]["name"] == "gpuplatform-cost-dashboard"
    ]
    model = json.loads(next(iter(dashboard["data"].values())))
    assert len(model["panels"]) == 6 + len(llm_gateway_rows())
    assert any(re.search(r"queue_name", t["expr"]) for p in model["panels"] for t in p["targets"])
